"""compile_ops / load_ops: caching, error reporting, discovery, renaming."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

import opaque_ops as oo

from test_interpreter import MACRO_ATAN


def test_cache_hit_skips_the_compiler(tmp_path, atan_source, monkeypatch):
    cold_start = time.perf_counter()
    lib = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path)
    cold = time.perf_counter() - cold_start
    assert not lib.cache_hit
    # With no compiler reachable, a hit must still work.
    monkeypatch.setenv("PATH", "/nonexistent")
    lib2 = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path)
    assert lib2.cache_hit and lib2.path == lib.path
    assert cold > 0


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "envcache"))
    lib = oo.compile_ops(MACRO_ATAN + "\n/* env cache */\n")
    assert lib.path.parent == tmp_path / "envcache"


def test_changed_source_recompiles(tmp_path):
    a = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    b = oo.compile_ops(MACRO_ATAN + "\n/* edited */\n", cache_dir=tmp_path)
    assert a.path != b.path and not b.cache_hit


def test_compile_error_has_file_and_line(tmp_path):
    src = tmp_path / "broken_kernel.c"
    src.write_text('#include "opaque_ops.h"\n\nint f(void) {\n  return undefined_thing;\n}\n')
    with pytest.raises(oo.CompileError) as err:
        oo.compile_ops(src, cache_dir=tmp_path / "c")
    msg = str(err.value)
    assert "broken_kernel.c:4:" in msg and "undefined_thing" in msg
    assert "error" in msg


def test_unknown_factory_name_is_a_compile_error(tmp_path, atan_source):
    with pytest.raises(oo.CompileError, match="NoSuchFactory"):
        oo.compile_ops(atan_source, ops={"Atan": "NoSuchFactory"}, cache_dir=tmp_path)


def test_invalid_factory_name_rejected(atan_source):
    with pytest.raises(oo.CompileError, match="must name a C function"):
        oo.compile_ops(atan_source, ops={"Atan": "not a name; system()"})


def test_missing_source_path():
    with pytest.raises(oo.CompileError, match="does not exist"):
        oo.compile_ops("no_such_kernel.c")


def test_no_ops_declared_is_explained(tmp_path):
    lib = oo.compile_ops('#include "opaque_ops.h"\nint unused_symbol_here;\n', cache_dir=tmp_path)
    with pytest.raises(oo.OpLibraryError, match="declares no ops"):
        _ = lib.names


def test_same_kernel_under_two_names_and_versions(tmp_path, atan_model_bytes):
    src = MACRO_ATAN.replace('OPAQUE_OP("Atan", 1,', 'OPAQUE_OP("Atan", 1, .prepare = Prepare, .invoke = Invoke);\nOPAQUE_OP("Atan", 2,')
    lib = oo.compile_ops(src, cache_dir=tmp_path)
    assert lib.ops == [("Atan", 1), ("Atan", 2)]


def test_load_ops_reuses_a_compiled_library(tmp_path, atan_model_bytes):
    lib = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    copy = tmp_path / "elsewhere" / "atan_ops.so"
    copy.parent.mkdir()
    shutil.copy(lib.path, copy)
    loaded = oo.load_ops(copy)
    assert loaded.names == ["Atan"]
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[str(copy)])
    it.allocate_tensors()
    it.set_tensor(0, np.ones(5, np.float32))
    it.invoke()


def test_load_ops_rejects_foreign_files(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF" + os.urandom(200))
    with pytest.raises(oo.OpLibraryError):
        oo.load_ops(junk)
    with pytest.raises(oo.OpLibraryError, match="does not exist"):
        oo.load_ops(tmp_path / "missing.so")
    import ctypes.util

    libm = ctypes.util.find_library("m")
    if libm:
        import subprocess

        path = subprocess.run(["gcc", "-print-file-name=libm.so.6"], capture_output=True, text=True).stdout.strip()
        if os.path.isfile(path):
            with pytest.raises(oo.OpLibraryError, match="not an opaque_ops kernel library"):
                oo.load_ops(path)


def test_duplicate_op_from_two_libraries_is_rejected(tmp_path, atan_model_bytes, guide_atan):
    other = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    with pytest.raises(oo.OpaqueOpsError, match="provided by both"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan, other])
