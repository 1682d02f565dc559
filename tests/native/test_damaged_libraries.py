"""A truncated shared library is refused before ``dlopen`` on every path that loads one (issue 17, item 3).

``dlopen`` maps each loadable segment of the file; one that ends past the end
of a truncated file (an interrupted copy of a prebuilt ``.so``) maps pages with
nothing behind them, and the process dies with SIGBUS at the first touch.
Each test truncates a copy of a real library (a compiled kernel library, a
delegate plugin, the TFLite runtime) in a temporary directory and loads it in
a child process through ``load_ops``, ``custom_ops=[path]``, ``load_delegate``
and ``load_runtime``: the outcome must be the loader's own clean error naming
the file and saying it is truncated.  No binary is committed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import opaque_ops as oo
from opaque_ops._native import elf  # noqa
from tests.helpers.atan import MACRO_ATAN
from tests.helpers.child_process import crashed, run_child
from tests.helpers.locations import ADD_DELEGATE_PLUGIN_C
from tests.helpers.runtime_libraries import wheel_library

# Where to cut: inside the program header table, inside the first loadable
# segment, half-way (inside a later segment), and one byte short (only the
# section header table is cut).
CUTS = {
    "program_headers": lambda n: 100,
    "first_segment": lambda n: 4096,
    "half": lambda n: n // 2,
    "last_byte": lambda n: n - 1,
}

LOAD = r"""
import sys
import opaque_ops as oo
how, path = sys.argv[1], sys.argv[2]
try:
    if how == "load_ops":
        oo.load_ops(path)
    elif how == "custom_ops":
        from tests.helpers.atan import make_model
        oo.Interpreter(model_content=make_model.build(), custom_ops=[path])
    elif how == "load_delegate":
        oo.load_delegate(path)
    elif how == "load_runtime":
        oo.load_runtime(path)
except oo.OpaqueOpsError as exc:
    print("REFUSED", type(exc).__name__)
    print(exc)
else:
    print("LOADED")
"""


@pytest.fixture(scope="module")
def kernel_library(tmp_path_factory) -> Path:
    return oo.compile_ops(MACRO_ATAN + "/* truncated copies */", cache_dir=tmp_path_factory.mktemp("cache")).path


@pytest.fixture(scope="module")
def delegate_plugin(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is required (the test suite compiles kernels throughout)"
    out = tmp_path_factory.mktemp("delegate") / "add_delegate.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(ADD_DELEGATE_PLUGIN_C)], check=True)
    return out


def _truncated(src: Path, tmp_path: Path, cut: str) -> Path:
    data = src.read_bytes()
    out = tmp_path / f"truncated_{cut}_{src.name}"
    out.write_bytes(data[: CUTS[cut](len(data))])
    return out


def _load(how: str, path: Path, error: str) -> str:
    p = run_child(LOAD, how, path, timeout=120)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.startswith(f"REFUSED {error}\n"), crashed(p)
    message = p.stdout.split("\n", 1)[1]
    assert str(path) in message and "truncated or damaged" in message and "reinstall or rebuild" in message, message
    return message


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_kernel_library_through_load_ops(kernel_library, tmp_path, cut):
    _load("load_ops", _truncated(kernel_library, tmp_path, cut), "OpLibraryError")


@pytest.mark.parametrize("cut", ["first_segment", "half"])
def test_truncated_kernel_library_through_custom_ops(kernel_library, tmp_path, cut):
    _load("custom_ops", _truncated(kernel_library, tmp_path, cut), "OpLibraryError")


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_delegate_plugin_through_load_delegate(delegate_plugin, tmp_path, cut):
    _load("load_delegate", _truncated(delegate_plugin, tmp_path, cut), "DelegateError")


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_runtime_through_load_runtime(tmp_path, cut):
    _load("load_runtime", _truncated(wheel_library(), tmp_path, cut), "RuntimeNotFoundError")


def test_intact_libraries_have_no_damage(kernel_library, delegate_plugin):
    for lib in (kernel_library, delegate_plugin, wheel_library()):
        assert elf.damage(lib) is None, lib


def test_non_elf_and_missing_files_are_left_to_dlopen(tmp_path):
    text = tmp_path / "ops.c"
    text.write_text("int x;\n")
    assert elf.damage(text) is None
    assert elf.damage(tmp_path / "missing.so") is None
