"""invoke() refuses a value fed to an input that TFLite's kernel would crash on in Eval (interpreter.fed_values).

REVERSE_SEQUENCE with a sequence length past the sequence dimension, fed with
set_tensor (SIGSEGV for 10**8 on 2.17.1, 2.23.0 and ai-edge-litert alike),
REVERSE_V2 with an axis after which the input is empty (SIGSEGV, the same
three), and, on the runtimes ``version_rules.affected`` names, TOPK_V2 with
k = 0 and BROADCAST_TO to a shape empty before its last broadcast dimension
fed the same way (2.17.1: heap corruption, SIGABRT; 2.23.0 runs them).
The input these values are judged against may get its shape in the invoke
from fed values (data = TILE(x, multiples), or a RESHAPE to a fed shape in
a runner's subgraph): that shape is worked out before the invoke from them.
Every run that would crash without the check is in a child process; the
interpreter keeps working with a valid value afterwards, and its outputs are
compared with numpy and ai-edge-litert.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import opaque_ops._native as _native
from opaque_ops.errors import InvalidInputError
from opaque_ops.interpreter.fed_values import refuse_crashing_values
from opaque_ops.model import read_model
from opaque_ops.model.checks.version_rules import affected
from opaque_ops.model.fed_values import nodes_of
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import crashed, run_child
from tests.helpers.reference_models import reverse_sequence_reference
from tests.helpers.single_op import single_op_model

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

f32, i32 = np.float32, np.int32
X_RS = np.arange(6, dtype=f32).reshape(2, 3)
X_BROADCAST = np.array([[1, 2, 3]], f32)
X_TOPK = np.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]], f32)


def reverse_sequence_model(signature=None) -> bytes:
    return single_op_model(
        "REVERSE_SEQUENCE",
        {"x": ([2, 3], f32), "n": ([2], i32)},
        {},
        [([2, 3], f32)],
        {"seq_dim": 1, "batch_dim": 0},
        signature=signature,
    )


def reverse_v2_model(signature=None) -> bytes:
    return single_op_model(
        "REVERSE_V2", {"x": ([2, 3, 4], f32), "n": ([1], i32)}, {}, [([2, 3, 4], f32)], signature=signature
    )


def broadcast_to_model(signature=None) -> bytes:
    return single_op_model(
        "BROADCAST_TO", {"x": ([1, 3], f32), "n": ([3], i32)}, {}, [([2, 2, 3], f32)], version=2, signature=signature
    )


def top_k_model(signature=None) -> bytes:
    return single_op_model(
        "TOPK_V2", {"x": ([2, 6], f32), "n": ([], i32)}, {}, [([2, 1], f32), ([2, 1], i32)], signature=signature
    )


# Valid values first (the second invoke is the one the C fast call would
# run), then the crashing value, then a valid one again.  argv: the op, the
# way it is run, then the values as JSON: each a value, or [x's shape, value]
# for x = arange of that shape (resized first).
CHILD = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

op, mode, values = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model, x = {
    "reverse_sequence": (t.reverse_sequence_model, t.X_RS),
    "top_k": (t.top_k_model, t.X_TOPK),
    "reverse_v2": (t.reverse_v2_model, None),
    "broadcast_to": (t.broadcast_to_model, t.X_BROADCAST),
}[op]
it = oo.Interpreter(model_content=model("run"), isolate=mode.startswith("isolated"))
runner = it.get_signature_runner("run") if mode.endswith("signature") else None
if runner is None:
    it.allocate_tensors()
for n in values:
    if op == "reverse_v2":
        shape, n = n
        x = t.arange(shape)
        if runner is None and list(it.get_input_details()[0]["shape"]) != shape:
            it.resize_tensor_input(0, shape)
            it.allocate_tensors()
    n = np.array(n, np.int32)
    try:
        if runner is not None:
            out = runner(x=x, n=n)
            out = [out["out0"], out["out1"]] if "out1" in out else [out["out0"]]
        else:
            it.set_tensor(0, x)
            it.set_tensor(1, n)
            it.invoke()
            out = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    except oo.OpaqueOpsError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
    else:
        print(json.dumps({"out": [o.tolist() for o in out], "shapes": [o.shape for o in out]}), flush=True)
"""

MODES = ["in-process", "isolated", "signature", "isolated-signature"]


def _how(mode: str) -> str:
    """How a refusal's advice says to give the value: a runner's caller passes it as an argument."""
    return "as the runner's argument" if "signature" in mode else "with set_tensor()"


def _run(op, mode, values) -> list[dict]:
    p = run_child(CHILD, op, mode, json.dumps(values), timeout=180)
    assert p.returncode == 0, crashed(p)
    return [json.loads(line) for line in p.stdout.splitlines()]


def _litert(data: bytes, x, n) -> list[np.ndarray]:
    it = litert.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.set_tensor(it.get_input_details()[1]["index"], np.array(n, i32))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def arange(shape):
    return np.arange(np.prod(shape), dtype=f32).reshape(shape)


def _reversed(x, n):
    return np.stack([np.concatenate([row[:k][::-1], row[k:]]) for row, k in zip(x, n)])


@pytest.mark.parametrize("mode", MODES)
def test_a_fed_sequence_length_past_the_sequence_is_refused(mode):
    good, bad = [2, 3], [1, 10**8]
    lines = _run("reverse_sequence", mode, [good, good, bad, [1, 4], good])
    want = _reversed(X_RS, good)
    np.testing.assert_array_equal(want, _litert(reverse_sequence_model(), X_RS, good)[0])
    for k in (0, 1, 4):
        np.testing.assert_array_equal(np.array(lines[k]["out"][0], f32), want)
    where = "invoke()" if "signature" not in mode else "signature 'run': invoke"
    for line, shown in ((lines[2], bad), (lines[3], [1, 4])):
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"].startswith(
            f"{where}: input 1 ('n') of operator 0 (REVERSE_SEQUENCE) holds sequence lengths {shown}, but "
            f"input 0 (shape [2, 3]) has 3 steps along its sequence dimension 1 (length 1 is {shown[1]})"
        ), line
        # (A runner's caller gives the lengths as its argument, not with set_tensor.)
        assert f"Set lengths of at most 3 {_how(mode)}," in line["message"], line


