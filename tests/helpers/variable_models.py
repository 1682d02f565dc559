"""Models with a resource variable that subgraph 0 assigns and reads (VAR_HANDLE, ASSIGN_VARIABLE, READ_VARIABLE).

Written with ai-edge-litert's schema module: the project's ModelBuilder has
no VAR_HANDLE options.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.schema_models import SchemaModel

STATE = np.arange(12, dtype=np.float32).reshape(2, 6)
BEGIN, END = [0, -3], [2, 6]


def var_handle(b: SchemaModel, name: str = "handle") -> int:
    """A VAR_HANDLE of the variable ``state`` (no container) in ``b``'s current subgraph: its RESOURCE output."""
    schema = b.schema
    h = b.tensor(name, [], schema.TensorType.RESOURCE)
    options = schema.VarHandleOptionsT()
    options.sharedName = b"state"
    b.op(schema.BuiltinOperator.VAR_HANDLE, [], [h], schema.BuiltinOptions.VarHandleOptions, options)
    return h


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
    handle = var_handle(b)
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


def named_variables_model(main, init=()) -> bytes:
    """Variables known by name: subgraph 0 runs ``main``'s steps, after CALL_ONCE of subgraph 1 (``init``'s) if any.

    Subgraph 0 has one input, x [2, 6] (float32).  A step is
    ``("assign", name, value)``: a VAR_HANDLE of ``name`` and an
    ASSIGN_VARIABLE of ``value`` ("x": subgraph 0's input, else a constant
    array) through it; or ``("read", name, shape)``: a VAR_HANDLE of
    ``name`` and a READ_VARIABLE through it, declared ``shape``, which is an
    output of subgraph 0 (in the order of the steps).  ``name`` is the
    shared_name (bytes), a ``(container, shared_name)`` pair, or None for a
    VAR_HANDLE without options.  Each step has a VAR_HANDLE of its own: to
    TFLite (tensorflow/lite/kernels/var_handle.cc) handles of one name are
    one variable, in one subgraph or in several.
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator
    x = b.tensor("x", [2, 6])
    if init:
        options = schema.CallOnceOptionsT()
        options.initSubgraphIndex = 1
        b.op(ops.CALL_ONCE, [], [], schema.BuiltinOptions.CallOnceOptions, options)
    reads = _steps(b, main, x)
    if init:
        b.next_subgraph([x], reads)
        _steps(b, init, None)
        return b.build([], [])
    return b.build([x], reads)


def _steps(b: SchemaModel, steps, x) -> list:
    schema = b.schema
    ops = schema.BuiltinOperator
    reads = []
    for k, (what, name, arg) in enumerate(steps):
        handle = b.tensor(f"handle{k}", [], schema.TensorType.RESOURCE)
        if name is None:
            b.op(ops.VAR_HANDLE, [], [handle])
        else:
            container, shared = name if isinstance(name, tuple) else (None, name)
            options = schema.VarHandleOptionsT()
            options.container, options.sharedName = container, shared
            b.op(ops.VAR_HANDLE, [], [handle], schema.BuiltinOptions.VarHandleOptions, options)
        if what == "assign":
            value = (
                x if isinstance(arg, str) else b.tensor(f"value{k}", np.shape(arg), values=np.asarray(arg, np.float32))
            )
            b.op(ops.ASSIGN_VARIABLE, [handle, value], [])
        else:
            read = b.tensor(f"read{k}", list(arg))
            b.op(ops.READ_VARIABLE, [handle], [read])
            reads.append(read)
    return reads


def init_signature_model(fails: str | None = None) -> bytes:
    """Two signatures: ``main`` (subgraph 0) reads variable ``state``; ``init`` (subgraph 1) assigns its input to it.

    ``main``: x [2, 6] -> read = READ_VARIABLE(VAR_HANDLE(state)) [2, 6] (x
    is unused); ``init``: x [2, 6] -> ASSIGN_VARIABLE(VAR_HANDLE(state), x),
    y = ADD(x, 0).  Nothing assigns the variable until ``init`` runs: the
    user calls it first, as a converted model with an init signature asks.
    ``fails`` ("before" or "after"): init's y is instead the custom
    operator ``FailsOnNegative`` (:func:`fails_on_negative_op`) of x, before
    or after the assignment, so an init given a negative x[0, 0] fails
    before it assigned, or once it did.
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator

    x = b.tensor("x", [2, 6])
    read = b.tensor("read", [2, 6])
    b.op(ops.READ_VARIABLE, [var_handle(b)], [read])
    b.next_subgraph([x], [read])
    x1 = b.tensor("x", [2, 6])
    y = b.tensor("y", [2, 6])
    if fails == "before":
        b.custom_op("FailsOnNegative", [x1], [y])
    b.op(ops.ASSIGN_VARIABLE, [var_handle(b), x1], [])
    if fails == "after":
        b.custom_op("FailsOnNegative", [x1], [y])
    elif fails is None:
        b.op(ops.ADD, [x1, b.tensor("zero", [1], values=np.zeros(1, np.float32))], [y])
    signatures = []
    for key, k, ins, outs in (("main", 0, {"x": x}, {"read": read}), ("init", 1, {"x": x1}, {"y": y})):
        sig = schema.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = key, k
        sig.inputs, sig.outputs = _tensor_maps(schema, ins), _tensor_maps(schema, outs)
        signatures.append(sig)
    b.model.signatureDefs = signatures
    return b.build([x1], [y])


