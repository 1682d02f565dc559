"""opaque_ops.compat's classes refuse what the newest model rules refuse, as opaque_ops.Interpreter does.

Unmodified tflite_runtime code gets compat's ``Interpreter`` (a subclass
whose calls take the C fast calls in process) or, with ``isolate=True``, its
isolated twin.  The rules those models meet were tested through
``opaque_ops.Interpreter`` only: the shapes whose Eval crashes every runtime
(REVERSE_V2 empty after the axis, MATRIX_SET_DIAG's short diagonal,
REVERSE_SEQUENCE lengths past the sequence or an empty batch, SELECT's
condition; opaque_ops/model/shapes.py), SELECT's row-wise mode kept after a
resize (opaque_ops/model/select_rows.py), and the fed values invoke()
refuses (opaque_ops/interpreter/fed_values.py).  Each case here is the same
steps (resize and allocate, set and invoke) with the models of those tests,
run in a child process (compat's import hook changes ``sys.modules``, and a
regressed rule would crash it) by ``opaque_ops.Interpreter`` and by the
class ``import tflite_runtime.interpreter`` gives after
``opaque_ops.compat.install()``: every step must end the same way, the same
outputs or the same exception with the same message, and the refusal must
be the one those tests expect.  The steps after a refusal show that the
interpreter is still usable.  The same runs again with ``isolate=True``.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from opaque_ops.model import read_model
from opaque_ops.model.checks.version_rules import affected
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import crashed, run_child
from tests.interpreter.test_fed_values import (
    X_BROADCAST,
    X_RS,
    X_TOPK,
    arange,
    broadcast_to_model,
    reverse_sequence_model,
    reverse_v2_model,
    top_k_model,
)
from tests.model.test_select_rows import STALE, select_model
from tests.model.test_shapes import EVAL_CRASHERS

f32, i32 = np.float32, np.int32

# argv: the cases' pickle, then "isolated" or "in-process".  Prints one JSON
# document: per case, the outcomes of its steps for each class, and whether
# each in-process interpreter had its fast calls.
CHILD = """
import json, pickle, sys
import numpy as np
import opaque_ops as oo
import opaque_ops.compat as compat

compat.install()
import tflite_runtime.interpreter as tfl

with open(sys.argv[1], "rb") as f:
    cases = pickle.load(f)
isolate = sys.argv[2] == "isolated"

def outcome(call):
    try:
        return {"ok": call()}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}

def run(cls, data, steps):
    it = cls(model_content=data, isolate=isolate)
    inputs = it.get_input_details()
    done = []
    for step, values in steps:
        if step == "allocate":
            def call():
                for d, shape in zip(inputs, values):
                    it.resize_tensor_input(d["index"], shape)
                it.allocate_tensors()
                return None
        else:
            def call():
                for d, x in zip(inputs, values):
                    it.set_tensor(d["index"], x)
                it.invoke()
                outs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
                return [[list(o.shape), o.tolist()] for o in outs]
        done.append(outcome(call))
    fast = getattr(it, "_fast", None) is not None
    it.close()
    return done, fast

result = {}
for name, (data, steps) in cases.items():
    ours, ours_fast = run(oo.Interpreter, data, steps)
    theirs, theirs_fast = run(tfl.Interpreter, data, steps)
    result[name] = {"oo": ours, "compat": theirs, "fast": [ours_fast, theirs_fast]}
print(json.dumps(result))
"""


def _declared(data: bytes) -> list:
    """Each input's shape as the model declares it, and values for it (arange; alternating for a condition)."""
    sg = read_model(data).subgraphs[0]
    shapes, values = [], []
    for t in sg.inputs:
        tensor = sg.tensors[t]
        shape = [int(s) for s in tensor.shape]
        x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
        values.append((x % 2 == 0) if tensor.dtype == np.bool_ else x.astype(tensor.dtype))
        shapes.append(shape)
    return [("allocate", shapes), ("invoke", values)]


