"""The bounds-checked Python reader of ``.tflite`` bytes (behind :func:`~opaque_ops.model.reader.read_model`).

Every offset and length is checked against the buffer before use, and the
total work is bounded in proportion to the file size; anything malformed is
reported as :class:`~opaque_ops.errors.ModelError`.

Imported only when a model is read here: when the compiled reader
(``c/src/modelreader.c``) is not there or leaves a model to this one, and
when a model made from its record (:meth:`ModelInfo._read_later
<opaque_ops.model.reader.ModelInfo._read_later>`) is asked for a part.  A
start that finds its model's record on disk, or whose model the compiled
reader reads, does not unmarshal this module's code
(tests/model/test_reader_imports.py).  :func:`_parse` returns the model's
parts, which :mod:`~opaque_ops.model.reader` wraps in its ModelInfo: that
class reads its lazy parts through this module, and importing it from here
would make a circle.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from .decoding import (
    _DTYPE,
    _F4,
    _I8_DT,
    _K_BOOL,
    _K_I8,
    _K_I32,
    _K_INTS,
    _K_STR,
    _K_U8,
    _NO_SCALES,
    _NO_ZERO_POINTS,
    _OPTION_READERS,
    _TYPE_NAME,
    _flex_or_none,
)
from .parts import OpInfo, SignatureInfo, SubgraphInfo, TensorInfo
from .schema import _CUSTOM, BUILTIN_OPERATOR_NAMES

_U8 = struct.Struct("<B").unpack_from
_I8 = struct.Struct("<b").unpack_from
_U16X2 = struct.Struct("<HH").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F32 = struct.Struct("<f").unpack_from

# Table layouts: the byte size of each field slot this reader reads (0: a
# slot it never reads), per table type of schema.fbs.  Every field read is
# checked once per (vtable, layout) to lie inside its table; flatbuffers
# share one vtable among all tables of the same shape, so a model with 300
# tensors has a handful of tensor vtables.
_MODEL = (4, 4, 4, 4, 4, 0, 4, 4)  # version, operator_codes, subgraphs, description, buffers, ..,
#                                          metadata, signature_defs
_OPCODE = (1, 4, 4, 4)  # deprecated_builtin_code, custom_code, version, builtin_code
_SUBGRAPH = (4, 4, 4, 4, 4)  # tensors, inputs, outputs, operators, name
_TENSOR = (4, 1, 4, 4, 4, 1, 4, 4)  # shape, type, buffer, name, quantization, is_variable, sparsity, shape_signature
_QUANT = (0, 0, 4, 4, 0, 0, 4)  # scale, zero_point, quantized_dimension
_OPERATOR = (4, 4, 4, 1, 4, 4, 0, 0, 0, 8, 8)  # opcode_index, inputs, outputs, options type, options,
#                                               custom_options, large_custom_options_offset / _size
_BUFFER = (4, 8, 8)  # data, offset, size
_SIGDEF = (4, 4, 4, 0, 4)  # inputs, outputs, signature_key, subgraph_index
_TENSORMAP = (4, 4)  # name, tensor_index
_SPARSITY = (4, 4, 4)  # traversal_order, block_map, dim_metadata
_DIMMETA = (1, 4, 1, 4, 1, 4)  # format, dense_size, segments type / table, indices type / table
_INDEXVEC = (4,)  # values
_METADATA = (4, 4)  # name, buffer
# Layout ids (part of the layout cache key); option tables use 16 + their union type.
_IDS = {
    _MODEL: 0,
    _OPCODE: 1,
    _SUBGRAPH: 2,
    _TENSOR: 3,
    _QUANT: 4,
    _OPERATOR: 5,
    _BUFFER: 6,
    _SIGDEF: 7,
    _TENSORMAP: 8,
    _SPARSITY: 9,
    _DIMMETA: 10,
    _INDEXVEC: 11,
    _METADATA: 12,
}
_TENSOR_LID, _OPERATOR_LID = _IDS[_TENSOR], _IDS[_OPERATOR]  # (one global load each in the per-item readers)


def _w(base: str, index=None, name=None) -> str:
    """The path of a table or field for messages ("Model.subgraphs[0].tensors[3].shape"); built only on error."""
    s = base if index is None else f"{base}[{index}]"
    return s if name is None else f"{s}.{name}"


class _Flat:
    """Bounds-checked access to a flatbuffer in memory.

    Positions are absolute.  :meth:`table` validates a table and returns the
    offsets of its fields (0: absent) per slot of a layout; the vector
    readers take the position of the field holding the vector's offset.
    Names for messages come as ``(base, index, field)`` and are only
    formatted when something is wrong.
    """

    __slots__ = ("buf", "size", "budget", "layouts")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.size = len(buf)
        # Tables and vectors may legally be shared, but a hostile file can
        # make thousands of entries point at one big vector; cap total work
        # in proportion to the file size.
        self.budget = 8 * self.size + (1 << 20)
        self.layouts: dict[int, tuple] = {}

    def charge(self, n: int, what) -> None:
        self.budget -= n
        if self.budget < 0:
            raise ModelError(
                f"{_w(*what) if isinstance(what, tuple) else what}: the model references far "
                "more data than it contains (overlapping or self-referencing offsets)"
            )

    def _truncated(self, what: str, pos: int, n: int):
        return ModelError(
            f"truncated: {what} at offset {pos} (+{n} bytes) points past the end of the {self.size}-byte buffer"
        )

    def table(self, pos: int, layout: tuple, lid: int, base: str, index=None, name=None) -> tuple:
        """Field offsets of the table at ``pos`` for each slot of ``layout`` (0 where absent)."""
        self.budget -= 1
        if self.budget < 0:
            self.charge(0, (base, index, name))
        if pos < 0 or pos + 4 > self.size:
            raise self._truncated(_w(base, index, name), pos, 4)
        vt = pos - _I32(self.buf, pos)[0]
        lay = self.layouts.get(vt * 512 + lid)
        if lay is None:
            lay = self._layout(pos, vt, layout, lid, _w(base, index, name))
        if pos + lay[0] > self.size:
            raise self._truncated(_w(base, index, name), pos, lay[0])
        return lay[1]

    def _layout(self, pos: int, vt: int, layout: tuple, lid: int, what: str) -> tuple:
        buf = self.buf
        if vt < 0 or vt + 4 > self.size:
            raise self._truncated(f"vtable of {what}", vt, 4)
        vt_size, tbl_size = _U16X2(buf, vt)
        if vt_size < 4 or vt_size % 2:
            raise ModelError(f"{what}: vtable at offset {vt} has invalid size {vt_size}")
        if vt + vt_size > self.size:
            raise self._truncated(f"vtable of {what}", vt, vt_size)
        if tbl_size < 4:
            raise ModelError(f"{what}: table at offset {pos} has invalid size {tbl_size}")
        n = min((vt_size - 4) // 2, len(layout))
        entries = struct.unpack_from(f"<{n}H", buf, vt + 4)
        offs = []
        for slot, size in enumerate(layout):
            off = entries[slot] if slot < n and size else 0
            if off and off + size > tbl_size:
                raise ModelError(f"{what}: field {slot} at offset {pos + off} lies outside its {tbl_size}-byte table")
            offs.append(off)
        lay = (tbl_size, tuple(offs))
        self.layouts[vt * 512 + lid] = lay
        return lay

    def vector(self, p: int, elem_size: int, base: str, index=None, name=None) -> tuple[int, int]:
        """(start, count) of the vector whose offset is stored at ``p``, checked to fit the buffer."""
        size = self.size
        t = p + _U32(self.buf, p)[0]
        if t >= size:
            raise ModelError(
                f"truncated: {_w(base, index, name)} at offset {p} points to offset {t}, "
                f"past the end of the {size}-byte buffer"
            )
        if t + 4 > size:
            raise self._truncated(f"length of {_w(base, index, name)}", t, 4)
        n = _U32(self.buf, t)[0]
        if n * elem_size > size - t - 4:
            raise ModelError(
                f"truncated: {_w(base, index, name)} at offset {t} claims {n} elements of "
                f"{elem_size} bytes, past the end of the {size}-byte buffer"
            )
        self.budget -= n
        if self.budget < 0:
            self.charge(0, (base, index, name))
        return t + 4, n

    def ints(self, p: int, base: str, index=None, name=None) -> tuple:
        """An int32 vector as a tuple of ints (no numpy round trip: these are short)."""
        # :meth:`vector`'s checks and charge, inline: a model's shapes and
        # operator inputs and outputs are most of its vectors.  Anything out
        # of bounds goes through :meth:`vector` for its message.
        buf, size = self.buf, self.size
        t = p + _U32(buf, p)[0]
        if t + 4 > size:
            self.vector(p, 4, base, index, name)
        n = _U32(buf, t)[0]
        if 4 * n > size - t - 4 or self.budget < n:
            self.vector(p, 4, base, index, name)
        self.budget -= n
        st = _INT_VECTORS.get(n)
        if st is None:
            if n > 64:
                return struct.unpack_from(f"<{n}i", buf, t + 4)
            st = _INT_VECTORS[n] = struct.Struct(f"<{n}i")
        return st.unpack_from(buf, t + 4)

    def string(self, p: int, base: str, index=None, name=None, errors: str = "strict") -> str:
        # :meth:`vector`'s checks and charge, inline (as in :meth:`ints`).
        buf, size = self.buf, self.size
        t = p + _U32(buf, p)[0]
        if t + 4 > size:
            self.vector(p, 1, base, index, name)
        n = _U32(buf, t)[0]
        if n > size - t - 4 or self.budget < n:
            self.vector(p, 1, base, index, name)
        self.budget -= n
        try:
            return buf[t + 4 : t + 4 + n].decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            raise ModelError(f"{_w(base, index, name)} at offset {t} is not valid UTF-8: {exc}") from None

    def array(self, p: int, dtype: np.dtype, base: str, index=None, name=None) -> np.ndarray:
        start, n = self.vector(p, dtype.itemsize, base, index, name)
        return np.frombuffer(self.buf, dtype=dtype, count=n, offset=start).copy()

    def tables(self, p: int, base: str, index=None, name=None) -> list[int]:
        """Positions of the tables of the vector of offsets at ``p`` (each checked by :meth:`table`)."""
        start, n = self.vector(p, 4, base, index, name)
        offs = struct.unpack_from(f"<{n}I", self.buf, start)
        out = [start + 4 * i + o for i, o in enumerate(offs)]
        if n and max(out) >= self.size:
            i = next(i for i, t in enumerate(out) if t >= self.size)
            raise ModelError(
                f"truncated: {_w(base, index, name)}[{i}] at offset {start + 4 * i} points to "
                f"offset {out[i]}, past the end of the {self.size}-byte buffer"
            )
        return out

    def sub(self, p: int, base: str, index=None, name=None) -> int:
        """Position of the table whose offset is stored at ``p`` (its bounds are checked by :meth:`table`)."""
        t = p + _U32(self.buf, p)[0]
        if t >= self.size:
            raise ModelError(
                f"truncated: {_w(base, index, name)} at offset {p} points to offset {t}, "
                f"past the end of the {self.size}-byte buffer"
            )
        return t


# What a bug in the bounds checks could raise (struct.error the likeliest):
# reported as a ModelError by read_model and by the parts read on demand.
_UNEXPECTED = (struct.error, ValueError, IndexError, OverflowError, MemoryError)
_INT_VECTORS: dict[int, struct.Struct] = {}
_INDEX_VECTORS = {1: np.dtype("<i4"), 2: np.dtype("<u2"), 3: np.dtype("<u1")}  # SparseIndexVector


def _sparsity(f: _Flat, pos: int, what: str) -> dict:
    buf = f.buf
    s = f.table(pos, _SPARSITY, _IDS[_SPARSITY], what)
    dims = []
    if s[2]:
        for k, dp in enumerate(f.tables(pos + s[2], what, None, "dim_metadata")):
            d = f.table(dp, _DIMMETA, _IDS[_DIMMETA], f"{what}.dim_metadata", k)
            vecs = []
            for type_slot, slot in ((2, 3), (4, 5)):
                kind = _U8(buf, dp + d[type_slot])[0] if d[type_slot] else 0
                arr = None
                if kind in _INDEX_VECTORS and d[slot]:
                    ip = f.sub(dp + d[slot], f"{what}.dim_metadata", k, "indices")
                    iv = f.table(ip, _INDEXVEC, _IDS[_INDEXVEC], f"{what}.dim_metadata", k, "indices")
                    if iv[0]:
                        arr = f.array(ip + iv[0], _INDEX_VECTORS[kind], what, k, "values")
                vecs.append(arr)
            fmt = _I8(buf, dp + d[0])[0] if d[0] else 0
            dense = _I32(buf, dp + d[1])[0] if d[1] else 0
            dims.append((fmt, dense, vecs[0], vecs[1]))
    return {
        "traversal_order": list(f.ints(pos + s[0], what, None, "traversal_order")) if s[0] else [],
        # None when absent: ai-edge-litert lists a stored block_map even if empty.
        "block_map": list(f.ints(pos + s[1], what, None, "block_map")) if s[1] else None,
        "dim_metadata": dims,
    }


def _builtin_options(f: _Flat, pos: int, type_: int, base: str, index: int) -> dict | None:
    """Decode the options table at ``pos`` (union type ``type_``); None for a type not decoded here."""
    layout, readers = _OPTION_READERS.get(type_, ((), None))
    offs = f.table(pos, layout, 16 + type_, base, index, "builtin_options")
    if readers is None:
        return None
    buf = f.buf
    out: dict[str, Any] = {}
    for fname, slot, code, default, names in readers:
        o = offs[slot]
        if code == _K_INTS:
            out[fname] = list(f.ints(pos + o, base, index, fname)) if o else None
        elif code == _K_I8:
            v = _I8(buf, pos + o)[0] if o else default
            out[fname] = names.get(v, v)
        elif code == _K_I32:
            out[fname] = _I32(buf, pos + o)[0] if o else default
        elif code == _K_BOOL:
            out[fname] = bool(_U8(buf, pos + o)[0]) if o else bool(default)
        elif code == _K_U8:
            out[fname] = _U8(buf, pos + o)[0] if o else default
        elif code == _K_STR:
            out[fname] = f.string(pos + o, base, index, fname, "surrogateescape") if o else default
        else:
            out[fname] = _F32(buf, pos + o)[0] if o else default
    return out


def _check_indices(values: list, ntens: int, optional_ok: bool, si: int, what: str, oi=None) -> list:
    """``values``, if each is a tensor of the subgraph (or -1 where an input or output may be omitted)."""
    if values and (min(values) < (-1 if optional_ok else 0) or max(values) >= ntens):
        for v in values:
            if not ((v == -1 and optional_ok) or 0 <= v < ntens):
                where = what if oi is None else f"operator {oi} {what}"
                raise ModelError(f"subgraph {si} {where} refers to tensor {v}, but the subgraph has {ntens} tensors")
    return values


def _buffer(f: _Flat, bp: int, i: int) -> tuple[int, int] | None:
    """(start, size) of buffer ``i``'s data in the file, or None for a buffer without data."""
    b = f.table(bp, _BUFFER, _IDS[_BUFFER], "Model.buffers", i)
    if b[0]:
        return f.vector(bp + b[0], 1, "Model.buffers", i, "data")
    # Models over 2 GB keep data outside the flatbuffer, addressed from the
    # start of the file; offsets 0 and 1 mean "none".
    off = _U64(f.buf, bp + b[1])[0] if b[1] else 0
    n = _U64(f.buf, bp + b[2])[0] if b[2] else 0
    if off <= 1:
        return None
    if off + n > f.size:
        raise ModelError(
            f"truncated: buffer {i} data at offset {off} (+{n} bytes) points past the end of the {f.size}-byte buffer"
        )
    return off, n


