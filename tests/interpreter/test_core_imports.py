"""A plain start imports none of the interpreter's rarely used modules.

The growing-arena guard and the explanation of a failed allocation
(``interpreter.arena_guard``), the unresolved-op message
(``interpreter.unresolved_ops``), the string codec (``interpreter.strings``)
and the BATCH_MATMUL rewrite (``interpreter.matmul``) run only after a resize,
a failure, a missing op, on a string tensor or for a model with a
BATCH_MATMUL.  ``core`` and ``tensors`` import them where they are
needed, so that an app's start does not unmarshal their code (bench/README.md,
"Twentieth pass").  A top-level import of any of them brings that cost back,
and this test fails.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tests.helpers.atan import make_model
from tests.helpers.child_process import crashed, run_python
from tests.helpers.mediapipe_models import model_file

LAZY = [
    "opaque_ops.interpreter.arena_guard",
    "opaque_ops.interpreter.unresolved_ops",
    "opaque_ops.interpreter.strings",
    "opaque_ops.interpreter.matmul",
]

# A plain start and run: create, allocate, set every input, invoke twice,
# read every output; then the modules loaded.
_CHILD = """
import json, sys
import numpy as np
import opaque_ops as oo

path, ops = sys.argv[1], sys.argv[2]
it = oo.Interpreter(model_path=path, custom_ops=[getattr(oo.kernels, ops)()])
it.allocate_tensors()
inputs = {}
for d in it.get_input_details():
    x = np.linspace(-4, 4, int(np.prod(d["shape"])), dtype=np.float32).reshape(d["shape"])
    it.set_tensor(d["index"], x)
    inputs[d["name"]] = x.ravel().tolist()
it.invoke()
it.invoke()
outputs = [it.get_tensor(d["index"]).ravel()[:64].tolist() for d in it.get_output_details()]
print(json.dumps({"modules": sorted(sys.modules), "inputs": inputs, "outputs": outputs}))
"""


def _run(path, ops: str) -> dict:
    r = run_python("-c", _CHILD, path, ops)
    assert r.returncode == 0, crashed(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_lazy_modules_exist():
    # (So that a renamed module cannot make the checks below pass by not existing.)
    assert [m for m in LAZY if importlib.util.find_spec(m) is None] == []


@pytest.mark.parametrize("model", ["atan", "face_detection_short_range"])
def test_a_plain_start_and_invoke_import_no_lazy_module(tmp_path, model):
    if model == "atan":
        path = tmp_path / "atan.tflite"
        path.write_bytes(make_model.build())
        got = _run(path, "atan")
        # It ran, and right: the guide's model is atan(x + its trained offset).
        (x,) = got["inputs"].values()
        want = np.arctan(np.float32(x) + np.float32(make_model.OFFSET))
        np.testing.assert_allclose(got["outputs"][0], want, rtol=1e-6, atol=1e-6)
    else:
        got = _run(model_file("modules", "face_detection", f"{model}.tflite"), "mediapipe")
        # Its two outputs (boxes and scores) were read and are finite.
        assert len(got["outputs"]) == 2 and all(np.isfinite(o).all() for o in got["outputs"])
    assert "opaque_ops.interpreter.core" in got["modules"]
    imported = [m for m in LAZY if m in got["modules"]]
    assert imported == [], f"a plain start imported {imported}: import them where they are used"
