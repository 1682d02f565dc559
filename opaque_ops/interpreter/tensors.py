"""Tensors as the Interpreter shows them: details dicts, copies in and out, ``tensor()`` views.

Shared by :class:`~opaque_ops.Interpreter` and :class:`~opaque_ops.SignatureRunner`;
the callers hold the interpreter's lock.
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import InvalidInputError, ModelError, NotAllocatedError, ReadOnlyTensorError, UnsupportedError

# kTfLiteString.  Its values are not a numpy array in TFLite's memory but
# TFLite's string buffer (string_util.h: int32 count, int32 offsets[count + 1]
# from the buffer's start, then the bytes), read and written by copy here.
STRING = 5
# What the details report for a string tensor: ai-edge-litert's np.bytes_,
# so the usual port idiom np.array(values, dtype=details["dtype"]) builds an
# array set_tensor takes (get_tensor returns an object array of bytes, as
# litert does: np.bytes_ arrays drop trailing NUL bytes).
STRING_DTYPE = np.dtype(np.bytes_)

# TfLiteType values without a numpy equivalent, named for messages.
_TYPE_NAMES = {0: "no type", 5: "string", 14: "resource", 15: "variant", 18: "int4", 19: "bfloat16"}


def type_name(t) -> str:
    return _TYPE_NAMES.get(t.type, f"TfLiteType {t.type}")


def details(t, index: int, info_tensor) -> dict:
    """tflite_runtime's details dict for one tensor.

    ``t`` is the live tensor (None for subgraphs the C API cannot reach: then
    the shape is the one stored in the model); ``info_tensor`` the model's
    record of it.
    """
    if t is not None:
        shape = t.shape
        dtype = dtype_of(t)
        name = t.name
        scale, zp = t.quantization
    else:
        shape = info_tensor.shape
        dtype = _model_dtype(info_tensor)
        name = info_tensor.name
        q = info_tensor.quantization
        single = q is not None and len(q["scales"]) == 1 and len(q["zero_points"]) == 1
        scale, zp = (float(q["scales"][0]), int(q["zero_points"][0])) if single else (0.0, 0)
    sig = info_tensor.shape_signature if info_tensor is not None and info_tensor.shape_signature else shape
    q = info_tensor.quantization if info_tensor is not None else None
    return {
        "name": name,
        "index": int(index),
        "shape": np.array(shape, dtype=np.int32),
        "shape_signature": np.array(sig, dtype=np.int32),
        "dtype": dtype.type if dtype is not None else None,
        "quantization": (scale, zp),
        "quantization_parameters": {
            "scales": np.asarray(q["scales"] if q else [], dtype=np.float32),
            "zero_points": np.asarray(q["zero_points"] if q else [], dtype=np.int32),
            "quantized_dimension": int(q["quantized_dimension"]) if q else 0,
            # Blockwise quantization is not in the schema this runtime reads.
            "block_size": 0,
        },
        "sparsity_parameters": sparsity_parameters(info_tensor),
    }


def sparsity_parameters(info_tensor) -> dict:
    """ai-edge-litert's ``sparsity_parameters`` of a tensor, from the reader's parse: ``{}`` if dense.

    The TFLite C API exposes no tensor's sparsity, so the values come from
    the model file as :func:`~opaque_ops.model.read_model` read it
    (``TensorInfo.sparsity``), in the reference's form: ``traversal_order``,
    ``block_map`` when the model stores one, and per dimension either
    ``{"format": 0, "dense_size": n}`` or ``{"format": 1, "array_segments":
    ..., "array_indices": ...}``, all integers as int32.
    """
    sp = info_tensor.sparsity if info_tensor is not None else None
    if sp is None:
        return {}
    out = {"traversal_order": np.array(sp["traversal_order"], dtype=np.int32)}
    if sp["block_map"] is not None:
        out["block_map"] = np.array(sp["block_map"], dtype=np.int32)
    dims = []
    for fmt, dense, segments, indices in sp["dim_metadata"]:
        if fmt == 0:
            dims.append({"format": 0, "dense_size": int(dense)})
        else:
            # (check_model refuses a sparse dimension without both vectors.)
            dims.append({"format": 1, "array_segments": _int32(segments), "array_indices": _int32(indices)})
    out["dim_metadata"] = dims
    return out


def _int32(values) -> np.ndarray:
    return np.zeros(0, np.int32) if values is None else values.astype(np.int32)


def dtype_of(t):
    """The dtype the details report for live tensor ``t`` (np.bytes_ for strings; None without numpy match)."""
    return STRING_DTYPE if t.type == STRING else t.dtype


def _model_dtype(info_tensor):
    """The numpy dtype of a tensor as stored in the model (bytes for strings, object for handles)."""
    if info_tensor.type_name == "STRING":
        return STRING_DTYPE
    if info_tensor.type_name in ("RESOURCE", "VARIANT"):
        return np.dtype(object)
    return info_tensor.dtype


def _dtype_words(dtype) -> str:
    """``dtype``'s name, with its byte order when that is what differs (``.name`` leaves it out).

    numpy spells the machine's own order ``=`` (``|``: no order), so ``<`` or
    ``>`` is always the other one.
    """
    if dtype.byteorder in ("<", ">"):
        order = "big" if dtype.byteorder == ">" else "little"
        return f"{dtype.name} in {order}-endian byte order ({dtype.str!r}; the tensor's is the machine's)"
    return dtype.name


def check_index(index) -> None:
    """A tensor index is an int (a Python or numpy integer, not a bool): TypeError otherwise."""
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise TypeError(f"tensor index must be an int, not {type(index).__name__}")


def _refuse_constant(t, what: str) -> None:
    if t.is_read_only():
        raise ReadOnlyTensorError(
            f"{what} is a constant: its values are part of the model (TFLite reads them in place "
            "from the model bytes, which other interpreters may share), so it cannot be set. "
            "To feed it, make it an input of the model."
        )


def _wrong_shape(what: str, shape, arr) -> InvalidInputError:
    return InvalidInputError(
        f"{what}: expected shape {shape}, received {tuple(arr.shape)}. Reshape the array, or call "
        "resize_tensor_input() and allocate_tensors() first if the model accepts other shapes."
    )


def write(t, value, what: str) -> None:
    """Validate ``value`` against tensor ``t`` and copy it in."""
    if t.type == STRING:
        _write_strings(t, value, what)
        return
    expected_dtype = t.dtype
    if expected_dtype is None or expected_dtype == object:
        raise InvalidInputError(f"{what}: tensors of type {type_name(t)} cannot be set from numpy")
    _refuse_constant(t, what)
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype != expected_dtype:
        raise InvalidInputError(
            f"{what}: expected dtype {expected_dtype.name}, received {_dtype_words(arr.dtype)}. "
            f"Convert with np.asarray(value, dtype=np.{expected_dtype.name})."
        )
    shape = t.shape
    if tuple(arr.shape) != shape:
        raise _wrong_shape(what, shape, arr)
    if arr.size == 0:
        return  # nothing to copy, and TFLite gives empty tensors no buffer
    if not t.has_data():
        raise NotAllocatedError(f"{what}: the tensor has no memory yet; call allocate_tensors() first")
    arr = np.ascontiguousarray(arr)
    if t.write(arr) != 0:
        raise InvalidInputError(f"{what}: TFLite refused the copy ({arr.nbytes} bytes for a {t.nbytes}-byte tensor)")


def read(t, what: str) -> np.ndarray:
    """A copy of tensor ``t``'s contents."""
    if t.type == STRING:
        return _read_strings(t, what)
    if t.dtype is None or t.dtype == object:
        raise InvalidInputError(f"{what} has type {type_name(t)}, which has no numpy value")
    out = t.read()
    if out is None:
        raise NotAllocatedError(f"{what} has no data yet: call allocate_tensors() (and invoke() for outputs) first")
    return out