def _tensor(f: _Flat, tp: int, si: int, ti: int, base: str, buffers) -> TensorInfo:
    """Tensor ``ti`` of subgraph ``si`` (its table at ``tp``); ``buffers`` is the model's buffer list."""
    buf = f.buf
    o0, o1, o2, o3, o4, o5, o6, o7 = f.table(tp, _TENSOR, _TENSOR_LID, base, ti)
    shape = f.ints(tp + o0, base, ti, "shape") if o0 else ()
    ttype = _I8(buf, tp + o1)[0] if o1 else 0
    bidx = _U32(buf, tp + o2)[0] if o2 else 0
    tname = f.string(tp + o3, base, ti, "name") if o3 else ""
    sig = f.ints(tp + o7, base, ti, "shape_signature") if o7 else None
    if bidx >= max(len(buffers), 1):
        raise ModelError(
            f"subgraph {si} tensor {ti} ({tname!r}) refers to buffer {bidx} but the model has {len(buffers)} buffers"
        )
    scales, zps, qdim = _NO_SCALES, _NO_ZERO_POINTS, 0
    if o4:
        qp = f.sub(tp + o4, base, ti, "quantization")
        q = f.table(qp, _QUANT, _IDS[_QUANT], base, ti, "quantization")
        if q[2]:
            scales = f.array(qp + q[2], _F4, base, ti, "quantization.scale")
            scales = scales.astype(np.float32, copy=False) if len(scales) else _NO_SCALES
        if q[3]:
            zps = f.array(qp + q[3], _I8_DT, base, ti, "quantization.zero_point")
            zps = zps.astype(np.int64, copy=False) if len(zps) else _NO_ZERO_POINTS
        qdim = _I32(buf, qp + q[6])[0] if q[6] else 0
    return TensorInfo(
        ti,
        tname,
        shape,
        sig,
        _DTYPE[ttype],
        _TYPE_NAME[ttype],
        bidx,
        buffers[bidx] if buffers else None,
        {"scales": scales, "zero_points": zps, "quantized_dimension": qdim},
        bool(_U8(buf, tp + o5)[0]) if o5 else False,
        o6 != 0,
        _sparsity(f, f.sub(tp + o6, base, ti, "sparsity"), f"{base}[{ti}].sparsity") if o6 else None,
    )


