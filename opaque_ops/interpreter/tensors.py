"""Tensors as the Interpreter shows them: details dicts, copies in and out, ``tensor()`` views.

Shared by :class:`~opaque_ops.Interpreter` and :class:`~opaque_ops.SignatureRunner`;
the callers hold the interpreter's lock.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError, NotAllocatedError, ReadOnlyTensorError

# kTfLiteString.  Its values are not a numpy array in TFLite's memory but
# TFLite's string buffer (string_util.h: int32 count, int32 offsets[count + 1]
# from the buffer's start, then the bytes), read and written by copy
# (:mod:`.strings`).
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
        # Few models have string tensors: their codec is imported when one is
        # first written or read, not at every start.  The checks that take
        # this module's messages come first here, so that the codec needs
        # nothing of this module (which imports it).
        from .strings import string_items, write_strings

        _refuse_constant(t, what)
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.kind not in "SUO":
            raise InvalidInputError(
                f"{what}: a string tensor takes bytes or str values, received an array of {_dtype_words(arr.dtype)}. "
                'Pass a numpy array of bytes_ or str_ (np.array([b"a", b"bc"])), or an object array of bytes/str.'
            )
        items = string_items(arr, what)
        if tuple(arr.shape) != t.shape:
            raise _wrong_shape(what, t.shape, arr)
        write_strings(t, items, what)
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
        from .strings import read_strings  # (imported when first needed, as in write)

        return read_strings(t, what)
    if t.dtype is None or t.dtype == object:
        raise InvalidInputError(f"{what} has type {type_name(t)}, which has no numpy value")
    out = t.read()
    if out is None:
        raise NotAllocatedError(f"{what} has no data yet: call allocate_tensors() (and invoke() for outputs) first")
    return out


class ViewHolder:
    """Owner of the memory behind a ``tensor()`` view: it keeps the native
    interpreter alive, so a view never points into freed memory."""

    __slots__ = ("__array_interface__", "_native", "__weakref__")

    def __init__(self, array, native):
        # The interface carries the read-only flag of constants' views.
        self.__array_interface__ = array.__array_interface__
        self._native = native