# name -> (model, steps, (index of the refused step, exception, text in its message) or None when
# this runtime runs the value (TOPK_V2, BROADCAST_TO on TFLite 2.23)).
def _cases() -> dict:
    cases = {}
    for name, (data, shapes, message) in EVAL_CRASHERS.items():
        # Refused at the allocation of these shapes; the declared ones then run.
        cases[name] = (data, [("allocate", shapes), *_declared(data)], (0, "ShapeError", message))
    good, bad = np.array([2, 3], i32), np.array([1, 10**8], i32)
    cases["REVERSE_SEQUENCE fed lengths past the sequence"] = (
        reverse_sequence_model(),
        [("allocate", [[2, 3], [2]]), ("invoke", [X_RS, good]), ("invoke", [X_RS, good]), ("invoke", [X_RS, bad])]
        + [("invoke", [X_RS, good])],
        (3, "InvalidInputError", "invoke(): input 1 ('n') of operator 0 (REVERSE_SEQUENCE) holds sequence lengths"),
    )
    full, empty = arange([2, 3, 4]), arange([2, 0, 4])
    cases["REVERSE_V2 fed axis after which the input is empty"] = (
        reverse_v2_model(),
        [("allocate", [[2, 3, 4], [1]]), ("invoke", [full, np.array([1], i32)]), ("invoke", [full, np.array([1], i32)])]
        + [("allocate", [[2, 0, 4], [1]]), ("invoke", [empty, np.array([0], i32)])]
        + [("invoke", [empty, np.array([2], i32)]), ("allocate", [[2, 3, 4], [1]])]
        + [("invoke", [full, np.array([0], i32)])],
        (4, "InvalidInputError", "is empty after the reversed axis 0, which TFLite's REVERSE_V2 cannot reverse"),
    )
    version = runtime_info().version
    cases["TOPK_V2 fed k of 0"] = (
        top_k_model(),
        [("allocate", [[2, 6], []]), ("invoke", [X_TOPK, np.array(2, i32)]), ("invoke", [X_TOPK, np.array(2, i32)])]
        + [("invoke", [X_TOPK, np.array(0, i32)]), ("invoke", [X_TOPK, np.array(2, i32)])],
        (3, "InvalidInputError", "TOPK_V2 corrupts memory for k = 0") if affected(version) else None,
    )
    shape = np.array([2, 2, 3], i32)
    cases["BROADCAST_TO fed shape empty before the broadcast dimension"] = (
        broadcast_to_model(),
        [("allocate", [[1, 3], [3]]), ("invoke", [X_BROADCAST, shape]), ("invoke", [X_BROADCAST, shape])]
        + [("invoke", [X_BROADCAST, np.array([0, 5, 3], i32)]), ("invoke", [X_BROADCAST, shape])],
        (3, "InvalidInputError", "BROADCAST_TO still copies rows into that empty output")
        if affected(version)
        else None,
    )
    # [20, 30]: the size at which the stale row-wise Eval is a SIGSEGV rather than wrong values.
    rng = np.random.default_rng(0)
    c, a, b = rng.random((20, 30)) > 0.5, rng.standard_normal((20, 30)).astype(f32), rng.standard_normal((20, 30))
    b = b.astype(f32)
    one, rows = [[20, 30]] * 3, [[20], [20, 30], [20, 30]]
    cases["SELECT resized back to one shape after a 1-D condition"] = (
        select_model(20, 30),
        [("allocate", one), ("invoke", [c, a, b]), ("allocate", rows), ("invoke", [c[:, 0], a, b])]
        + [("allocate", one), ("invoke", [c, a, b]), ("allocate", rows), ("invoke", [c[:, 1], a, b])],
        (4, "ShapeError", STALE),
    )
    return cases


CASES = _cases()


def _child(tmp_path_factory, way: str) -> dict:
    path = tmp_path_factory.mktemp("compat_rules") / "cases.pickle"
    with open(path, "wb") as f:
        pickle.dump({name: (data, steps) for name, (data, steps, _refused) in CASES.items()}, f)
    p = run_child(CHILD, path, way, timeout=300)
    assert p.returncode == 0, crashed(p)
    return json.loads(p.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict:
    return _child(tmp_path_factory, "in-process")


@pytest.fixture(scope="module")
def isolated(tmp_path_factory) -> dict:
    return _child(tmp_path_factory, "isolated")


def _check(case: str, got: dict) -> None:
    _data, steps, refused = CASES[case]
    ours = got["oo"]
    # opaque_ops.Interpreter refuses the step its tests name, with their message, and no other.
    for k, (step, outcome) in enumerate(zip(steps, ours)):
        if refused is not None and k == refused[0]:
            assert outcome.get("error") == refused[1] and refused[2] in outcome["message"], (k, outcome)
        elif step[0] == "invoke" and refused is not None and steps[refused[0]][0] == "allocate" and k == refused[0] + 1:
            # Nothing runs on a refused plan; SELECT's next invoke is not allocated.
            assert outcome.get("error") == "NotAllocatedError", (k, outcome)
        else:
            assert "ok" in outcome, (k, outcome)
    # compat's class: the same steps end the same way, outputs bit for bit and exceptions word for word.
    assert got["compat"] == ours


@pytest.mark.parametrize("case", list(CASES))
def test_compat_interpreter_in_process_refuses_as_opaque_ops_interpreter_does(case, in_process):
    got = in_process[case]
    _check(case, got)
    # Both took the C fast calls: the refusals hold on the path unmodified clients take.
    assert got["fast"] == [True, True]


@pytest.mark.parametrize("case", list(CASES))
def test_compat_interpreter_isolated_refuses_as_opaque_ops_interpreter_does(case, isolated):
    _check(case, isolated[case])


def test_isolated_interpreters_end_every_step_as_in_process_ones_do(in_process, isolated):
    """The refusals' classes and messages, and the outputs, do not depend on where the interpreter runs."""
    for case in CASES:
        assert isolated[case]["oo"] == in_process[case]["oo"], case
