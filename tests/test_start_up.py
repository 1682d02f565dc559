"""An app's start-up imports what running a model needs, and nothing for building, compiling or writing.

Each module left out here is one that a plain start-up (``import opaque_ops``,
a bundled kernel from the compile cache, ``Interpreter(...)``,
``allocate_tensors()``, ``invoke()``) used to import and never used, for a
few milliseconds in all (bench/README.md, "Ninth pass" to "Twelfth pass"):
the compiler's child processes, temporary files, the flatbuffers writer and
flexbuffers, the traceback formatter, OpenSSL's hashes, pathlib, threading,
socket, signal, dataclasses; and, at a
start whose verdicts are on disk, the model rules themselves.  They are
imported where they are used instead.
"""

from __future__ import annotations

import json
import site

import numpy as np

from tests.helpers.atan import make_model
from tests.helpers.child_process import crashed, run_python
from tests.helpers.locations import ROOT

# Never needed by a start-up whose kernels are in the compile cache.
NOT_AT_START_UP = [
    "subprocess",
    "shutil",
    "tempfile",
    "traceback",
    "base64",
    "bz2",
    "lzma",
    "flatbuffers",
    "opaque_ops.model.writer",
    # OpenSSL: opaque_ops' own digests are BLAKE2b (opaque_ops/_digest.py);
    # SHA-256 only for a runtime that is not the wheel's known build.
    "hashlib",
    "_hashlib",
    # pathlib, with the urllib.parse and ipaddress it imports: 2-3 ms; the
    # start-up path takes str paths (CONTRIBUTING.md, "The habits").
    "pathlib",
    "urllib.parse",
    "ipaddress",
    # threading (locks come from _thread), socket and signal (the Ctrl-C
    # watcher reads a pipe and calls _signal), dataclasses and copy (the
    # model reader's classes become dataclasses when first asked): 0.4-2 ms
    # each (bench/README.md, "Twelfth pass").  The child's invoke() is a
    # first one, which the watcher always watches.
    "threading",
    "socket",
    "signal",
    "dataclasses",
    "copy",
    # binascii loads zlib; the runtime loader decodes the wheel's RECORD
    # digest itself (runtime_loader.record_hex).
    "binascii",
    # The runtime loader's find_spec and the fast calls module's import take
    # importlib's functions from the frozen import system (0.45 ms).
    "importlib.util",
    # json (1.1 ms): the verdict records are marshal data, the prebuilt
    # manifest lines of words (opaque_ops.model.cache, opaque_ops.build.bundles).
    "json",
    "_json",
    # What only Python operators and delegate plugins use (loaded on first use).
    "opaque_ops._native.python_operator",
    "opaque_ops._native.native_delegate",
    "opaque_ops._native.lifetime",
]
# Never needed by a start that finds its model's verdicts on disk.
NOT_AT_A_LATER_START = [
    "opaque_ops.model.checks",
    "opaque_ops.model.checks.type_rules",
    "opaque_ops.model.shapes",
    "opaque_ops.model.metadata",
    "opaque_ops.model.flex",
]

_CHILD = """
import sys
before = sorted(sys.modules)
import numpy as np
import opaque_ops as oo
from opaque_ops import Interpreter

it = Interpreter(model_path=sys.argv[1], custom_ops=[oo.kernels.atan()])
it.allocate_tensors()
inp = it.get_input_details()[0]
x = np.linspace(-4, 4, int(np.prod(inp["shape"])), dtype=np.float32).reshape(inp["shape"])
it.set_tensor(inp["index"], x)
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
modules = sorted(sys.modules)
import json  # (after the list: what a start-up imports is the question)
print(json.dumps({"x": x.ravel().tolist(), "y": y.ravel().tolist(), "modules": modules, "before": before}))
"""


def _start(model, verdicts) -> dict:
    # -S: no site module, whose .pth hooks (an editable install's) import
    # pathlib before anything runs; the checkout and the site-packages are
    # put on the path instead.
    r = run_python(
        "-S",
        "-c",
        _CHILD,
        model,
        env={"OPAQUE_OPS_VERDICT_CACHE": verdicts},
        pythonpath=[ROOT, *site.getsitepackages()],
    )
    assert r.returncode == 0, crashed(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_start_up_imports_nothing_it_does_not_use(tmp_path, atan_model_bytes):
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    _start(model, tmp_path / "warm")  # builds the kernel if needed, keeps the compiler's identity
    # The first start runs the rules and writes the record; a later one finds
    # the record and runs (so imports) no rule.
    for start, unused in (("first", NOT_AT_START_UP), ("later", NOT_AT_START_UP + NOT_AT_A_LATER_START)):
        got = _start(model, tmp_path / "verdicts")
        # It ran, and right: the guide's model is atan(x + its trained offset).
        x = np.float32(got["x"])
        np.testing.assert_allclose(got["y"], np.arctan(x + np.float32(make_model.OFFSET)), rtol=1e-6, atol=1e-6)
        assert "opaque_ops.interpreter.core" in got["modules"]
        assert ("opaque_ops.model.checks" in got["modules"]) == (start == "first")
        assert [m for m in unused if m in got["before"]] == [], "the bare interpreter had them already"
        imported = [m for m in unused if m in got["modules"]]
        assert imported == [], f"the {start} start imported {imported}"
        assert list((tmp_path / "verdicts").glob("*.rec")), "the first start wrote no verdict record"