def _operator(f: _Flat, op: int, si: int, oi: int, base: str, codes, ntens: int) -> OpInfo:
    """Operator ``oi`` of subgraph ``si`` (its table at ``op``); ``codes`` = (operator codes, op names)."""
    buf = f.buf
    opcodes, op_names = codes
    o0, o1, o2, o3, o4, o5, _, _, _, o9, o10 = f.table(op, _OPERATOR, _OPERATOR_LID, base, oi)
    opcode_index = _U32(buf, op + o0)[0] if o0 else 0
    if opcode_index >= len(opcodes):
        raise ModelError(
            f"subgraph {si} operator {oi} uses opcode index {opcode_index} "
            f"but the model has {len(opcodes)} operator codes"
        )
    code, _custom, ver = opcodes[opcode_index]
    op_in = list(f.ints(op + o1, base, oi, "inputs")) if o1 else []
    # _check_indices' test, inline (it runs twice per operator); the call
    # finds the culprit for the message.
    if op_in and (min(op_in) < -1 or max(op_in) >= ntens):
        _check_indices(op_in, ntens, True, si, "inputs", oi)
    op_out = list(f.ints(op + o2, base, oi, "outputs")) if o2 else []
    if op_out and (min(op_out) < -1 or max(op_out) >= ntens):
        _check_indices(op_out, ntens, True, si, "outputs", oi)
    opt_type = _U8(buf, op + o3)[0] if o3 else 0
    custom_options = None
    if o5:
        start, n = f.vector(op + o5, 1, base, oi, "custom_options")
        custom_options = bytes(buf[start : start + n])
    else:
        off = _U64(buf, op + o9)[0] if o9 else 0
        n = _U64(buf, op + o10)[0] if o10 else 0
        if off > 1:
            if off + n > f.size:
                raise ModelError(
                    f"truncated: operator {oi} custom options at offset {off} "
                    f"(+{n} bytes) point past the end of the {f.size}-byte buffer"
                )
            f.charge(n, "custom options")
            custom_options = bytes(buf[off : off + n])
    options = _flex_or_none(custom_options) if custom_options else None
    return OpInfo(
        oi,
        opcode_index,
        code,
        op_names[opcode_index],
        code == _CUSTOM,
        ver,
        op_in,
        op_out,
        custom_options,
        options,
        opt_type,
        (
            _builtin_options(f, f.sub(op + o4, base, oi, "builtin_options"), opt_type, base, oi)
            if opt_type and o4
            else None
        ),
    )