@pytest.mark.parametrize("mode", MODES)
def test_a_fed_top_k_of_zero_is_refused_where_it_corrupts_memory(mode):
    version = runtime_info().version
    lines = _run("top_k", mode, [2, 2, 0, 2])
    want = _litert(top_k_model(), X_TOPK, 2)
    np.testing.assert_array_equal(want[0], -np.sort(-X_TOPK, axis=1)[:, :2])
    for k in (0, 1, 3):
        assert lines[k]["out"] == [want[0].tolist(), want[1].tolist()], lines
    if affected(version):
        assert lines[2].get("error") == "InvalidInputError", lines
        assert lines[2]["message"].endswith(
            "input 1 ('n') of operator 0 (TOPK_V2) holds k = 0 for rows of 6 values (input 0 of shape [2, 6]); "
            f"TFLite {version}'s TOPK_V2 corrupts memory for k = 0 (TFLite 2.23 runs it). Set k between 1 and 6 "
            f"{_how(mode)}, or use TFLite 2.23"
        ), lines[2]
    else:
        # Two empty rows, as numpy's top 0 (ai-edge-litert runs it too, but its
        # get_tensor refuses the empty output: "Invalid tensor size").
        assert lines[2]["shapes"] == [[2, 0], [2, 0]], lines


@pytest.mark.parametrize("mode", MODES)
def test_a_fed_axis_after_which_the_input_is_empty_is_refused(mode):
    full, empty = [2, 3, 4], [2, 0, 4]
    lines = _run("reverse_v2", mode, [[full, [1]], [full, [1]], [empty, [0]], [empty, [-3]], [empty, [2]], [full, [0]]])
    for k, (axis, shape) in {0: (1, full), 1: (1, full), 4: (2, empty), 5: (0, full)}.items():
        want = np.flip(arange(shape), axis)
        if shape == full:
            np.testing.assert_array_equal(want, _litert(reverse_v2_model(), arange(shape), [axis])[0])
        assert lines[k]["shapes"] == [list(want.shape)], lines
        np.testing.assert_array_equal(np.array(lines[k]["out"][0], f32).reshape(want.shape), want)
    where = "invoke()" if "signature" not in mode else "signature 'run': invoke"
    for line, axes in ((lines[2], [0]), (lines[3], [-3])):
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"] == (
            f"{where}: input 1 ('n') of operator 0 (REVERSE_V2) holds the axes {axes}, but input 0 of shape "
            "[2, 0, 4] is empty after the reversed axis 0, which TFLite's REVERSE_V2 cannot reverse (it reads "
            f"past the empty tensor). Reverse a later axis (set it {_how(mode)}), or resize the input without "
            "empty dimensions"
        ), line


@pytest.mark.parametrize("mode", MODES)
def test_a_fed_broadcast_shape_is_refused_where_it_corrupts_memory(mode):
    version = runtime_info().version
    lines = _run("broadcast_to", mode, [[2, 2, 3], [2, 2, 3], [0, 5, 3], [2, 0, 3], [2, 2, 3]])
    want = np.broadcast_to(X_BROADCAST, (2, 2, 3))
    np.testing.assert_array_equal(want, _litert(broadcast_to_model(), X_BROADCAST, [2, 2, 3])[0])
    for k in (0, 1, 4):
        np.testing.assert_array_equal(np.array(lines[k]["out"][0], f32), want)
    # Empty after the broadcast dimension: nothing to copy, every runtime runs it.
    assert lines[3]["shapes"] == [[2, 0, 3]], lines
    if affected(version):
        assert lines[2].get("error") == "InvalidInputError", lines
        assert lines[2]["message"].endswith(
            "input 1 ('n') of operator 0 (BROADCAST_TO) holds the shape [0, 5, 3], which is empty in a dimension "
            "before the last one input 0 of shape [1, 3] is broadcast along; "
            f"TFLite {version}'s BROADCAST_TO still copies rows into that empty output and corrupts memory "
            f"(TFLite 2.23 runs it). Set a shape that is not empty {_how(mode)}, or use TFLite 2.23"
        ), lines[2]
    else:
        assert lines[2]["shapes"] == [[0, 5, 3]], lines


def stepped_model(name: str) -> tuple:
    """For CHILD_STEPS: the model ``name`` names, its inputs' signature names and types in input order,
    the inputs resized when a step changes their shapes, and the output the runner returns.

    "reverse_sequence": reverse_sequence_model's x and n (both resized); "tiled-<lengths' dtype>":
    tiled_model's x, multiples and lengths (the multiples keep their shape [2])."""
    if name == "reverse_sequence":
        return reverse_sequence_model("run"), (("x", f32), ("n", i32)), (0, 1), "out0"
    lengths = np.dtype(name.removeprefix("tiled-")).type
    return tiled_model(lengths), (("x", f32), ("multiples", i32), ("lengths", lengths)), (0, 2), "out"


# A model that stepped_model names, run with its inputs changed between invokes: argv
# the way it is run, the model's name, then the steps as JSON, each x's shape
# and the other inputs' values in input order (x = arange of that shape).  The
# interpreter resizes the inputs stepped_model names and allocates again when
# a step changes their shapes; a runner is given the inputs by name.
CHILD_STEPS = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

mode, steps = sys.argv[1], json.loads(sys.argv[3])
model, inputs, resized, output = t.stepped_model(sys.argv[2])
it = oo.Interpreter(model_content=model, isolate=mode.startswith("isolated"))
runner = it.get_signature_runner("run") if mode.endswith("signature") else None
shapes = None
for shape, *rest in steps:
    values = [t.arange(shape)] + [np.array(v, dtype) for v, (_, dtype) in zip(rest, inputs[1:])]
    try:
        if runner is not None:
            out = runner(**{name: v for (name, _), v in zip(inputs, values)})[output]
        else:
            if shapes != [values[i].shape for i in resized]:
                shapes = None
                for i in resized:
                    it.resize_tensor_input(i, values[i].shape)
                it.allocate_tensors()
                shapes = [values[i].shape for i in resized]
            for i, v in enumerate(values):
                it.set_tensor(i, v)
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
    except oo.OpaqueOpsError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
    else:
        print(json.dumps({"out": out.tolist(), "shape": out.shape}), flush=True)
