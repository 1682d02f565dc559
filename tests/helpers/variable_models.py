"""Models with a resource variable that subgraph 0 assigns and reads (VAR_HANDLE, ASSIGN_VARIABLE, READ_VARIABLE).

Written with ai-edge-litert's schema module: the project's ModelBuilder has
no VAR_HANDLE options.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.schema_models import SchemaModel

STATE = np.arange(12, dtype=np.float32).reshape(2, 6)
BEGIN, END = [0, -3], [2, 6]


def variable_model(*, assign_input: bool = True, sliced: bool = True) -> bytes:
    """x [2, 6] -> y = ADD(x, 0); ASSIGN_VARIABLE(v, x, or :data:`STATE` as a constant); read = READ_VARIABLE(v).

    Outputs ``[y, z]`` with z = STRIDED_SLICE(read, :data:`BEGIN`, :data:`END`,
    strides [1, 1]) [2, 3] (``sliced``), else ``[y, read]``.
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator
    x = b.tensor("x", [2, 6])
    y = b.tensor("y", [2, 6])
    b.op(ops.ADD, [x, b.tensor("zero", [1], values=np.zeros(1, np.float32))], [y])
    handle = b.tensor("handle", [], schema.TensorType.RESOURCE)
    var_options = schema.VarHandleOptionsT()
    var_options.sharedName = b"state"
    b.op(ops.VAR_HANDLE, [], [handle], schema.BuiltinOptions.VarHandleOptions, var_options)
    value = x if assign_input else b.tensor("init", [2, 6], values=STATE)
    read = b.tensor("read", [2, 6])
    b.op(ops.ASSIGN_VARIABLE, [handle, value], [])
    b.op(ops.READ_VARIABLE, [handle], [read])
    outputs = [y, read]
    if sliced:
        bounds = [
            b.tensor(n, [2], schema.TensorType.INT32, np.array(v, np.int32))
            for n, v in (("b", BEGIN), ("e", END), ("s", [1, 1]))
        ]
        z = b.tensor("z", [2, 3])
        options = schema.StridedSliceOptionsT()
        b.op(ops.STRIDED_SLICE, [read, *bounds], [z], schema.BuiltinOptions.StridedSliceOptions, options)
        outputs = [y, z]
    return b.build([x], outputs)


def sliced(read: np.ndarray) -> np.ndarray:
    """numpy's z for a read of any shape: ``read[0:2, -3:6]`` (both ends resolved against read's own width)."""
    return read[BEGIN[0] : END[0], BEGIN[1] : END[1]]