class _ReadOnDemand(Sequence):
    """A list whose items are read from the model the first time they are asked for.

    Used only for models that :func:`read_model` has read whole before (see
    :meth:`ModelInfo._read_later`): every item read here passed the same
    checks then.  Reads are still bounds-checked.
    """

    __slots__ = ("_items", "_read")
    _MISSING = object()

    def __init__(self, n: int, read):
        self._items = [self._MISSING] * n
        self._read = read  # read(index) -> item

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self._items)))]
        item = self._items[i]
        if item is self._MISSING:
            try:
                item = self._items[i] = self._read(i % len(self._items))
            except ModelError:
                raise
            except _UNEXPECTED as exc:  # as in read_model
                raise ModelError(f"malformed model: {type(exc).__name__}: {exc}") from None
        return item

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, _ReadOnDemand)) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))


def _parse(buf: bytes, later: bool = False) -> tuple:
    """Read the model; with ``later``, tensors, operators and buffers are read on first use.

    Returns ModelInfo's first seven fields, in order (``ModelInfo(*parts)``).
    """
    f = _Flat(buf)
    root = _U32(buf, 0)[0]
    m = f.table(root, _MODEL, 0, "Model")
    version = _U32(buf, root + m[0])[0] if m[0] else 0
    description = f.string(root + m[3], "Model", None, "description") if m[3] else ""

    # Buffers first: tensors refer to them by index.
    bpos = f.tables(root + m[4], "Model", None, "buffers") if m[4] else []
    if later:

        def read_buffer(i):
            ext = _buffer(f, bpos[i], i)
            if ext is None or not ext[1]:
                return None
            f.charge(ext[1], f"buffer {i}")
            return bytes(buf[ext[0] : ext[0] + ext[1]])

        buffers = _ReadOnDemand(len(bpos), read_buffer)
    else:
        buffers = []
        data_cache: dict[tuple[int, int], bytes] = {}
        for i, bp in enumerate(bpos):
            ext = _buffer(f, bp, i)
            if ext is None:
                buffers.append(None)
                continue
            data = data_cache.get(ext)
            if data is None:
                f.charge(ext[1], f"buffer {i}")
                data = data_cache[ext] = bytes(buf[ext[0] : ext[0] + ext[1]])
            buffers.append(data if ext[1] else None)

    opcodes = []
    lid = _IDS[_OPCODE]
    for i, cp in enumerate(f.tables(root + m[1], "Model", None, "operator_codes") if m[1] else ()):
        c = f.table(cp, _OPCODE, lid, "Model.operator_codes", i)
        dep = _I8(buf, cp + c[0])[0] if c[0] else 0
        custom = f.string(cp + c[1], "Model.operator_codes", i, "custom_code") if c[1] else None
        ver = _I32(buf, cp + c[2])[0] if c[2] else 1
        code = _I32(buf, cp + c[3])[0] if c[3] else 0
        # Old converters only fill the int8 field; newer ones fill both, and
        # codes >= 127 only live in builtin_code.
        opcodes.append((max(code, dep), custom, ver))
    codes = (
        opcodes,
        [
            (custom or "") if code == _CUSTOM else BUILTIN_OPERATOR_NAMES.get(code, f"BUILTIN_{code}")
            for code, custom, _ in opcodes
        ],
    )

    subgraphs = []
    for si, sp in enumerate(f.tables(root + m[2], "Model", None, "subgraphs") if m[2] else ()):
        s = f.table(sp, _SUBGRAPH, _IDS[_SUBGRAPH], "Model.subgraphs", si)
        sname = f.string(sp + s[4], "Model.subgraphs", si, "name") if s[4] else ""
        tbase, obase = f"Model.subgraphs[{si}].tensors", f"Model.subgraphs[{si}].operators"
        tpos = f.tables(sp + s[0], "Model.subgraphs", si, "tensors") if s[0] else []
        opos = f.tables(sp + s[3], "Model.subgraphs", si, "operators") if s[3] else []
        ntens = len(tpos)
        if later:
            tensors = _ReadOnDemand(
                ntens, lambda ti, tpos=tpos, si=si, tbase=tbase: _tensor(f, tpos[ti], si, ti, tbase, buffers)
            )
        else:
            tensors = [_tensor(f, tp, si, ti, tbase, buffers) for ti, tp in enumerate(tpos)]
        inputs = _check_indices(
            list(f.ints(sp + s[1], "Model.subgraphs", si, "inputs")) if s[1] else [], ntens, False, si, "inputs"
        )
        outputs = _check_indices(
            list(f.ints(sp + s[2], "Model.subgraphs", si, "outputs")) if s[2] else [], ntens, False, si, "outputs"
        )
        if later:
            ops = _ReadOnDemand(
                len(opos),
                lambda oi, opos=opos, si=si, obase=obase, ntens=ntens: _operator(
                    f, opos[oi], si, oi, obase, codes, ntens
                ),
            )
        else:
            ops = [_operator(f, op, si, oi, obase, codes, ntens) for oi, op in enumerate(opos)]
        subgraphs.append(SubgraphInfo(si, sname, tensors, inputs, outputs, ops))

    signatures = []
    lid, mlid = _IDS[_SIGDEF], _IDS[_TENSORMAP]
    for gi, gp in enumerate(f.tables(root + m[7], "Model", None, "signature_defs") if m[7] else ()):
        g = f.table(gp, _SIGDEF, lid, "Model.signature_defs", gi)
        key = f.string(gp + g[2], "Model.signature_defs", gi, "signature_key") if g[2] else ""
        sub = _U32(buf, gp + g[4])[0] if g[4] else 0
        if sub >= len(subgraphs):
            raise ModelError(f"signature {key!r} refers to subgraph {sub} but the model has {len(subgraphs)} subgraphs")
        ntens = len(subgraphs[sub].tensors)
        maps = []
        for slot, what in ((0, "inputs"), (1, "outputs")):
            mp = {}
            mbase = f"Model.signature_defs[{gi}].{what}"
            for k, tp in enumerate(f.tables(gp + g[slot], "Model.signature_defs", gi, what) if g[slot] else ()):
                t = f.table(tp, _TENSORMAP, mlid, mbase, k)
                nm = f.string(tp + t[0], mbase, k, "name") if t[0] else ""
                idx = _U32(buf, tp + t[1])[0] if t[1] else 0
                if idx >= ntens:
                    raise ModelError(
                        f"signature {key!r} {what} {nm!r} refers to tensor {idx}, "
                        f"but subgraph {sub} has {ntens} tensors"
                    )
                mp[nm] = idx
            maps.append(mp)
        signatures.append(SignatureInfo(key, sub, maps[0], maps[1]))

    metadata = {}
    lid = _IDS[_METADATA]
    for k, mp in enumerate(f.tables(root + m[6], "Model", None, "metadata") if m[6] else ()):
        t = f.table(mp, _METADATA, lid, "Model.metadata", k)
        bidx = _U32(buf, mp + t[1])[0] if t[1] else 0
        if not t[0] or bidx >= len(bpos):
            continue
        # Names are compared as bytes by TFLite: no UTF-8 requirement here.
        start, n = f.vector(mp + t[0], 1, "Model.metadata", k, "name")
        name = buf[start : start + n].decode("utf-8", "backslashreplace")
        b = f.table(bpos[bidx], _BUFFER, _IDS[_BUFFER], "Model.buffers", bidx)
        if b[0] and f.vector(bpos[bidx] + b[0], 1, "Model.buffers", bidx, "data")[1]:
            metadata[name] = bidx

    return version, description, opcodes, subgraphs, signatures, buffers, metadata
