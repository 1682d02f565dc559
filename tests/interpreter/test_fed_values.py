"""invoke() refuses a value fed to an input that TFLite's kernel would crash on in Eval (interpreter.fed_values).

REVERSE_SEQUENCE with a sequence length past the sequence dimension, fed with
set_tensor (SIGSEGV for 10**8 on 2.17.1, 2.23.0 and ai-edge-litert alike),
REVERSE_V2 with an axis after which the input is empty (SIGSEGV, the same
three), and, on the runtimes ``version_rules.affected`` names, TOPK_V2 with
k = 0 and BROADCAST_TO to a shape empty before its last broadcast dimension
fed the same way (2.17.1: heap corruption, SIGABRT; 2.23.0 runs them).
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


# REVERSE_SEQUENCE with x resized between invokes: argv the way it is run,
# then [x's shape, lengths] pairs as JSON (x = arange of that shape).
CHILD_SHAPES = """
import json, sys
import numpy as np
import opaque_ops as oo
from tests.interpreter import test_fed_values as t

mode, steps = sys.argv[1], json.loads(sys.argv[2])
it = oo.Interpreter(model_content=t.reverse_sequence_model("run"), isolate=mode.startswith("isolated"))
runner = it.get_signature_runner("run") if mode.endswith("signature") else None
shape = None
for shape_now, n in steps:
    x, n = t.arange(shape_now), np.array(n, np.int32)
    try:
        if runner is not None:
            out = runner(x=x, n=n)["out0"]
        else:
            if shape_now != shape:
                shape = None
                it.resize_tensor_input(0, shape_now)
                it.resize_tensor_input(1, [len(n)])
                it.allocate_tensors()
                shape = shape_now
            it.set_tensor(0, x)
            it.set_tensor(1, n)
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
    p = run_child(CHILD_SHAPES, mode, json.dumps(steps), timeout=180)
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


@pytest.mark.parametrize("mode", ["in-process", "isolated"])
def test_a_runner_of_another_subgraph_refuses_top_k_of_zero_where_it_corrupts_memory(mode):
    version = runtime_info().version
    steps = [([2, 6], 2), ([2, 6], 0), ([2, 6], 3)]
    lines = _run_second("top_k", mode, steps)
    for k, n in ((0, 2), (2, 3)):
        x = arange([2, 6])
        assert lines[k]["out"] == {"out0": x[:, ::-1][:, :n].tolist(), "out1": [list(range(5, 5 - n, -1))] * 2}
    if affected(version):
        assert lines[1].get("error") == "InvalidInputError", lines
        assert lines[1]["message"].startswith(
            "signature 'second': invoke: input 'n' of operator 0 (TOPK_V2) of subgraph 1 holds k = 0 for rows of "
            f"6 values (input 'x' of shape [2, 6]); TFLite {version}'s TOPK_V2 corrupts memory for k = 0"
        ), lines[1]
    else:
        assert lines[1]["shapes"] == {"out0": [2, 0], "out1": [2, 0]}, lines


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
def test_a_runner_of_another_subgraph_refuses_top_k_of_zero_on_computed_data_where_it_corrupts_memory(mode):
    version = runtime_info().version
    steps = [([2, 6], 2), ([2, 6], 0), ([2, 6], 3)]
    lines = _run_second("top_k+add", mode, steps)
    for k, n in ((0, 2), (2, 3)):
        x = arange([2, 6])
        assert lines[k]["out"] == {"out0": x[:, ::-1][:, :n].tolist(), "out1": [list(range(5, 5 - n, -1))] * 2}
    if affected(version):
        assert lines[1].get("error") == "InvalidInputError", lines
        assert lines[1]["message"].startswith(
            COMPUTED.format("TOPK_V2") + f"k = 0 for rows of 6 values (input {DATA} of shape [2, 6]); TFLite "
            f"{version}'s TOPK_V2 corrupts memory for k = 0"
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


def reshaped_signature_model() -> bytes:
    """Subgraph 1, signature "second": data = RESHAPE(x, s), then REVERSE_SEQUENCE(data, n) (seq_dim 1),
    x [3, 2], s and n [2], all inputs of the signature with every dimension -1: data's shape is s's
    value, which no shape rule can tell before the invoke.  Subgraph 0 as second_signature_model's."""
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
    b.set_outputs([out])
    first = _plus(1, [1, 4], "a", "b", "first")
    return join_with_signature(first, b.build(), "second", {"x": x, "s": s, "n": n}, {"out0": out})


def test_a_runner_leaves_a_data_shape_that_depends_on_values_unchecked():
    """x [3, 2] reshaped to [1, 6] by a fed shape: length 5 is valid for the data (6 steps), not for x
    (2) nor for the shape the model declares for data ([2, 3]), and runs; the data's shape is not
    known before the invoke, so nothing refuses it (numpy's and ai-edge-litert's values)."""
    import opaque_ops as oo

    data = reshaped_signature_model()
    runner = oo.Interpreter(model_content=data).get_signature_runner("second")
    feed = {"x": arange([3, 2]), "s": np.array([1, 6], i32), "n": np.array([5], i32)}
    want = reverse_sequence_reference(arange([1, 6]), [5], 1, 0)
    np.testing.assert_array_equal(runner(**feed)["out0"], want)
    assert runner._reach.unnamed == {3: "data"} and runner._reach.shape(3) is None
    np.testing.assert_array_equal(
        litert.Interpreter(model_content=data).get_signature_runner("second")(**feed)["out0"], want
    )