"""


@pytest.mark.parametrize("mode", MODES)
def test_fed_lengths_past_an_empty_sequence_run_and_an_empty_batch_is_refused(mode):
    """An input empty in a dimension other than its batch copies nothing: lengths past its sequence run
    on every runtime (the check used to refuse them).  An empty batch makes the kernel read a first
    length out of the empty lengths (SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert): refused, by the
    allocation's shape rules already (lengths of shape [0] need no value to be judged), in every mode."""
    steps = [
        ([2, 3], [2, 3]),
        ([2, 0], [0, 10**8]),
        ([2, 3], [1, 10**8]),
        ([0, 3], []),
        ([2, 0], [0, 5]),
        ([2, 3], [2, 3]),
    ]
    p = run_child(CHILD_STEPS, mode, "reverse_sequence", json.dumps(steps), timeout=180)
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    for k in (0, 1, 4, 5):
        shape, n = steps[k]
        want = reverse_sequence_reference(arange(shape), n, 1, 0)
        assert lines[k].get("shape") == list(want.shape), lines
        np.testing.assert_array_equal(np.array(lines[k]["out"], f32).reshape(want.shape), want)
    assert lines[2].get("error") == "InvalidInputError", lines
    assert "(length 1 is 100000000)" in lines[2]["message"], lines[2]
    assert lines[3].get("error") == "ShapeError", lines
    assert (
        "its input 0 of shape [0, 3] has an empty batch dimension 0, so its sequence lengths 1 are empty"
        in (lines[3]["message"])
    ), lines[3]


def test_the_fed_check_refuses_an_empty_batch_on_an_allocated_interpreter():
    """The check itself, on the runtime's tensors: an interpreter allocated without opaque_ops' shape
    rules (which refuse this first) holds x of shape [0, 3] and lengths of shape [0]; invoking it would
    crash, and refuse_crashing_values says why instead.  Lengths past an empty sequence pass."""
    data = reverse_sequence_model()
    nodes = nodes_of(read_model(data).subgraphs[0])
    for shape, n, refused in (([0, 3], [], True), ([2, 0], [0, 10**8], False), ([2, 3], [1, 3], False)):
        native = _native.NativeInterpreter(_native.NativeModel(data), [])
        assert native.resize_input(0, shape) == 0 and native.resize_input(1, [len(n)]) == 0
        assert native.allocate() == 0, native.sink.take()
        native.input_tensor(1).write(np.array(n, i32))
        if not refused:
            refuse_crashing_values(native, nodes, runtime_info().version, "invoke()")
            continue
        with pytest.raises(InvalidInputError) as info:
            refuse_crashing_values(native, nodes, runtime_info().version, "invoke()")
        assert str(info.value) == (
            "invoke(): input 1 ('n') of operator 0 (REVERSE_SEQUENCE) holds no sequence lengths for input 0 of "
            "shape [0, 3], whose batch dimension 0 is empty; TFLite's REVERSE_SEQUENCE reads a first length "
            "anyway, past the empty tensor (a crash). Resize the input to at least one batch, with one length "
            "each (the output would be empty: the operator can be skipped)"
        )


def second_signature_model(op: str) -> bytes:
    """Subgraph 0: b = a + 1 (signature "first"); subgraph 1, signature "second": ``op`` on x (index 0)
    and its fed value n (1), both with every dimension -1 in their shape signatures (the runner of
    subgraph 1 resizes strictly), outputs out0 (and out1 for TOPK_V2).

    ``op`` ending in ``+add`` (``reverse_sequence+add``): the op reads data = x + 0 (ADD with a zero
    constant of ones' shape, index 2: data is index 3), a tensor of subgraph 1 that the signature does
    not name, so the C API cannot tell its shape (operator 1 is then the op)."""
    from opaque_ops.model import ModelBuilder
    from tests.helpers.interpreter_models import _plus, join_with_signature

    op, computed = op.removesuffix("+add"), op.endswith("+add")
    x_shape, n_shape, outs, options = {
        "reverse_sequence": ([2, 3], [2], [([2, 3], f32)], {"seq_dim": 1, "batch_dim": 0}),
        "reverse_v2": ([2, 3, 4], [1], [([2, 3, 4], f32)], None),
        "top_k": ([2, 6], [], [([2, 1], f32), ([2, 1], i32)], None),
    }[op]
    b = ModelBuilder()
    x = b.add_tensor("x", x_shape, f32, shape_signature=[-1] * len(x_shape))
    n = b.add_tensor("n", n_shape, i32, shape_signature=[-1] * len(n_shape))
    data = x
    if computed:
        zeros = b.add_constant("zeros", np.zeros([1] * len(x_shape), f32))
        data = b.add_tensor("data", x_shape, f32, shape_signature=[-1] * len(x_shape))
        b.add_op("ADD", [x, zeros], [data])
    o = [b.add_tensor(f"out{k}", s, d) for k, (s, d) in enumerate(outs)]
    b.add_op(op.upper().replace("TOP_K", "TOPK_V2"), [data, n], o, options)
    b.set_inputs([x, n])
    b.set_outputs(o)
    first = _plus(1, [1, 4], "a", "b", "first")
    return join_with_signature(first, b.build(), "second", {"x": x, "n": n}, {f"out{k}": t for k, t in enumerate(o)})


# A runner of subgraph 1 (signature "second"): argv the op, whether isolated,
# then [x's shape, value] pairs as JSON (x = arange of that shape); the
# runner of subgraph 0 ("first") runs after each call, to show the
# interpreter is still usable.
CHILD_SECOND = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

