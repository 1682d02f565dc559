"""A model with a sparse constant (CSR), written with the flatbuffers package directly.

The project's ModelBuilder writes dense tensors only; this builds
``x + DENSIFY(W)`` where W is a 4x4 float32 matrix stored sparse: dimension 0
dense, dimension 1 CSR.  Field slots are those of TFLite's schema.fbs.
"""

from __future__ import annotations

import flatbuffers
import numpy as np

# The dense matrix and its CSR encoding (row-major traversal).
DENSE = np.array([[1.5, 0, 2.0, 0], [0, 3.0, 0, 0], [0, 0, 0, 0], [4.0, 0, 0, 5.5]], np.float32)
SEGMENTS = [0, 2, 3, 3, 5]
INDICES = [0, 2, 1, 0, 3]
VALUES = np.array([1.5, 2.0, 3.0, 4.0, 5.5], np.float32)

_ADD, _DENSIFY = 0, 124
_INT32_VECTOR, _UINT8_VECTOR = 1, 3


def _vec(b, values, dtype, prepend):
    b.StartVector(np.dtype(dtype).itemsize, len(values), np.dtype(dtype).itemsize)
    for v in reversed(list(values)):
        prepend(v)
    return b.EndVector()


def _table(b, fields):
    """fields: list of (slot, kind, value) with kind in offset/int32/uint32/int8/uint8/bool."""
    b.StartObject(max(slot for slot, _, _ in fields) + 1 if fields else 0)
    add = {
        "offset": b.PrependUOffsetTRelativeSlot,
        "int32": b.PrependInt32Slot,
        "uint32": b.PrependUint32Slot,
        "int8": b.PrependInt8Slot,
        "uint8": b.PrependUint8Slot,
    }
    for slot, kind, value in fields:
        add[kind](slot, value, 0 if kind != "offset" else 0)
    return b.EndObject()


def _index_vector(b, values, kind):
    if kind == _UINT8_VECTOR:
        v = _vec(b, values, np.uint8, b.PrependUint8)
    else:
        v = _vec(b, values, np.int32, b.PrependInt32)
    return _table(b, [(0, "offset", v)])


def build(indices_kind: int = _UINT8_VECTOR) -> bytes:
    b = flatbuffers.Builder(1024)
    # DimensionMetadata: dim 0 dense (size 4), dim 1 CSR.
    seg = _index_vector(b, SEGMENTS, _INT32_VECTOR)
    idx = _index_vector(b, INDICES, indices_kind)
    dm0 = _table(b, [(0, "int8", 0), (1, "int32", 4)])
    dm1 = _table(
        b,
        [
            (0, "int8", 1),
            (2, "uint8", _INT32_VECTOR),
            (3, "offset", seg),
            (4, "uint8", indices_kind),
            (5, "offset", idx),
        ],
    )
    b.StartVector(4, 2, 4)
    b.PrependUOffsetTRelative(dm1)
    b.PrependUOffsetTRelative(dm0)
    dims = b.EndVector()
    order = _vec(b, [0, 1], np.int32, b.PrependInt32)
    sparsity = _table(b, [(0, "offset", order), (2, "offset", dims)])

    def tensor(name, buffer, sparse=None):
        n = b.CreateString(name)
        shape = _vec(b, [4, 4], np.int32, b.PrependInt32)
        fields = [(0, "offset", shape), (1, "int8", 0), (2, "uint32", buffer), (3, "offset", n)]
        if sparse is not None:
            fields.append((6, "offset", sparse))
        return _table(b, fields)

    tensors = [tensor("w_sparse", 1, sparsity), tensor("w", 0), tensor("x", 0), tensor("y", 0)]
    b.StartVector(4, len(tensors), 4)
    for t in reversed(tensors):
        b.PrependUOffsetTRelative(t)
    tvec = b.EndVector()

    def op(code_index, ins, outs):
        i = _vec(b, ins, np.int32, b.PrependInt32)
        o = _vec(b, outs, np.int32, b.PrependInt32)
        return _table(b, [(0, "uint32", code_index), (1, "offset", i), (2, "offset", o)])

    ops = [op(0, [0], [1]), op(1, [2, 1], [3])]
    b.StartVector(4, len(ops), 4)
    for o in reversed(ops):
        b.PrependUOffsetTRelative(o)
    ovec = b.EndVector()
    sg_in = _vec(b, [2], np.int32, b.PrependInt32)
    sg_out = _vec(b, [3], np.int32, b.PrependInt32)
    sg_name = b.CreateString("main")
    sg = _table(
        b,
        [(0, "offset", tvec), (1, "offset", sg_in), (2, "offset", sg_out), (3, "offset", ovec), (4, "offset", sg_name)],
    )
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(sg)
    sgs = b.EndVector()
    codes = [
        _table(b, [(0, "int8", code if code < 127 else 127), (2, "int32", 1), (3, "int32", code)])
        for code in (_DENSIFY, _ADD)
    ]
    b.StartVector(4, len(codes), 4)
    for c in reversed(codes):
        b.PrependUOffsetTRelative(c)
    cvec = b.EndVector()
    data = _vec(b, VALUES.tobytes(), np.uint8, b.PrependUint8)
    bufs = [_table(b, []), _table(b, [(0, "offset", data)])]
    b.StartVector(4, len(bufs), 4)
    for x in reversed(bufs):
        b.PrependUOffsetTRelative(x)
    bvec = b.EndVector()
    desc = b.CreateString("x + densify(sparse W), for opaque_ops tests")
    model = _table(
        b, [(0, "uint32", 3), (1, "offset", cvec), (2, "offset", sgs), (3, "offset", desc), (4, "offset", bvec)]
    )
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())
