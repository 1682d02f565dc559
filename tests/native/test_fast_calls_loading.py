"""opaque_ops._native.fast_calls: the fast calls module is imported only when its file is whole and its ABI matches."""

from __future__ import annotations

import pytest

from opaque_ops._native import fast_calls as native_fast
from opaque_ops._native.ffi import DamagedLibraryError
from opaque_ops.interpreter import fast_calls


@pytest.fixture(scope="module")
def module_file() -> str:
    used, where = fast_calls.status()
    if not used:
        pytest.skip(f"the fast calls are not in use here: {where}")
    return where


def test_a_truncated_file_is_refused_before_the_import(tmp_path, module_file):
    # dlopen of a .so cut short maps pages with no file behind them: SIGBUS on first touch.
    cut = tmp_path / "cut.so"
    with open(module_file, "rb") as f:
        cut.write_bytes(f.read()[:6000])
    with pytest.raises(DamagedLibraryError, match="truncated or damaged"):
        native_fast.load_extension(cut)


def test_a_library_that_is_not_the_module_is_an_import_error(tmp_path, guide_atan):
    # A kernel library is a whole ELF file, but has no PyInit__fastcalls.
    with pytest.raises(ImportError):
        native_fast.load_extension(guide_atan.path)


def test_entry_points_only_for_a_plain_live_interpreter(module_file):
    import opaque_ops as oo
    from tests.helpers.interpreter_models import add_model

    it = oo.Interpreter(model_content=add_model())
    interp, functions = native_fast.entry_points(it._native)
    assert interp and len(functions) == len(native_fast._FUNCTIONS) == 6 and all(functions)
    it._native.close()
    assert native_fast.entry_points(it._native) is None


def test_the_file_names_the_python_it_is_built_for(module_file):
    assert native_fast.built_for(module_file) == native_fast.RUNNING


def test_a_module_built_for_another_python_is_refused_before_the_import(tmp_path, module_file):
    # Importing it would run its init against another ABI.  (A real module of
    # another CPython is refused the same way: tests/build/test_aarch64.py,
    # test_x86_64_wheel_serves_another_python_without_a_compiler.)
    data = open(module_file, "rb").read()
    mark = native_fast.MARKER + native_fast.RUNNING.encode() + b";"
    assert data.count(mark) == 1
    other = tmp_path / "other.so"
    other.write_bytes(data.replace(mark, native_fast.MARKER + b"3.99;"))
    with pytest.raises(ImportError, match=r"built for CPython 3\.99, and this is CPython 3\.\d+t?; it is not imported"):
        native_fast.load_extension(other)
    unmarked = tmp_path / "unmarked.so"
    unmarked.write_bytes(data.replace(mark, b"x" * len(mark)))
    with pytest.raises(ImportError, match="not a fast calls module of this version"):
        native_fast.load_extension(unmarked)


@pytest.mark.parametrize("where", [0, (1 << 20) - 20, (1 << 20) - 3, 1 << 20, (3 << 20) + 7])
def test_the_python_is_found_anywhere_in_a_large_file_read_in_blocks(tmp_path, where):
    mark = native_fast.MARKER + b"3.12;"
    data = bytearray(b"\0" * (4 << 20))
    data[where : where + len(mark)] = mark
    f = tmp_path / "big.so"
    f.write_bytes(bytes(data))
    assert native_fast.built_for(f) == "3.12"
    f.write_bytes(bytes(data[: where + len(mark) - 1]))  # cut inside the terminator: not a whole marker
    assert native_fast.built_for(f) is None
