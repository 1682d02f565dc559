"""Small models the interpreter's tests share (built with ModelBuilder, no TensorFlow)."""

from __future__ import annotations

import numpy as np

from opaque_ops.model import ModelBuilder


def add_model() -> bytes:
    """y = x + c: x (index 0) a [2, 3] float32 input, c (1) a constant, y (2) the output."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    c = b.add_constant("c", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.add_tensor("y", [2, 3], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def doubling_model(shape, shape_signature=None, signature: str | None = "s") -> bytes:
    """y = x + x: x (index 0) the float32 input of ``shape`` (and ``shape_signature``), y (1) the output;
    one signature ``signature`` (x -> y) unless None."""
    b = ModelBuilder()
    x = b.add_tensor("x", list(shape), np.float32, shape_signature=shape_signature)
    y = b.add_tensor("y", list(shape), np.float32, shape_signature=shape_signature)
    b.add_op("ADD", [x, x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature is not None:
        b.add_signature(signature, {"x": x}, {"y": y})
    return b.build()


def valid_conv_model() -> bytes:
    """A VALID 1x8 CONV_2D of x (index 0, [1, 1, 16, 1], width resizable): y (3) is [1, 1, 9, 1].

    An input narrower than 8 gives the window no place: the allocated-shape
    checks refuse it (XNNPACK would read outside the input).
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, 16, 1], np.float32, shape_signature=[1, 1, -1, 1])
    w = b.add_constant("w", np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8, 1))
    bias = b.add_constant("b", np.full(1, 0.5, np.float32))
    y = b.add_tensor("y", [1, 1, 9, 1], np.float32)
    b.add_op("CONV_2D", [x, w, bias], [y], options={"padding": "VALID", "stride_w": 1, "stride_h": 1})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def tile_model() -> bytes:
    """y = 2 * tile(x, multiples): ``tiled`` is dynamic, ``y`` is resized while the model runs.

    x (index 0) [4] float32, multiples (1) [1] int32, y (3); signature "run".
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    m = b.add_tensor("multiples", [1], np.int32)
    t = b.add_tensor("tiled", [4], np.float32, shape_signature=[-1])
    y = b.add_tensor("y", [4], np.float32, shape_signature=[-1])
    b.add_op("TILE", [x, m], [t])
    b.add_op("ADD", [t, t], [y])
    b.set_inputs([x, m])
    b.set_outputs([y])
    b.add_signature("run", {"x": x, "multiples": m}, {"y": y})
    return b.build()


def pyop_model(signature: str | None = None, op: str = "Twice") -> bytes:
    """y = op(x) for a Python op: x (0) and y (1), [4] float32; with ``signature``, a SignatureDef of that key."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    y = b.add_tensor("y", [4], np.float32)
    b.add_custom_op(op, [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature is not None:
        b.add_signature(signature, {"x": x}, {"y": y})
    return b.build()


def _plus(k: float, shape, in_name: str, out_name: str, key: str | None) -> bytes:
    """out = in + k on float32 ``shape`` (dimension 1 dynamic): in (index 0), k (1), out (2)."""
    b = ModelBuilder()
    sig = [shape[0], -1]
    x = b.add_tensor(in_name, shape, np.float32, shape_signature=sig)
    c = b.add_constant("c", np.full([1] * len(shape), k, np.float32))
    y = b.add_tensor(out_name, shape, np.float32, shape_signature=sig)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if key is not None:
        b.add_signature(key, {in_name: x}, {out_name: y})
    return b.build()


def join_with_signature(main: bytes, other: bytes, key: str, inputs: dict, outputs: dict) -> bytes:
    """``main``'s subgraph 0 followed by ``other``'s as subgraph 1, which gets the signature ``key``.

    ``inputs`` and ``outputs`` map signature names to tensor indices in
    ``other``.  ModelBuilder writes one subgraph, and a signature of
    subgraph 1 is the only way the C API reaches another subgraph's tensors,
    so the runner tests build their models here.
    """
    from tools.fuzz_structured import _join_subgraphs, _schema, pack

    m = _join_subgraphs(main, other)
    s = _schema()
    sd = s.SignatureDefT()
    sd.signatureKey, sd.subgraphIndex = key, 1
    sd.inputs, sd.outputs = [], []
    for names, maps in ((inputs, sd.inputs), (outputs, sd.outputs)):
        for name, index in names.items():
            tm = s.TensorMapT()
            tm.name, tm.tensorIndex = name, index
            maps.append(tm)
    m.signatureDefs.append(sd)
    return pack(m)


def two_subgraph_model() -> bytes:
    """Two signatures on two subgraphs, each tensor at the same index in its subgraph.

    Subgraph 0, signature "first": y = x + 1, x (index 0) [1, 4] (signature
    [1, -1]), y (2).  Subgraph 1, signature "second": out = inp + 2, inp (0)
    [1, 6] (signature [1, -1]), out (2).  Running "second" plans subgraph 1
    only: subgraph 0 stays unallocated.
    """
    first = _plus(1, [1, 4], "x", "y", "first")
    return join_with_signature(first, _plus(2, [1, 6], "inp", "out", None), "second", {"inp": 0}, {"out": 2})


def squared_sum_model(signature: bool = False, state: bool = False) -> bytes:
    """y = (x + x) * (x + x) on float32 [1, 4] (signature [1, -1]); without ``state``, x is index 0, a 1, y 2.

    At MUL, x (a graph input, alive all the run), the intermediate and the
    output are live together: the memory tests' arena is three times x.
    ``signature`` adds "serving_default" (x_in -> y_out); ``state`` puts a
    variable first (v, then w = v + v, a second output).
    """
    b = ModelBuilder()
    if state:
        # A variable, first of the tensors, used apart (v + v): TFLite keeps it
        # in its persistent arena, not beside x, the intermediate and y.
        v = b.add_tensor("v", [1, 1], np.float32, is_variable=True)
        w = b.add_tensor("w", [1, 1], np.float32)
    # (The -1 lets a signature runner resize it; the Interpreter resizes any input.)
    x = b.add_tensor("x", [1, 4], np.float32, shape_signature=[1, -1])
    a = b.add_tensor("a", [1, 4], np.float32, shape_signature=[1, -1])
    y = b.add_tensor("y", [1, 4], np.float32, shape_signature=[1, -1])
    b.add_op("ADD", [x, x], [a])
    b.add_op("MUL", [a, a], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if state:
        b.add_op("ADD", [v, v], [w])
        b.set_outputs([y, w])
    if signature:
        b.add_signature("serving_default", inputs={"x_in": x}, outputs={"y_out": y})
    return b.build()


def feed(it, values) -> list:
    """Resize every input of ``it`` to its value's shape, allocate, set, invoke: the outputs, in order."""
    details = it.get_input_details()
    for d, v in zip(details, values):
        it.resize_tensor_input(d["index"], list(np.shape(v)))
    it.allocate_tensors()
    for d, v in zip(details, values):
        it.set_tensor(d["index"], np.asarray(v, d["dtype"]))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]
