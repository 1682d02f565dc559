"""The package's import graph: no circle, and no import from a lower layer to a higher one.

The layers (tools/import_layers.py): errors -> build -> model -> _native ->
ops -> interpreter -> isolate -> the public faces.  Function-level imports
count: they are dependencies too, only later.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "import_layers.py"


def _tool():
    spec = importlib.util.spec_from_file_location("import_layers", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_package_has_no_import_circle_and_no_upward_import():
    layers = _tool()
    found = layers.edges(ROOT / "opaque_ops")
    assert len(found) > 100  # the walker sees the package (a broken one would find nothing)
    assert layers.cycles(found) == []
    assert layers.upward(found) == []
    # The command line agrees, with its exit status.
    p = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 circles, 0 upward imports" in p.stdout


def test_a_circle_and_an_upward_import_added_to_a_copy_are_reported(tmp_path):
    layers = _tool()
    pkg = tmp_path / "opaque_ops"
    shutil.copytree(ROOT / "opaque_ops", pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    # _native reaching up into policy, inside a function (still an edge), and
    # a circle between two ops modules.
    native = pkg / "_native" / "kernel_library.py"
    native.write_text(native.read_text() + "\n\ndef _late():\n    from ..interpreter import xnnpack\n")
    provider = pkg / "ops" / "provider.py"
    provider.write_text(provider.read_text() + "\nfrom . import library as _library  # noqa\n")
    found = layers.edges(pkg)
    assert ["opaque_ops.ops.library", "opaque_ops.ops.provider"] in layers.cycles(found)
    ups = layers.upward(found)
    assert any(
        line.startswith(
            "opaque_ops._native.kernel_library (_native) imports opaque_ops.interpreter.xnnpack (interpreter)"
        )
        for line in ups
    ), ups
    p = subprocess.run([sys.executable, str(TOOL), "--root", str(pkg)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "circle of 2 modules: opaque_ops.ops.library, opaque_ops.ops.provider" in p.stdout