def _string_items(arr: np.ndarray, what: str) -> list[bytes]:
    """The strings of ``arr`` in C order, as bytes (str encoded UTF-8, as ai-edge-litert does)."""
    kind = arr.dtype.kind
    flat = arr.ravel().tolist()
    if kind == "S":
        return flat  # (numpy gives each element without its trailing NUL bytes, as litert reads it)
    if kind not in "UO":
        raise InvalidInputError(
            f"{what}: a string tensor takes bytes or str values, received an array of {_dtype_words(arr.dtype)}. "
            'Pass a numpy array of bytes_ or str_ (np.array([b"a", b"bc"])), or an object array of bytes/str.'
        )
    items = []
    for i, x in enumerate(flat):
        if isinstance(x, bytes):
            items.append(bytes(x))
            continue
        if not isinstance(x, str):
            at = np.unravel_index(i, arr.shape) if arr.ndim else ()
            raise InvalidInputError(
                f"{what}: a string tensor takes bytes or str values; the element at {tuple(int(j) for j in at)} "
                f"is a {type(x).__name__}. Convert it to bytes (or str, which is encoded UTF-8)."
            )
        try:
            items.append(x.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 for it
            raise InvalidInputError(
                f"{what}: the str at position {i} (C order) cannot be encoded UTF-8 ({exc.reason}); pass it as bytes"
            ) from None
    return items


def encode_strings(items: list[bytes]) -> bytes:
    """TFLite's string buffer holding ``items`` (string_util.h's layout, offsets from the buffer's start).

    Parameters
    ----------
    items : list of bytes
        The strings, in the tensor's C order.

    Returns
    -------
    bytes
        ``int32 count``, ``int32 offsets[count + 1]``, then the strings'
        bytes, the integers in the machine's byte order as TFLite writes them.

    Raises
    ------
    InvalidInputError
        The buffer would pass 2**31 - 1 bytes, which int32 offsets cannot address.
    """
    n = len(items)
    header = 4 * (n + 2)
    ends = np.cumsum(np.fromiter(map(len, items), np.int64, n), dtype=np.int64) + header
    total = int(ends[-1]) if n else header
    if total > np.iinfo(np.int32).max:
        raise InvalidInputError(
            f"the strings take {total} bytes in TFLite's string buffer, more than the {np.iinfo(np.int32).max} "
            "its int32 offsets can address; pass fewer or shorter strings"
        )
    head = np.empty(n + 2, np.int32)
    head[0], head[1] = n, header
    head[2:] = ends
    return head.tobytes() + b"".join(items)


def decode_strings(buf: bytes) -> list[bytes]:
    """The strings of TFLite string buffer ``buf``, every offset checked against its size.

    Parameters
    ----------
    buf : bytes
        A copy of a string tensor's buffer (the layout :func:`encode_strings` writes).

    Returns
    -------
    list of bytes

    Raises
    ------
    ValueError
        The buffer is not a string buffer: its count or an offset points
        outside it, or the offsets go backwards.  The message says which.
    """
    n = len(buf)
    if n < 8:
        raise ValueError(f"it is {n} bytes long, shorter than the 8 bytes of an empty string buffer")
    count = int.from_bytes(buf[:4], sys.byteorder, signed=True)
    if count < 0 or 4 * (count + 2) > n:
        raise ValueError(f"its count says {count} strings, whose offsets alone do not fit its {n} bytes")
    offsets = np.frombuffer(buf, np.int32, count + 1, 4).astype(np.int64)
    if offsets[0] < 4 * (count + 2) or offsets[-1] > n or (count and np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(
            f"its offsets (from {int(offsets[0])} to {int(offsets[-1])}) do not run forward from the end of "
            f"its {4 * (count + 2)}-byte header to at most its {n} bytes"
        )
    bounds = offsets.tolist()
    return [buf[bounds[i] : bounds[i + 1]] for i in range(count)]


def _write_strings(t, value, what: str) -> None:
    _refuse_constant(t, what)
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    items = _string_items(arr, what)
    if tuple(arr.shape) != t.shape:
        raise _wrong_shape(what, t.shape, arr)
    if not t.is_dynamic():
        # TfLiteTensorRealloc leaves any other buffer as it is (and says ok):
        # writing past it would overrun memory TFLite planned for others.
        raise UnsupportedError(
            f"{what}: TFLite did not give this string tensor a buffer of its own (it always does for string "
            "tensors it plans itself; a custom allocation replaces it), so its size cannot follow the strings. "
            "Set it without set_custom_allocation()."
        )
    if not t.can_resize():
        raise UnsupportedError(
            f"{what}: the loaded TFLite runtime does not export TfLiteTensorRealloc, which setting a string "
            "tensor needs (the buffer's size depends on the strings). Load a runtime that does (TFLite 2.17 "
            "or later's libtensorflowlite_c, named by OPAQUE_OPS_TFLITE_LIB), or feed the strings from a "
            "custom op instead."
        )
    data = encode_strings(items)
    if t.write_resized(data) != 0:
        raise NotAllocatedError(f"{what}: TFLite could not allocate {len(data)} bytes for the strings")


def refuse_unset_strings(tensors, what: str) -> None:
    """Before an invoke: refuse when a string input (``(name, tensor)`` pairs) holds no strings for its shape.

    A builtin kernel reads its string input's buffer without checking it:
    TFLite 2.17's GATHER on an input nothing wrote dies with SIGSEGV (2.23
    and ai-edge-litert report an error), and RESHAPE copies the empty
    buffer to an output that then cannot be read.
    """
    for name, t in tensors:
        shape = t.shape
        want = int(np.prod(shape, dtype=np.int64)) if shape else 1
        count = t.string_count()
        if count == want or (want == 0 and count is None):
            continue
        if count is None:
            raise NotAllocatedError(f"{what}: string input {name} holds no strings yet: set it with set_tensor() first")
        raise InvalidInputError(
            f"{what}: string input {name} holds {count} string(s) but its shape {list(shape)} has {want} "
            "elements (it was resized after it was set): set it again with set_tensor()"
        )


def _read_strings(t, what: str) -> np.ndarray:
    shape = t.shape
    want = int(np.prod(shape, dtype=np.int64)) if shape else 1
    buf = t.raw()
    if buf is None:
        if want == 0:
            return np.empty(shape, object)
        raise NotAllocatedError(
            f"{what} holds no strings yet: set it with set_tensor() (an input) or call invoke() (an output) first"
        )
    try:
        items = decode_strings(buf)
    except ValueError as exc:
        raise ModelError(
            f"{what}: its buffer is not a TFLite string buffer: {exc}. The kernel that wrote it (or a "
            "custom allocation) broke the layout string_util.h defines."
        ) from None
    if len(items) != want:
        raise ModelError(
            f"{what} holds {len(items)} string(s) but its shape {list(shape)} has {want} elements: either its "
            "shape changed after its strings were written (set it again with set_tensor(), or call invoke()), "
            "or the kernel that wrote it gave it the wrong number of strings."
        )
    out = np.empty(want, object)
    out[:] = items
    return out.reshape(shape)


class ViewHolder:
    """Owner of the memory behind a ``tensor()`` view: it keeps the native
    interpreter alive, so a view never points into freed memory."""

    __slots__ = ("__array_interface__", "_native", "__weakref__")

    def __init__(self, array, native):
        # The interface carries the read-only flag of constants' views.
        self.__array_interface__ = array.__array_interface__
        self._native = native
