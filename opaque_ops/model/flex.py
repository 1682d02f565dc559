"""Flexbuffer custom options: the attribute maps the TF converter writes for custom ops.

Encoding and decoding use the ``flexbuffers`` module of the flatbuffers
package; the decoder treats its input as untrusted and bounds the work it does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError, ModelError

if TYPE_CHECKING:
    from flatbuffers import flexbuffers

# The flatbuffers package's flexbuffers module, imported on first use (see
# _flexbuffers), not with this module: most models carry no flexbuffers, and
# the import is a millisecond of every process's start-up.
_flexbuffers_module = None


def _flexbuffers():
    """The ``flexbuffers`` module (imported at the first call, then kept here)."""
    global _flexbuffers_module
    if _flexbuffers_module is None:
        from flatbuffers import flexbuffers

        _flexbuffers_module = flexbuffers
    return _flexbuffers_module


# What a flexbuffer map key can be.  The format stores a key as a
# NUL-terminated byte string, so a NUL would cut it short.  Beyond that, the
# flatbuffers package's Builder.Key encodes a str as ASCII (anything else is a
# UnicodeEncodeError from deep inside it), its reader and so
# decode_flex_options decode keys as ASCII, and a kernel looks a key up by a C
# string (oo_flex_get, TFLite's flexbuffers::Map::operator[]).  An ASCII str
# without NUL is what every one of them agrees on; the empty string is one
# (the encoder, both readers and strcmp handle it).  Checked here, the one
# pass every mapping goes through before encoding (flex_options, hence
# ModelBuilder.add_custom_op, build_op_model and run_op), so the error names
# the key and where it is, not a codec position.
def _check_key(key: Any, where: str) -> None:
    """Raise if ``key`` cannot be a flexbuffer map key (see the comment above)."""
    if not isinstance(key, str):
        raise TypeError(
            f"flexbuffer map key {key!r} in {where} is of type {type(key).__name__}; "
            "option keys must be str (ASCII text without NUL), the name a kernel looks the value up by"
        )
    if not key.isascii():
        bad = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in dict.fromkeys(c for c in key if ord(c) > 127))
        raise InvalidArgumentError(
            f"flexbuffer map key {key!r} in {where} has non-ASCII characters: {bad}; "
            "flexbuffer keys are NUL-terminated ASCII strings (the flatbuffers encoder and opaque_ops' "
            "decoder take nothing else), so rename the option with ASCII characters only, "
            "matching the name the kernel looks up"
        )
    if "\0" in key:
        raise InvalidArgumentError(
            f"flexbuffer map key {key!r} in {where} contains a NUL character at position {key.index(chr(0))}; "
            "flexbuffer keys are NUL-terminated, so the key would end there: remove the NUL"
        )


def _flex_normalize(value: Any, where: str) -> Any:
    """Convert numpy values to Python ones and reject unsupported types.

    Done as a separate pass because flexbuffers.Builder's Map() context
    manager replaces an exception raised inside it with its own error.
    """
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            _check_key(k, where)
            out[k] = _flex_normalize(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_flex_normalize(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"cannot encode {type(value).__name__} as a flexbuffer value ({where})")


_F32_MAX = 3.4028234663852886e38
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def _flex_int(fbb: flexbuffers.Builder, value: int) -> None:
    if _INT64_MIN <= value <= _INT64_MAX:
        fbb.Int(value)
    elif value <= _UINT64_MAX:
        fbb.UInt(value)
    else:
        raise ValueError(f"integer option {value} does not fit in 64 bits")


def _flex_float(fbb: flexbuffers.Builder, value: float) -> None:
    # The flexbuffers package picks the width by packing as float32 first,
    # which raises OverflowError for finite doubles beyond float32's range.
    fbb.Float(value, 8 if abs(value) > _F32_MAX and value == value and abs(value) != float("inf") else 0)


def _flex_add(fbb: flexbuffers.Builder, value: Any) -> None:
    if value is None:
        fbb.Null()
    elif isinstance(value, bool):
        fbb.Bool(value)
    elif isinstance(value, int):
        _flex_int(fbb, value)
    elif isinstance(value, float):
        _flex_float(fbb, value)
    elif isinstance(value, str):
        fbb.String(value)
    elif isinstance(value, bytes):
        fbb.Blob(value)
    elif isinstance(value, dict):
        with fbb.Map():
            for k in sorted(value):
                fbb.Key(k)
                _flex_add(fbb, value[k])
    else:
        items = value
        # Homogeneous numeric lists become typed vectors, as TF's converter
        # writes them; TFLite kernels read them with AsTypedVector().
        if items and all(isinstance(v, bool) for v in items):
            fbb.TypedVectorFromElements(items, _flexbuffers().Type.BOOL)
        elif items and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            if not all(_INT64_MIN <= v <= _INT64_MAX for v in items):
                raise ValueError(f"integer list option {items!r} has values outside the int64 range")
            fbb.TypedVectorFromElements(items, _flexbuffers().Type.INT)
        elif items and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            with fbb.TypedVector():
                for v in items:
                    _flex_float(fbb, float(v))
        else:
            # Strings and mixed lists: typed string vectors are deprecated in
            # FlexBuffers, so use an untyped vector.
            with fbb.Vector():
                for v in items:
                    _flex_add(fbb, v)


def flex_options(options: Mapping[str, Any]) -> bytes:
    """Encode custom-op options as a FlexBuffer map.

    Parameters
    ----------
    options : mapping of str to value
        Keys are ASCII strings without NUL (the empty string is allowed).
        Values may be ``bool``, ``int``, ``float``, ``str``, ``bytes``, nested
        mappings, or lists.  Lists of ints or floats (or bools) are written as
        typed vectors; other lists as untyped vectors.  numpy scalars and 1-D
        arrays are accepted and converted to Python values first.

    Returns
    -------
    bytes
        The FlexBuffer, keys sorted, as TFLite custom kernels expect to read it
        with ``flexbuffers::GetRoot(buffer, length).AsMap()``.

    Raises
    ------
    TypeError
        If a key is not a string or a value has an unsupported type.
    InvalidArgumentError
        If a key (at any depth) has a non-ASCII or NUL character: flexbuffer
        keys are NUL-terminated ASCII strings.  It is a ``ValueError``.
    ValueError
        If an integer does not fit in 64 bits.
    """
    if not isinstance(options, Mapping):
        raise TypeError(f"flex_options needs a mapping, got {type(options).__name__}")
    fbb = _flexbuffers().Builder()
    try:
        _flex_add(fbb, _flex_normalize(options, "options"))
    except RuntimeError as exc:
        # The builder's Map()/Vector() context managers replace an error raised
        # inside them with their own "must be even number of keys"; surface ours.
        if isinstance(exc.__context__, (ValueError, TypeError)):
            raise exc.__context__ from None
        raise
    return bytes(fbb.Finish())


_FLEX_MAX_DEPTH = 64


class _FlexBudget:
    def __init__(self, limit: int):
        self.left = limit

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            # Offsets in a flexbuffer can be shared, so a small hostile buffer
            # can describe an exponentially large value.
            raise ModelError("flexbuffer expands to an implausibly large value")


def _flex_value(ref: Any, budget: _FlexBudget, depth: int, size: int) -> Any:
    budget.take()
    if depth > _FLEX_MAX_DEPTH:
        raise ModelError("flexbuffer is nested too deeply")
    T = _flexbuffers().Type
    t = ref._type
    if t == T.NULL:
        return None
    if t == T.BOOL:
        return ref.AsBool
    if ref.IsInt:
        return ref.AsInt
    if ref.IsFloat:
        return ref.AsFloat
    if t == T.KEY:
        return ref.AsKey
    if t == T.STRING:
        s = ref.AsStringBytes
        return s.decode("utf-8")
    if t == T.BLOB:
        # Ref.AsBlob already hands back the blob's bytes (a slice of the
        # buffer), not the Blob accessor that has a .Bytes property.
        return bytes(ref.AsBlob)
    if t == T.MAP:
        m = ref.AsMap
        n = len(m)
        if n * 2 > size:
            raise ModelError(f"flexbuffer map claims {n} entries in a {size}-byte buffer")
        keys = m.Keys
        values = m.Values
        if len(keys) != n:
            raise ModelError("flexbuffer map has mismatched key and value counts")
        out = {}
        for i in range(n):
            k = _flex_value(keys[i], budget, depth + 1, size)
            if not isinstance(k, str):
                raise ModelError("flexbuffer map key is not a string")
            out[k] = _flex_value(values[i], budget, depth + 1, size)
        return out
    if t == T.VECTOR:
        v = ref.AsVector
        n = len(v)
        if n > size:
            raise ModelError(f"flexbuffer vector claims {n} elements in a {size}-byte buffer")
        return [_flex_value(v[i], budget, depth + 1, size) for i in range(n)]
    if ref.IsTypedVector or ref.IsFixedTypedVector:
        v = ref.AsTypedVector if ref.IsTypedVector else ref.AsFixedTypedVector
        n = len(v)
        if n > size:
            raise ModelError(f"flexbuffer vector claims {n} elements in a {size}-byte buffer")
        budget.take(n)
        return [_flex_value(v[i], budget, depth + 1, size) for i in range(n)]
    raise ModelError(f"unsupported flexbuffer value type {int(t)}")


def decode_flex_options(data: bytes | bytearray | memoryview) -> dict:
    """Decode a FlexBuffer map (custom-op options) into a dict.

    Parameters
    ----------
    data : bytes-like
        The FlexBuffer bytes, e.g. an operator's ``custom_options``.

    Returns
    -------
    dict
        Keys are strings; values are ``int``, ``float``, ``bool``, ``str``,
        ``bytes``, ``None``, lists or nested dicts.

    Raises
    ------
    ModelError
        If the bytes are not a well-formed FlexBuffer whose root is a map.
    """
    fb = _flexbuffers()  # (outside the try below: a failed import is not a malformed buffer)
    buf = bytes(data)
    if len(buf) < 3:
        raise ModelError(f"flexbuffer of {len(buf)} bytes is too short (needs at least 3)")
    try:
        root = fb.GetRoot(buf)
        if not root.IsMap:
            raise ModelError("flexbuffer root is not a map")
        value = _flex_value(root, _FlexBudget(16 * len(buf) + 1024), 0, len(buf))
    except ModelError:
        raise
    except (Exception, RecursionError) as exc:  # the flexbuffers reader raises many kinds
        raise ModelError(f"malformed flexbuffer: {type(exc).__name__}: {exc}") from None
    return value


# FlexBuffers' root: the buffer ends with the root value's packed type (type
# << 2 | bit width) and then the root's byte width (flatbuffers'
# flexbuffers.GetRoot reads exactly these two bytes).  A map is type 9.
_FBT_MAP = 9


def flex_map_or_none(data: bytes | bytearray | memoryview) -> dict | None:
    """:func:`decode_flex_options` of ``data``, or None where it raises :class:`ModelError`.

    How the model reader decodes an operator's custom options: many custom
    ops (MediaPipe's among them) store a plain C struct there, not a
    flexbuffer.  The root's packed type (the second-to-last byte) already
    tells that such bytes are not a flexbuffer map, which decoding would
    refuse, so they are answered without importing the flexbuffers module
    (with the flatbuffers package, two milliseconds of a first start).  Only
    the type is looked at: the Python and C++ readers both accept root widths
    other than 1, 2, 4 and 8.
    """
    buf = bytes(data)
    if len(buf) < 3 or buf[-2] >> 2 != _FBT_MAP:
        return None
    try:
        return decode_flex_options(buf)
    except ModelError:
        return None