op, isolated, steps = sys.argv[1], sys.argv[2] == "isolated", json.loads(sys.argv[3])
it = oo.Interpreter(model_content=t.second_signature_model(op), isolate=isolated)
runner, first = it.get_signature_runner("second"), it.get_signature_runner("first")
for shape, n in steps:
    try:
        out = runner(x=t.arange(shape), n=np.array(n, np.int32))
    except oo.OpaqueOpsError as exc:
        line = {"error": type(exc).__name__, "message": str(exc)}
    else:
        line = {"out": {k: v.tolist() for k, v in out.items()}, "shapes": {k: v.shape for k, v in out.items()}}
    line["first"] = first(a=np.ones((1, 4), np.float32))["b"].tolist()
    print(json.dumps(line), flush=True)
"""


def _run_second(op, mode, steps) -> list[dict]:
    p = run_child(CHILD_SECOND, op, mode, json.dumps(steps), timeout=180)
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == len(steps), lines
    assert all(line["first"] == [[2.0] * 4] for line in lines), lines
    return lines


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
def test_a_runner_of_another_subgraph_refuses_lengths_past_the_sequence(mode):
    """Lengths given to a runner of subgraph 1 are checked as set_tensor's are on subgraph 0 (before,
    SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert's runner alike); the runner runs valid ones after."""
    steps = [([2, 3], [2, 3]), ([2, 3], [1, 10**8]), ([2, 3], [1, 4]), ([2, 5], [5, 0]), ([2, 3], [3, 1])]
    lines = _run_second("reverse_sequence", mode, steps)
    for k in (0, 3, 4):
        shape, n = steps[k]
        want = reverse_sequence_reference(arange(shape), n, 1, 0)
        assert lines[k].get("shapes") == {"out0": list(want.shape)}, lines
        np.testing.assert_array_equal(np.array(lines[k]["out"]["out0"], f32), want)
    ref = litert.Interpreter(model_content=second_signature_model("reverse_sequence")).get_signature_runner("second")
    np.testing.assert_array_equal(ref(x=X_RS, n=np.array([2, 3], i32))["out0"], _reversed(X_RS, [2, 3]))
    for line, shown in ((lines[1], [1, 10**8]), (lines[2], [1, 4])):
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"].startswith(
            "signature 'second': invoke: input 'n' of operator 0 (REVERSE_SEQUENCE) of subgraph 1 holds sequence "
            f"lengths {shown}, but input 'x' (shape [2, 3]) has 3 steps along its sequence dimension 1 "
            f"(length 1 is {shown[1]})"
        ), line
        assert "Set lengths of at most 3 as the runner's argument," in line["message"], line


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
def test_a_runner_of_another_subgraph_refuses_an_axis_after_which_the_input_is_empty(mode):
    full, empty = [2, 3, 4], [2, 0, 4]
    steps = [(full, [1]), (empty, [0]), (empty, [-3]), (empty, [2]), (full, [0])]
    lines = _run_second("reverse_v2", mode, steps)
    for k in (0, 3, 4):
        shape, (axis,) = steps[k]
        want = np.flip(arange(shape), axis)
        assert lines[k].get("shapes") == {"out0": list(want.shape)}, lines
        np.testing.assert_array_equal(np.array(lines[k]["out"]["out0"], f32).reshape(want.shape), want)
    for line, axes in ((lines[1], [0]), (lines[2], [-3])):
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"].startswith(
            f"signature 'second': invoke: input 'n' of operator 0 (REVERSE_V2) of subgraph 1 holds the axes {axes}, "
            "but input 'x' of shape [2, 0, 4] is empty after the reversed axis 0"
        ), line


def test_a_runner_of_another_subgraph_finds_its_nodes_only_where_there_are_some():
    """The nodes are found when the runner is made; a runner of a subgraph without them, and a runner
    of subgraph 0 (the interpreter's own check), get none, so their calls do nothing more."""
    import opaque_ops as oo
    from tests.helpers.interpreter_models import two_subgraph_model

    it = oo.Interpreter(model_content=second_signature_model("reverse_sequence"))
    assert [n[1] for n in it.get_signature_runner("second")._fed] == ["REVERSE_SEQUENCE"]
    assert it.get_signature_runner("first")._fed == ()
    plain = oo.Interpreter(model_content=two_subgraph_model())
    assert plain.get_signature_runner("second")._fed == ()


