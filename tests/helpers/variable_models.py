"""Models with a resource variable that subgraph 0 assigns and reads (VAR_HANDLE, ASSIGN_VARIABLE, READ_VARIABLE).

Written with ai-edge-litert's schema module: the project's ModelBuilder has
no VAR_HANDLE options.
"""

from __future__ import annotations

import numpy as np

STATE = np.arange(12, dtype=np.float32).reshape(2, 6)
BEGIN, END = [0, -3], [2, 6]


def variable_model(*, assign_input: bool = True, sliced: bool = True) -> bytes:
    """x [2, 6] -> y = ADD(x, 0); ASSIGN_VARIABLE(v, x, or :data:`STATE` as a constant); read = READ_VARIABLE(v).

    Outputs ``[y, z]`` with z = STRIDED_SLICE(read, :data:`BEGIN`, :data:`END`,
    strides [1, 1]) [2, 3] (``sliced``), else ``[y, read]``.
    """
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT()
    m.version = 3
    m.buffers = [schema.BufferT()]
    sg = schema.SubGraphT()
    sg.tensors, sg.operators = [], []
    m.operatorCodes = []

    def tensor(name, shape, kind=schema.TensorType.FLOAT32, values=None):
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), kind, 0
        if values is not None:
            buf = schema.BufferT()
            buf.data = np.asarray(values).tobytes()
            m.buffers.append(buf)
            t.buffer = len(m.buffers) - 1
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    def op(code, ins, outs, options_type=0, options=None):
        if code not in [c.builtinCode for c in m.operatorCodes]:
            c = schema.OperatorCodeT()
            c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
            m.operatorCodes.append(c)
        o = schema.OperatorT()
        o.opcodeIndex = [c.builtinCode for c in m.operatorCodes].index(code)
        o.inputs, o.outputs = ins, outs
        o.builtinOptionsType, o.builtinOptions = options_type, options
        sg.operators.append(o)

    ops = schema.BuiltinOperator
    x = tensor("x", [2, 6])
    y = tensor("y", [2, 6])
    op(ops.ADD, [x, tensor("zero", [1], values=np.zeros(1, np.float32))], [y])
    handle = tensor("handle", [], schema.TensorType.RESOURCE)
    var_options = schema.VarHandleOptionsT()
    var_options.sharedName = b"state"
    op(ops.VAR_HANDLE, [], [handle], schema.BuiltinOptions.VarHandleOptions, var_options)
    value = x if assign_input else tensor("init", [2, 6], values=STATE)
    read = tensor("read", [2, 6])
    op(ops.ASSIGN_VARIABLE, [handle, value], [])
    op(ops.READ_VARIABLE, [handle], [read])
    outputs = [y, read]
    if sliced:
        bounds = [
            tensor(n, [2], schema.TensorType.INT32, np.array(v, np.int32))
            for n, v in (("b", BEGIN), ("e", END), ("s", [1, 1]))
        ]
        z = tensor("z", [2, 3])
        op(
            ops.STRIDED_SLICE,
            [read, *bounds],
            [z],
            schema.BuiltinOptions.StridedSliceOptions,
            schema.StridedSliceOptionsT(),
        )
        outputs = [y, z]
    sg.inputs, sg.outputs = [x], outputs
    m.subgraphs = [sg]
    fb = flatbuffers.Builder(0)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def sliced(read: np.ndarray) -> np.ndarray:
    """numpy's z for a read of any shape: ``read[0:2, -3:6]`` (both ends resolved against read's own width)."""
    return read[BEGIN[0] : END[0], BEGIN[1] : END[1]]
