"""Sparse tensors' ``SparsityParameters``, read from the model for ``get_tensor_details()``.

The TFLite C API exposes no tensor's sparsity, so the values come from the
model file, in the form ai-edge-litert's ``sparsity_parameters`` uses
(``traversal_order``, ``block_map`` when the tensor has one, and per dimension either
``{"format": 0, "dense_size": n}`` or ``{"format": 1, "array_segments": ...,
"array_indices": ...}``).  Field slots are those of ``schema.fbs``: Model.subgraphs
= 2, SubGraph.tensors = 0, Tensor.sparsity = 6; SparsityParameters
traversal_order = 0, block_map = 1, dim_metadata = 2; DimensionMetadata format
= 0, dense_size = 1, array_segments_type/array_segments = 2/3,
array_indices_type/array_indices = 4/5 (a SparseIndexVector union of
Int32Vector = 1, Uint16Vector = 2, Uint8Vector = 3, each a table whose slot
0 is the values).

Only called for the tensors someone asks about; the bytes have already passed
the bounds-checked reader and TFLite's verifier.  Read with the flatbuffers
package's table accessors (no generated code).
"""

from __future__ import annotations

import struct

import numpy as np
from flatbuffers import encode, number_types as N
from flatbuffers.table import Table

_SPARSE_INDEX_DTYPES = {1: "<i4", 2: "<u2", 3: "<u1"}


def _slot(tab: Table, slot: int) -> int:
    return tab.Offset(4 + 2 * slot)


def _sub(tab: Table, slot: int) -> Table | None:
    o = _slot(tab, slot)
    return Table(tab.Bytes, tab.Indirect(o + tab.Pos)) if o else None


def _tables(tab: Table, slot: int) -> list[Table]:
    o = _slot(tab, slot)
    if not o:
        return []
    start, n = tab.Vector(o), tab.VectorLen(o)
    return [Table(tab.Bytes, tab.Indirect(start + 4 * i)) for i in range(n)]


def _ints(tab: Table | None, slot: int, dtype: str = "<i4") -> np.ndarray:
    o = _slot(tab, slot) if tab is not None else 0
    if not o:
        return np.zeros(0, np.int32)
    start, n = tab.Vector(o), tab.VectorLen(o)
    return np.frombuffer(bytes(tab.Bytes[start:start + n * np.dtype(dtype).itemsize]), dtype).astype(np.int32)


def _scalar(tab: Table, slot: int, flags, default):
    o = _slot(tab, slot)
    return tab.Get(flags, o + tab.Pos) if o else default


def sparsity_parameters(model: bytes, subgraph: int, tensor: int) -> dict:
    """``sparsity_parameters`` of one tensor: ``{}`` for a dense tensor."""
    try:
        root = Table(model, encode.Get(N.UOffsetTFlags.packer_type, model, 0))
        t = _tables(_tables(root, 2)[subgraph], 0)[tensor]
        sp = _sub(t, 6)
        if sp is None:
            return {}
        dims = []
        for dm in _tables(sp, 2):
            if _scalar(dm, 0, N.Int8Flags, 0) == 0:
                dims.append({"format": 0, "dense_size": int(_scalar(dm, 1, N.Int32Flags, 0))})
                continue
            entry = {"format": 1}
            for key, type_slot, value_slot in (("array_segments", 2, 3), ("array_indices", 4, 5)):
                kind = _scalar(dm, type_slot, N.Uint8Flags, 0)
                entry[key] = _ints(_sub(dm, value_slot), 0, _SPARSE_INDEX_DTYPES.get(kind, "<i4"))
            dims.append(entry)
        out = {"traversal_order": _ints(sp, 0)}
        if _slot(sp, 1):  # ai-edge-litert lists block_map only for block-sparse tensors
            out["block_map"] = _ints(sp, 1)
        out["dim_metadata"] = dims
        return out
    except (IndexError, ValueError, TypeError, OverflowError, struct.error):  # pragma: no cover - verified bytes
        return {}