# A data tensor the signature does not name (second_signature_model's "+add"):
# its shape is inferred from the runner's inputs after each allocation
# (SignatureTensors.infer).  Before, such a node was not checked: lengths
# [1, 10**8] gave SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert's runner
# alike, as did the REVERSE_V2 axis 0 on [2, 0, 4]; TOPK_V2 with k = 0
# SIGABRT on 2.17.1.
COMPUTED = "signature 'second': invoke: input 'n' of operator 1 ({}) of subgraph 1 holds "
DATA = "tensor 3 ('data', which the signature does not name)"


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
def test_a_runner_of_another_subgraph_refuses_lengths_past_a_computed_sequence(mode):
    """The lengths of a REVERSE_SEQUENCE whose data the subgraph computes are checked against the
    data's inferred shape, which follows each resize of x: lengths valid for the longer sequences run
    there and are refused for the shorter ones again; valid lengths give numpy's and ai-edge-litert's
    values before and after each refusal."""
    steps = [
        ([2, 3], [2, 3]),
        ([2, 3], [1, 10**8]),
        ([2, 5], [5, 0]),  # (refused if the shape of data [2, 3] were kept)
        ([2, 5], [5, 6]),
        ([2, 3], [1, 5]),  # (run past the data if the shape [2, 5] were kept)
        ([2, 3], [3, 1]),
    ]
    lines = _run_second("reverse_sequence+add", mode, steps)
    ref = litert.Interpreter(model_content=second_signature_model("reverse_sequence+add")).get_signature_runner(
        "second"
    )
    for k in (0, 2, 5):
        shape, n = steps[k]
        want = reverse_sequence_reference(arange(shape), n, 1, 0)
        assert lines[k].get("shapes") == {"out0": list(want.shape)}, lines
        np.testing.assert_array_equal(np.array(lines[k]["out"]["out0"], f32), want)
        np.testing.assert_array_equal(ref(x=arange(shape), n=np.array(n, i32))["out0"], want)
    for k, steps_long, length in ((1, 3, 10**8), (3, 5, 6), (4, 3, 5)):
        line, (shape, n) = lines[k], steps[k]
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"].startswith(
            COMPUTED.format("REVERSE_SEQUENCE") + f"sequence lengths {n}, but input {DATA} (shape {shape}) "
            f"has {steps_long} steps along its sequence dimension 1 (length 1 is {length})"
        ), line
        assert f"Set lengths of at most {steps_long} as the runner's argument," in line["message"], line


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
def test_a_runner_of_another_subgraph_refuses_an_axis_after_which_computed_data_is_empty(mode):
    """REVERSE_V2 on data the subgraph computes: axis 0 is refused while x (so data) is [2, 0, 4], and
    runs again once x is resized back to [2, 3, 4] (the inferred shape follows the resize)."""
    full, empty = [2, 3, 4], [2, 0, 4]
    steps = [(full, [1]), (empty, [0]), (empty, [2]), (full, [0])]
    lines = _run_second("reverse_v2+add", mode, steps)
    for k in (0, 2, 3):
        shape, (axis,) = steps[k]
        want = np.flip(arange(shape), axis)
        assert lines[k].get("shapes") == {"out0": list(want.shape)}, lines
        np.testing.assert_array_equal(np.array(lines[k]["out"]["out0"], f32).reshape(want.shape), want)
    assert lines[1].get("error") == "InvalidInputError", lines
    assert lines[1]["message"].startswith(
        COMPUTED.format("REVERSE_V2") + f"the axes [0], but input {DATA} of shape [2, 0, 4] is empty after the "
        "reversed axis 0"
    ), lines[1]


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
@pytest.mark.parametrize(
    "model, operator, data",
    [("top_k", 0, "input 'x'"), ("top_k+add", 1, f"input {DATA}")],
    ids=["named-data", "computed-data"],
)
def test_a_runner_of_another_subgraph_refuses_top_k_of_zero_where_it_corrupts_memory(mode, model, operator, data):
    """k = 0 given to the runner of subgraph 1, whose TOPK_V2 reads the signature's x itself or ADD(x, 0)."""
    version = runtime_info().version
    steps = [([2, 6], 2), ([2, 6], 0), ([2, 6], 3)]
    lines = _run_second(model, mode, steps)
    for k, n in ((0, 2), (2, 3)):
        x = arange([2, 6])
        assert lines[k]["out"] == {"out0": x[:, ::-1][:, :n].tolist(), "out1": [list(range(5, 5 - n, -1))] * 2}
    if affected(version):
        assert lines[1].get("error") == "InvalidInputError", lines
        assert lines[1]["message"].startswith(
            f"signature 'second': invoke: input 'n' of operator {operator} (TOPK_V2) of subgraph 1 holds k = 0 for "
            f"rows of 6 values ({data} of shape [2, 6]); TFLite {version}'s TOPK_V2 corrupts memory for k = 0"
        ), lines[1]
    else:
        assert lines[1]["shapes"] == {"out0": [2, 0], "out1": [2, 0]}, lines


def test_a_runner_infers_a_computed_data_shape_once_per_allocation(monkeypatch):
    """The inference runs at the first call after each allocation of the subgraph, not at every call;
    a runner whose nodes read only tensors the signature names never runs it."""
    import opaque_ops as oo
    from opaque_ops.interpreter.fed_values import SignatureTensors

    inferred = []
    infer = SignatureTensors.infer

    def counted(self, allocation, info, shape_of):
        inferred.append(self)
        infer(self, allocation, info, shape_of)

    monkeypatch.setattr(SignatureTensors, "infer", counted)
    it = oo.Interpreter(model_content=second_signature_model("reverse_sequence+add"))
    runner = it.get_signature_runner("second")
    assert runner._reach.unnamed == {3: "data"}
    for shape, n, count in (([2, 3], [3, 1], 1), ([2, 3], [2, 2], 1), ([2, 4], [4, 0], 2), ([2, 4], [1, 1], 2)):
        out = runner(x=arange(shape), n=np.array(n, i32))["out0"]
        np.testing.assert_array_equal(out, reverse_sequence_reference(arange(shape), n, 1, 0))
        assert len(inferred) == count, (shape, n)
    named = oo.Interpreter(model_content=second_signature_model("reverse_sequence")).get_signature_runner("second")
    assert named._reach.unnamed == {}
    named(x=X_RS, n=np.array([2, 3], i32))
    assert len(inferred) == 2


def reshaped_signature_model(named: bool = False) -> bytes:
    """Subgraph 1, signature "second": data = RESHAPE(x, s), then REVERSE_SEQUENCE(data, n) (seq_dim 1),
    x [3, 2], s and n [2], all inputs of the signature with every dimension -1: data's shape is s's
    value, which no shape rule can tell before the invoke.  Subgraph 0 as second_signature_model's.
    ``named``: data is an output of the subgraph and of the signature ("data") too, a dynamic tensor
    the runner reaches by name."""
    from opaque_ops.model import ModelBuilder
    from tests.helpers.interpreter_models import _plus, join_with_signature

    b = ModelBuilder()
    x = b.add_tensor("x", [3, 2], f32, shape_signature=[-1, -1])
    s = b.add_tensor("s", [2], i32, shape_signature=[-1])
    n = b.add_tensor("n", [2], i32, shape_signature=[-1])
    data = b.add_tensor("data", [2, 3], f32, shape_signature=[-1, -1])
    b.add_op("RESHAPE", [x, s], [data])
    out = b.add_tensor("out0", [2, 3], f32, shape_signature=[-1, -1])
    b.add_op("REVERSE_SEQUENCE", [data, n], [out], {"seq_dim": 1, "batch_dim": 0})
    b.set_inputs([x, s, n])
    outputs = {"out0": out, "data": data} if named else {"out0": out}
    b.set_outputs(list(outputs.values()))
    first = _plus(1, [1, 4], "a", "b", "first")
    return join_with_signature(first, b.build(), "second", {"x": x, "s": s, "n": n}, outputs)


