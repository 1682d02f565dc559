"""A start reads no model in Python that it need not read, and so does not import the Python reader.

``model.reader`` keeps what every start runs (the model's classes, the lazy
parts of a model made from its record, ``read_model``'s entry, which tries the
compiled reader first); the flatbuffer walker (``model.parser``) and the tables
both readers decode with (``model.decoding``) are imported where a model is
read (bench/README.md, "Twentieth pass", for what unmarshaling a module costs
a start).  A start from the model's record reads nothing, and a first start
whose model the compiled reader reads walks nothing in Python.  A top-level
import of either brings that cost back, and these tests fail.

Not in tests/interpreter/test_core_imports.py's list: a plain first start
without the fast calls module (CI runs the interpreter tests without it too)
reads its model with the Python reader.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from opaque_ops.model import cache
from tests.conftest import IN_CI
from tests.helpers.child_process import crashed, run_child
from tests.helpers.mediapipe_models import model_file

PARSER, DECODING = "opaque_ops.model.parser", "opaque_ops.model.decoding"

# A plain start (create and allocate), the model modules loaded then; then a
# run (which reads the inputs' and outputs' details) and the modules after it.
_CHILD = """
import json, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.model import reader

it = oo.Interpreter(model_path=sys.argv[1], custom_ops=[oo.kernels.mediapipe()])
it.allocate_tensors()
started = sorted(m for m in sys.modules if m.startswith("opaque_ops.model."))
from_record = "_source" in it._info.__dict__
for d in it.get_input_details():
    x = np.linspace(-1, 1, int(np.prod(d["shape"])), dtype=np.float32).reshape(d["shape"])
    it.set_tensor(d["index"], x)
it.invoke()
outputs = [it.get_tensor(d["index"]).ravel()[:256].tolist() for d in it.get_output_details()]
print(json.dumps({
    "started": started,
    "after": sorted(m for m in sys.modules if m.startswith("opaque_ops.model.")),
    "from_record": from_record,
    "compiled": reader._compiled is not None,
    "outputs": outputs,
}))
"""

MODELS = {
    "face_detection_short_range": ("modules", "face_detection", "face_detection_short_range.tflite"),
    "selfie_segmentation": ("modules", "selfie_segmentation", "selfie_segmentation.tflite"),
}


def _start(path, verdicts) -> dict:
    r = run_child(_CHILD, path, env={cache.ENV_VERDICTS: str(verdicts)}, timeout=300)
    assert r.returncode == 0, crashed(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_start_from_the_record_imports_neither_the_parser_nor_its_tables(tmp_path, model):
    path = model_file(*MODELS[model])
    first = _start(path, tmp_path / "verdicts")  # writes the record
    later = _start(path, tmp_path / "verdicts")
    assert not first["from_record"] and later["from_record"]
    imported = [m for m in (PARSER, DECODING) if m in later["started"]]
    assert imported == [], f"a start from the record imported {imported}: import them where a model is read"
    # Reading the details then reads the model's parts from its bytes, with
    # the Python reader (which a model made from its record always uses) ...
    assert PARSER in later["after"]
    # ... and they are the parts a first start read: the same run, the same outputs.
    assert later["outputs"] == first["outputs"]
    assert all(np.isfinite(o).all() for o in later["outputs"])


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_first_start_whose_model_the_compiled_reader_reads_does_not_import_the_parser(tmp_path, model):
    got = _start(model_file(*MODELS[model]), tmp_path / "verdicts")
    if not got["compiled"]:
        if IN_CI:
            pytest.fail("the fast calls (and the compiled reader) must be in use under CI")
        pytest.skip("the compiled reader is not in use here")
    assert not got["from_record"]
    assert DECODING in got["started"]  # the compiled reader's spec: the model was read, in C
    assert PARSER not in got["started"], "a first start read its model in Python, or imported the parser anyway"
