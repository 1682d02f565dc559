"""String tensors: TFLite's string buffer, written from and read into numpy arrays of bytes.

A string tensor's memory is not a numpy array but TFLite's string buffer
(string_util.h: int32 count, int32 offsets[count + 1] from the buffer's
start, then the bytes), copied in and out here.  Few models have string
tensors, so :mod:`.tensors` (and :mod:`.core`, for a model with string
inputs) import this module when a string tensor is first written or read,
not at every start.  The callers hold the interpreter's lock.
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import InvalidInputError, ModelError, NotAllocatedError, UnsupportedError


def string_items(arr: np.ndarray, what: str) -> list[bytes]:
    """The strings of ``arr`` in C order, as bytes (str encoded UTF-8, as ai-edge-litert does).

    Parameters
    ----------
    arr : numpy.ndarray
        Of bytes_ or str_, or of objects (the caller refused other dtypes).
    what : str
        The tensor as the messages name it.

    Returns
    -------
    list of bytes

    Raises
    ------
    InvalidInputError
        An object that is neither bytes nor str, or a str with no UTF-8 form.
    """
    flat = arr.ravel().tolist()
    if arr.dtype.kind == "S":
        return flat  # (numpy gives each element without its trailing NUL bytes, as litert reads it)
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


def write_strings(t, items: list[bytes], what: str) -> None:
    """Write ``items`` into string tensor ``t``, its buffer resized to fit them.

    The caller checked the tensor (not a constant) and the strings' count
    against its shape (:func:`.tensors.write`).

    Parameters
    ----------
    t : TensorRef
        A live string tensor.
    items : list of bytes
        Its strings, in C order (:func:`string_items`).
    what : str
        The tensor as the messages name it.

    Raises
    ------
    UnsupportedError
        The tensor has a custom allocation, or the runtime cannot resize a tensor's buffer.
    NotAllocatedError
        TFLite could not allocate the buffer.
    InvalidInputError
        The buffer would pass 2**31 - 1 bytes.
    """
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
    """Before an invoke: refuse when a string input holds no strings for its shape.

    A builtin kernel reads its string input's buffer without checking it:
    TFLite 2.17's GATHER on an input nothing wrote dies with SIGSEGV (2.23
    and ai-edge-litert report an error), and RESHAPE copies the empty
    buffer to an output that then cannot be read.

    Parameters
    ----------
    tensors : iterable of (str, TensorRef)
        The string inputs, each with its name for the message.
    what : str
        The call, for the message.

    Raises
    ------
    NotAllocatedError
        An input was never set.
    InvalidInputError
        An input holds another number of strings than its shape has elements (resized after it was set).
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


def read_strings(t, what: str) -> np.ndarray:
    """A copy of string tensor ``t``'s strings: an object array of bytes of its shape, as ai-edge-litert's.

    Parameters
    ----------
    t : TensorRef
        A live string tensor.
    what : str
        The tensor as the messages name it.

    Raises
    ------
    NotAllocatedError
        Nothing wrote the tensor yet.
    ModelError
        Its buffer is not a string buffer, or holds another number of strings than its shape has elements.
    """
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