def test_a_runner_checks_a_data_shape_that_a_fed_shape_makes():
    """x [3, 2] reshaped to [1, 6] by a fed shape: length 5 is valid for the data (6 steps), not for x
    (2) nor for the shape the model declares for data ([2, 3]), and runs (numpy's and ai-edge-litert's
    values).  The data's shape cannot be inferred from shapes alone (infer() leaves it None); the call
    works it out from the fed shape's values (made_shape), which is what the check uses."""
    import opaque_ops as oo

    data = reshaped_signature_model()
    runner = oo.Interpreter(model_content=data).get_signature_runner("second")
    feed = {"x": arange([3, 2]), "s": np.array([1, 6], i32), "n": np.array([5], i32)}
    want = reverse_sequence_reference(arange([1, 6]), [5], 1, 0)
    np.testing.assert_array_equal(runner(**feed)["out0"], want)
    assert runner._reach.unnamed == {3: "data"} and runner._reach.shape(3) is None
    assert runner._reach.made_shape(1, 3) == (1, 6)
    np.testing.assert_array_equal(
        litert.Interpreter(model_content=data).get_signature_runner("second")(**feed)["out0"], want
    )


# reshaped_signature_model's runner: argv the mode (isolated or not, data
# named by the signature or not), then [s, n] pairs
# as JSON (x = arange([3, 2]) each time); the runner of subgraph 0 ("first")
# runs after each call.
CHILD_RESHAPED = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

named = sys.argv[1].endswith("named")
it = oo.Interpreter(model_content=t.reshaped_signature_model(named), isolate=sys.argv[1].startswith("isolated"))
runner, first = it.get_signature_runner("second"), it.get_signature_runner("first")
for s, n in json.loads(sys.argv[2]):
    try:
        out = runner(x=t.arange([3, 2]), s=np.array(s, np.int32), n=np.array(n, np.int32))["out0"]
    except oo.OpaqueOpsError as exc:
        line = {"error": type(exc).__name__, "message": str(exc)}
    else:
        line = {"out": out.tolist(), "shape": out.shape}
    line["first"] = first(a=np.ones((1, 4), np.float32))["b"].tolist()
    print(json.dumps(line), flush=True)
"""


@pytest.mark.parametrize("mode", ["in-process", "isolated", "in-process-named"])
def test_a_runner_refuses_lengths_past_a_sequence_that_a_fed_shape_makes(mode):
    """data = RESHAPE(x, s) in subgraph 1, s fed: lengths past the sequence of the shape s makes are
    refused (before, [1, 10**8] on data [2, 3] gave SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert's
    runner alike; [2, 3, 1] on data [3, 2] read past a row), and valid ones run before and after, the
    interpreter's other runner too; the same where the signature names data (a dynamic output)."""
    steps = [([1, 6], [5]), ([2, 3], [1, 10**8]), ([3, 2], [2, 3, 1]), ([2, 3], [3, 1]), ([6, 1], [1] * 6)]
    p = run_child(CHILD_RESHAPED, mode, json.dumps(steps), timeout=180)
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == len(steps) and all(line["first"] == [[2.0] * 4] for line in lines), lines
    named = mode.endswith("named")
    ref = litert.Interpreter(model_content=reshaped_signature_model(named)).get_signature_runner("second")
    for k in (0, 3, 4):
        s, n = steps[k]
        want = reverse_sequence_reference(arange([3, 2]).reshape(s), n, 1, 0)
        assert lines[k].get("shape") == s, lines
        np.testing.assert_array_equal(np.array(lines[k]["out"], f32), want)
        got = ref(x=arange([3, 2]), s=np.array(s, i32), n=np.array(n, i32))["out0"]
        np.testing.assert_array_equal(got, want)
    data = "'data'" if named else DATA
    for k, steps_long, length in ((1, 3, 10**8), (2, 2, 3)):
        line, (s, n) = lines[k], steps[k]
        assert line.get("error") == "InvalidInputError", lines
        assert line["message"].startswith(
            COMPUTED.format("REVERSE_SEQUENCE") + f"sequence lengths {n}, but input {data} "
            f"(shape {s}) has {steps_long} steps along its sequence dimension 1 (length 1 is {length})"
        ), line
        assert line["message"].endswith(
            f"Set lengths of at most {steps_long} as the runner's argument, or feed values that give the input "
            "longer sequences"
        ), line


# A data tensor whose shape a fed value makes (interpreter.fed_values.MadeShapes).
# Subgraph 0: data = TILE(x, multiples), then REVERSE_SEQUENCE(data, lengths);
# x, multiples and lengths are the model's inputs.  data is dynamic (its shape
# is set in the invoke, from the multiples: 2.17.1 and 2.23.0 alike), so the
# check used to skip the node: lengths [1, 10**8] on data [2, 3] and the empty
# batch of multiples [0, 1] (lengths []) gave SIGSEGV on 2.17.1 and 2.23.0,
# with XNNPACK and without, and on ai-edge-litert; lengths [1, 7] on data
# [2, 6] read one step past the row (garbage in the output, all of them).
def tiled_model(lengths=i32) -> bytes:
    """x [2, 3] (every dimension -1 in its shape signature), multiples [2] (INT32), lengths [2] of
    ``lengths``' type ([-1]); data = TILE(x, multiples) and out = REVERSE_SEQUENCE(data, lengths)
    (seq_dim 1, batch_dim 0), data and out declared [2, 3]; signature "run" of the three inputs and out."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], f32, shape_signature=[-1, -1])
    m = b.add_tensor("multiples", [2], i32)
    n = b.add_tensor("lengths", [2], lengths, shape_signature=[-1])
    data = b.add_tensor("data", [2, 3], f32, shape_signature=[-1, -1])
    b.add_op("TILE", [x, m], [data])
    out = b.add_tensor("out", [2, 3], f32, shape_signature=[-1, -1])
    b.add_op("REVERSE_SEQUENCE", [data, n], [out], {"seq_dim": 1, "batch_dim": 0})
    b.set_inputs([x, m, n])
    b.set_outputs([out])
    b.add_signature("run", {"x": x, "multiples": m, "lengths": n}, {"out": out})
    return b.build()


def tile_reference(x, multiples):
    """TILE by its definition: dimension i grows multiples[i] times, element j of it is x's j mod x.shape[i]."""
    return x[np.ix_(*[np.arange(d * k) % d for d, k in zip(x.shape, multiples)])]