def _fails_on_negative(inputs, outputs):
    if inputs[0].flat[0] < 0:
        raise ValueError("FailsOnNegative: x[0, 0] is negative")
    outputs[0][...] = inputs[0]


def fails_on_negative_op():
    """The Python op ``FailsOnNegative``: y = x, or an error when x's first value is negative (a failing invoke)."""
    import opaque_ops as oo

    return oo.python_op("FailsOnNegative", invoke=_fails_on_negative)


def _tensor_maps(schema, named: dict) -> list:
    out = []
    for name, index in named.items():
        m = schema.TensorMapT()
        m.name, m.tensorIndex = name, index
        out.append(m)
    return out


def if_assigned_model(passed: bool = True, computed: bool = False) -> bytes:
    """Subgraph 0: x [2, 6], cond [1] (bool) -> y = IF(cond, ...); read = READ_VARIABLE(VAR_HANDLE(state)).

    The IF's then-branch (subgraph 1) assigns x to the variable ``state``;
    the else-branch (subgraph 2) assigns nothing.  Both give y = ADD(x, 0).
    ``passed``: the IF is ``IF(cond, handle, x)`` and the then-branch
    assigns through the handle it is given (a subgraph input, not a
    VAR_HANDLE of its own); else ``IF(cond, x)`` and the then-branch has a
    VAR_HANDLE of ``state`` of its own.  ``computed``: the IF's condition
    is LOGICAL_NOT(cond), which the model computes (then-branch on a false
    cond).  Outputs ``[read, y]``.
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator

    x = b.tensor("x", [2, 6])
    cond = b.tensor("cond", [1], schema.TensorType.BOOL)
    handle = var_handle(b)
    y = b.tensor("y", [2, 6])
    if_options = schema.IfOptionsT()
    if_options.thenSubgraphIndex, if_options.elseSubgraphIndex = 1, 2
    picks = cond
    if computed:
        picks = b.tensor("not_cond", [1], schema.TensorType.BOOL)
        b.op(ops.LOGICAL_NOT, [cond], [picks])
    b.op(ops.IF, [picks, handle, x] if passed else [picks, x], [y], schema.BuiltinOptions.IfOptions, if_options)
    read = b.tensor("read", [2, 6])
    b.op(ops.READ_VARIABLE, [handle], [read])
    b.next_subgraph([x, cond], [read, y])
    for assign in (True, False):
        h = b.tensor("h", [], schema.TensorType.RESOURCE) if passed else None
        xb = b.tensor("x", [2, 6])
        yb = b.tensor("y", [2, 6])
        if assign:
            b.op(ops.ASSIGN_VARIABLE, [h if passed else var_handle(b), xb], [])
        b.op(ops.ADD, [xb, b.tensor("zero", [1], values=np.zeros(1, np.float32))], [yb])
        ins = [h, xb] if passed else [xb]
        if assign:
            b.next_subgraph(ins, [yb])
    return b.build(ins, [yb])


def if_init_signature_model() -> bytes:
    """Signatures ``main`` (subgraph 0: x [2, 6] -> read = READ_VARIABLE(VAR_HANDLE(state))) and ``init``.

    ``init`` (subgraph 1): x [2, 6], cond [1] (bool) -> y = IF(cond, x):
    the then-branch (subgraph 2) assigns x to ``state`` through a VAR_HANDLE
    of its own, the else-branch (subgraph 3) assigns nothing; both give
    y = ADD(x, 0).  So ``init`` assigns the variable only when cond is true.
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator

    def add_zero(x: int) -> int:
        y = b.tensor("y", [2, 6])
        b.op(ops.ADD, [x, b.tensor("zero", [1], values=np.zeros(1, np.float32))], [y])
        return y

    x = b.tensor("x", [2, 6])
    read = b.tensor("read", [2, 6])
    b.op(ops.READ_VARIABLE, [var_handle(b)], [read])
    b.next_subgraph([x], [read])
    x1 = b.tensor("x", [2, 6])
    cond = b.tensor("cond", [1], schema.TensorType.BOOL)
    y = b.tensor("y", [2, 6])
    if_options = schema.IfOptionsT()
    if_options.thenSubgraphIndex, if_options.elseSubgraphIndex = 2, 3
    b.op(ops.IF, [cond, x1], [y], schema.BuiltinOptions.IfOptions, if_options)
    b.next_subgraph([x1, cond], [y])
    xb = b.tensor("x", [2, 6])
    b.op(ops.ASSIGN_VARIABLE, [var_handle(b), xb], [])
    b.next_subgraph([xb], [add_zero(xb)])
    xb = b.tensor("x", [2, 6])
    yb = add_zero(xb)
    signatures = []
    for key, k, ins, outs in (("main", 0, {"x": x}, {"read": read}), ("init", 1, {"x": x1, "cond": cond}, {"y": y})):
        sig = schema.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = key, k
        sig.inputs, sig.outputs = _tensor_maps(schema, ins), _tensor_maps(schema, outs)
        signatures.append(sig)
    b.model.signatureDefs = signatures
    return b.build([xb], [yb])


def litert_allocated(data: bytes, xnnpack: bool):
    """ai-edge-litert's interpreter of ``data``, allocated: with its default delegates (XNNPACK), or without any.

    The peer's own behaviour for the same model, XNNPACK on or off, beside
    opaque_ops' in the variable tests.
    """
    from ai_edge_litert import interpreter as litert

    kw = {} if xnnpack else {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    it = litert.Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    return it
