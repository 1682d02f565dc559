"""Building ``add_delegate_plugin.c`` (a TFLite delegate plugin in C that claims float32 ADD) for a test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers.locations import ADD_DELEGATE_PLUGIN_C


def build_add_delegate_plugin(directory: Path) -> str:
    """Compile the plugin into ``directory`` and return the path of the shared library."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is required (the test suite compiles kernels throughout)"
    out = Path(directory) / "add_delegate.so"
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-o",
            str(out),
            str(ADD_DELEGATE_PLUGIN_C),
        ],
        check=True,
    )
    return str(out)