TILED_STEPS = [
    ([2, 3], [1, 1], [2, 3]),
    ([2, 3], [1, 1], [2, 3]),
    ([2, 3], [1, 1], [1, 10**8]),  # (SIGSEGV)
    ([2, 3], [0, 1], []),  # (an empty batch: SIGSEGV)
    ([2, 3], [1, 2], [1, 7]),  # (one step past data [2, 6]: garbage)
    ([2, 3], [2, 1], [1, 2, 3, 3]),
    ([2, 3], [1, 0], [0, 10**8]),  # (an empty sequence: nothing is copied, every runtime runs it)
    ([2, 3], [1, 2], [1, 6]),  # (past x's and the declared data's 3 steps, not the tiled 6: runs)
    ([3, 2], [1, 2], [1, 5, 1]),  # (x resized, the same multiples: data [3, 4], not the [2, 6] before)
    ([3, 2], [1, 2], [4, 1, 0]),
    ([3, 2], [1, 1], [1, 3, 2]),  # (3 steps past data [3, 2])
    ([2, 3], [1, 1], [3, 1]),
]
TILED_REFUSED = {2: ([2, 3], 3, 1, 10**8), 4: ([2, 6], 6, 1, 7), 8: ([3, 4], 4, 1, 5), 10: ([3, 2], 2, 1, 3)}


@pytest.mark.parametrize(
    "mode, dtype, fast",
    [*((mode, "int32", "1") for mode in MODES), ("in-process", "int64", "1"), ("in-process", "int32", "0")],
)
def test_lengths_past_a_sequence_that_fed_multiples_make_are_refused(mode, dtype, fast):
    """REVERSE_SEQUENCE on data = TILE(x, multiples), both fed: data's shape is set in the invoke, from
    the multiples, and the check works it out before from the values fed now (with XNNPACK as the
    interpreter makes it, and as a runner of subgraph 0 writes them; with C fast calls turned off too).
    Lengths past the tiled sequence and the empty batch of multiples [0, 1] are refused; valid lengths,
    those past x's sequence but not the tiled one's included, give numpy's and ai-edge-litert's values,
    before and after each refusal."""
    p = run_child(
        CHILD_STEPS, mode, f"tiled-{dtype}", json.dumps(TILED_STEPS), env={"OPAQUE_OPS_FASTCALLS": fast}, timeout=180
    )
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == len(TILED_STEPS), lines
    where = "invoke()" if "signature" not in mode else "signature 'run': invoke"
    data = "input 3 ('data', whose shape the invoke makes from the fed values)"
    ref = litert.Interpreter(model_content=tiled_model(np.dtype(dtype).type)).get_signature_runner("run")
    for k, (shape, m, n) in enumerate(TILED_STEPS):
        line = lines[k]
        if k == 3:
            assert line.get("error") == "InvalidInputError", lines
            assert line["message"] == (
                f"{where}: input 2 ('lengths') of operator 1 (REVERSE_SEQUENCE) holds no sequence lengths for "
                f"{data} of shape [0, 3], whose batch dimension 0 is empty; TFLite's REVERSE_SEQUENCE reads a first "
                "length anyway, past the empty tensor (a crash). Feed values that give the input at least one "
                "batch, with one length each (the output would be empty: the operator can be skipped)"
            ), line
        elif k in TILED_REFUSED:
            tiled, steps, at, length = TILED_REFUSED[k]
            assert line.get("error") == "InvalidInputError", lines
            assert line["message"].startswith(
                f"{where}: input 2 ('lengths') of operator 1 (REVERSE_SEQUENCE) holds sequence lengths {n}, but "
                f"{data} (shape {tiled}) has {steps} steps along its sequence dimension 1 (length {at} is {length})"
            ), line
            assert line["message"].endswith(
                f"Set lengths of at most {steps} {_how(mode)}, or feed values that give the input longer sequences"
            ), line
        else:
            want = reverse_sequence_reference(tile_reference(arange(shape), m), n, 1, 0)
            assert line.get("shape") == list(want.shape), lines
            np.testing.assert_array_equal(np.array(line["out"], f32).reshape(want.shape), want)
            if want.size:  # (ai-edge-litert's get_tensor refuses an empty output: "Invalid tensor size")
                got = ref(x=arange(shape), multiples=np.array(m, i32), lengths=np.array(n, dtype))["out"]
                np.testing.assert_array_equal(got, want)


