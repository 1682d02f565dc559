"""What both model readers decode a model's fields with, and the compiled reader's spec.

The tables of tensor types and builtin options, the quantization of a tensor
without one, and the decoding of custom options: shared by the Python
reader (:mod:`~opaque_ops.model.parser`) and the compiled one
(``c/src/modelreader.c``, which gets them in :func:`_compiled_spec`).  Apart
from the parser so that a first start whose model the compiled reader reads
does not unmarshal the parser; apart from :mod:`~opaque_ops.model.reader`
so that a start from the model's record builds none of these tables.
"""

from __future__ import annotations

import numpy as np

from .parts import OpInfo, TensorInfo
from .schema import (
    _CUSTOM,
    _OPTION_FIELDS,
    _OPTIONS_TYPE_NAMES,
    _PADDINGS,
    _TYPE_TO_NUMPY,
    ACTIVATIONS,
    BUILTIN_OPERATOR_NAMES,
    TENSOR_TYPE_NAMES,
)

_F4, _I8_DT = np.dtype("<f4"), np.dtype("<i8")
_TYPE_NAME = {c: TENSOR_TYPE_NAMES.get(c, f"UNKNOWN_{c}") for c in range(-128, 128)}
_DTYPE = {c: _TYPE_TO_NUMPY.get(c) for c in range(-128, 128)}
# Shared by every tensor without quantization; read-only so that no caller
# can change them for all.
_NO_SCALES = np.zeros(0, np.float32)
_NO_ZERO_POINTS = np.zeros(0, np.int64)
_NO_SCALES.flags.writeable = False
_NO_ZERO_POINTS.flags.writeable = False

# Builtin option tables, per union type: (layout, [(field, slot, kind code, default, names)]).
_ACT_NAMES = {v: k for k, v in ACTIVATIONS.items()}
_PAD_NAMES = {v: k for k, v in _PADDINGS.items()}
_K_INTS, _K_I8, _K_U8, _K_I32, _K_F32, _K_BOOL, _K_STR = range(7)
_KINDS = {
    "[i32]": (_K_INTS, 4, None),
    "act": (_K_I8, 1, _ACT_NAMES),
    "pad": (_K_I8, 1, _PAD_NAMES),
    "dtype": (_K_I8, 1, TENSOR_TYPE_NAMES),
    "i8": (_K_I8, 1, {}),  # a byte enum read as its number (weights_format, mirror pad mode)
    "u8": (_K_U8, 1, None),
    "i32": (_K_I32, 4, None),
    "f32": (_K_F32, 4, None),
    "bool": (_K_BOOL, 1, None),
    "str": (_K_STR, 4, None),  # (VAR_HANDLE's names: only VarHandleOptions has one)
}


def _option_readers() -> dict[int, tuple]:
    out = {}
    for type_, name in _OPTIONS_TYPE_NAMES.items():
        fields = _OPTION_FIELDS.get(name)
        if fields is None:
            out[type_] = ((), None)
            continue
        sizes = [0] * (max((slot for _, slot, _, _ in fields), default=-1) + 1)
        readers = []
        for fname, slot, kind, default in fields:
            code, size, names = _KINDS[kind]
            sizes[slot] = size
            readers.append((fname, slot, code, default, names))
        out[type_] = (tuple(sizes), readers)
    return out


_OPTION_READERS = _option_readers()


def _compiled_spec() -> tuple:
    """What the compiled reader builds with, in the order c/src/modelreader.c's SPEC_* names."""
    # It creates TensorInfo and OpInfo without their __init__, setting the
    # fields in order, as the dataclass __init__ does: nothing more may run.
    for cls in (TensorInfo, OpInfo):
        if hasattr(cls, "__post_init__") or "__setattr__" in cls.__dict__:
            raise TypeError(f"{cls.__name__} does more in __init__ than set its fields")
    # (Built at a process's first read: only the union types that have readers are visited.)
    options = [((), None)] * 256
    for t, (sizes, readers) in _OPTION_READERS.items():
        if not 0 <= t < 256:
            continue
        if readers is not None:
            for _fname, _slot, code, _default, names in readers:
                if code == _K_I8 and type(names) is not dict:
                    raise TypeError("an enum option's names must be a dict")
            readers = tuple(tuple(r) for r in readers)
        options[t] = (tuple(sizes), readers)
    return (
        TensorInfo,
        TensorInfo._FIELDS,
        OpInfo,
        OpInfo._FIELDS,
        tuple(_DTYPE[c] for c in range(-128, 128)),
        tuple(_TYPE_NAME[c] for c in range(-128, 128)),
        _NO_SCALES,
        _NO_ZERO_POINTS,
        ("scales", "zero_points", "quantized_dimension"),
        _quantization,
        dict(BUILTIN_OPERATOR_NAMES),
        tuple(options),
        _flex_or_none,
        _CUSTOM,
    )


def _quantization(buf: bytes, s0: int, sn: int, z0: int, zn: int, qdim: int) -> dict:
    # _tensor's quantization dict from the vectors the compiled reader checked.
    scales = (
        np.frombuffer(buf, dtype=_F4, count=sn, offset=s0).copy().astype(np.float32, copy=False) if sn else _NO_SCALES
    )
    zps = (
        np.frombuffer(buf, dtype=_I8_DT, count=zn, offset=z0).copy().astype(np.int64, copy=False)
        if zn
        else _NO_ZERO_POINTS
    )
    return {"scales": scales, "zero_points": zps, "quantized_dimension": qdim}


def _flex_or_none(custom_options: bytes) -> dict | None:
    # How both readers decode custom options (_operator, and the compiled
    # reader through its spec; anything else this raises is raised through
    # the compiled reader, and the Python reader runs).
    if len(custom_options) < 3 or custom_options[-2] >> 2 != _FBT_MAP:
        # Not a flexbuffer map (flex_map_or_none's first test, made here
        # too): most custom options are a C struct, MediaPipe's among them,
        # and this answers them without importing model.flex (0.4 ms of a
        # first start).
        return None
    from .flex import flex_map_or_none  # on first use (see model/__init__'s _LAZY)

    return flex_map_or_none(custom_options)


# flexbuffers' type code of a map (FBT_MAP): a root's packed type byte is
# ``type << 2 | bit width``.
_FBT_MAP = 9