def test_only_a_data_shape_that_fed_values_make_is_inferred_and_once_per_values(monkeypatch):
    """The inference runs for a dynamic data tensor only, once per input shapes and values of the
    inputs shape rules read (here the multiples, not the lengths); a model whose nodes read an input
    never reads the model for it, a model without such nodes never makes the object, and a runner
    whose data is its input gets none."""
    import opaque_ops as oo
    import opaque_ops.model.shapes as shapes

    inferred = []
    infer = shapes.infer_shapes

    def counted(*args, **kw):
        inferred.append(kw.get("values"))
        return infer(*args, **kw)

    monkeypatch.setattr(shapes, "infer_shapes", counted)
    it = oo.Interpreter(model_content=tiled_model())
    it.allocate_tensors()
    for m, n, count in (([1, 1], [2, 3], 1), ([1, 1], [3, 1], 1), ([1, 2], [6, 1], 2), ([1, 2], [6, 1], 2)):
        x = arange([2, 3])
        it.set_tensor(0, x)
        it.set_tensor(1, np.array(m, i32))
        it.set_tensor(2, np.array(n, i32))
        it.invoke()
        out = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(out, reverse_sequence_reference(tile_reference(x, m), n, 1, 0))
        assert len(inferred) == count and inferred[-1] == {1: m}, (m, n)
    assert it._made_shapes._seeds == (1,)
    plain = oo.Interpreter(model_content=reverse_sequence_model())
    plain.allocate_tensors()
    plain.set_tensor(0, X_RS)
    plain.set_tensor(1, np.array([2, 3], i32))
    plain.invoke()
    assert plain._made_shapes._seeds is None and len(inferred) == 2
    from tests.helpers.interpreter_models import two_subgraph_model

    assert oo.Interpreter(model_content=two_subgraph_model())._made_shapes is None
    named = oo.Interpreter(model_content=second_signature_model("reverse_sequence")).get_signature_runner("second")
    named(x=X_RS, n=np.array([2, 3], i32))
    assert not named._reach.computed and named._reach.made is None and len(inferred) == 2


def tiled_op_model(op: str) -> bytes:
    """data = TILE(x, multiples), then ``op`` ("reverse_v2" or "top_k") on data and its fed value n: x
    [2, 3, 4] and n [1] for REVERSE_V2, x [2, 3] and a scalar k for TOPK_V2; x, multiples and n are
    the model's inputs, data and the outputs declared with x's shape (the outputs' -1 everywhere)."""
    from opaque_ops.model import ModelBuilder

    x_shape, n_shape, outs = {
        "reverse_v2": ([2, 3, 4], [1], [f32]),
        "top_k": ([2, 3], [], [f32, i32]),
    }[op]
    b = ModelBuilder()
    x = b.add_tensor("x", x_shape, f32)
    m = b.add_tensor("multiples", [len(x_shape)], i32)
    n = b.add_tensor("n", n_shape, i32)
    data = b.add_tensor("data", x_shape, f32, shape_signature=[-1] * len(x_shape))
    b.add_op("TILE", [x, m], [data])
    o = [b.add_tensor(f"out{k}", x_shape, d, shape_signature=[-1] * len(x_shape)) for k, d in enumerate(outs)]
    b.add_op("REVERSE_V2" if op == "reverse_v2" else "TOPK_V2", [data, n], o)
    b.set_inputs([x, m, n])
    b.set_outputs(o)
    return b.build()


# argv: the op, then [multiples, value] pairs as JSON (x = arange of its shape).
CHILD_TILED_OP = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

op, steps = sys.argv[1], json.loads(sys.argv[2])
it = oo.Interpreter(model_content=t.tiled_op_model(op))
it.allocate_tensors()
for m, n in steps:
    it.set_tensor(0, t.arange(it.get_input_details()[0]["shape"]))
    it.set_tensor(1, np.array(m, np.int32))
    it.set_tensor(2, np.array(n, np.int32))
    try:
        it.invoke()
    except oo.OpaqueOpsError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
    else:
        out = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        print(json.dumps({"out": [o.tolist() for o in out], "shapes": [o.shape for o in out]}), flush=True)
"""


def test_an_axis_after_which_data_that_fed_multiples_make_is_empty_is_refused():
    """REVERSE_V2 on data = TILE(x, multiples): multiples [1, 0, 1] make data [2, 0, 4], and axis 0
    then reads past it (SIGSEGV on 2.17.1 and 2.23.0 before); axis 2 there, and axis 0 on data
    [2, 6, 4], run (numpy's values)."""
    steps = [([1, 2, 1], [0]), ([1, 0, 1], [0]), ([1, 0, 1], [2]), ([1, 2, 1], [0])]
    p = run_child(CHILD_TILED_OP, "reverse_v2", json.dumps(steps), timeout=180)
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    for k in (0, 2, 3):
        m, (axis,) = steps[k]
        want = np.flip(tile_reference(arange([2, 3, 4]), m), axis)
        assert lines[k].get("shapes") == [list(want.shape)], lines
        np.testing.assert_array_equal(np.array(lines[k]["out"][0], f32).reshape(want.shape), want)
    assert lines[1].get("error") == "InvalidInputError", lines
    assert lines[1]["message"] == (
        "invoke(): input 2 ('n') of operator 1 (REVERSE_V2) holds the axes [0], but input 3 ('data', whose shape "
        "the invoke makes from the fed values) of shape [2, 0, 4] is empty after the reversed axis 0, which "
        "TFLite's REVERSE_V2 cannot reverse (it reads past the empty tensor). Reverse a later axis (set it with "
        "set_tensor()), or feed values that give the input no empty dimensions"
    ), lines[1]


def test_top_k_of_zero_on_data_that_fed_multiples_make_is_refused_where_it_corrupts_memory():
    """TOPK_V2 on data = TILE(x, multiples), k fed: k = 0 on rows of 6 (multiples [1, 2]) corrupts
    2.17.1's heap (SIGABRT before) and is refused there; 2.23.0 runs it (empty rows)."""
    version = runtime_info().version
    steps = [([1, 2], 2), ([1, 2], 0), ([2, 1], 3)]
    p = run_child(CHILD_TILED_OP, "top_k", json.dumps(steps), timeout=180)
    assert p.returncode == 0, crashed(p)
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    for k in (0, 2):
        m, n = steps[k]
        data = tile_reference(arange([2, 3]), m)
        assert lines[k].get("out", [None])[0] == (-np.sort(-data, axis=1)[:, :n]).tolist(), lines
    if affected(version):
        assert lines[1].get("error") == "InvalidInputError", lines
        assert lines[1]["message"].startswith(
            "invoke(): input 2 ('n') of operator 1 (TOPK_V2) holds k = 0 for rows of 6 values (input 3 ('data', "
            f"whose shape the invoke makes from the fed values) of shape [2, 6]); TFLite {version}'s TOPK_V2 "
            "corrupts memory for k = 0"
        ), lines[1]
    else:
        assert lines[1]["shapes"] == [[2, 0], [2, 0]], lines
