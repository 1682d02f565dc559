"""compile_ops / load_ops: the build path, the cache, error reporting, discovery, renaming."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN, make_model, reference, run_atan
from tests.helpers.child_process import run_child
from tests.helpers.fork_locks import assert_child_returns
from tests.helpers.locations import ROOT


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.suffix == ".so")


# ---------------------------------------------------------------- the cache --


def test_cache_hit_skips_the_compiler(tmp_path, atan_source, atan_model_bytes, monkeypatch):
    lib = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path)
    assert not lib.cache_hit and entries(tmp_path) == [lib.path]
    # With no compiler reachable, a hit must still work; a miss cannot be served.
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    lib2 = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path)
    assert lib2.cache_hit and lib2.path == lib.path
    np.testing.assert_array_equal(run_atan(atan_model_bytes, lib2), reference(ATAN_INPUT))
    with pytest.raises(oo.CompileError, match="was not found on PATH.*opaque-ops build"):
        oo.compile_ops(MACRO_ATAN + "/* never built */", cache_dir=tmp_path)


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "envcache"))
    lib = oo.compile_ops(MACRO_ATAN + "\n/* env cache */\n")
    assert lib.path.parent == tmp_path / "envcache"


def test_changed_source_recompiles(tmp_path):
    a = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    b = oo.compile_ops(MACRO_ATAN + "\n/* edited */\n", cache_dir=tmp_path)
    assert a.path != b.path and not b.cache_hit
    assert oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path).path == a.path


def test_changed_header_recompiles(tmp_path, atan_model_bytes):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "offset.h").write_text("#define EXTRA 0.0\n")
    src = src_dir / "k.c"
    src.write_text(
        MACRO_ATAN.replace('#include "opaque_ops.h"', '#include "opaque_ops.h"\n#include "offset.h"').replace(
            "(float)atan((double)x[i])", "(float)atan((double)x[i]) + (float)EXTRA"
        )
    )
    a = oo.compile_ops(src, cache_dir=tmp_path / "c")
    (src_dir / "offset.h").write_text("#define EXTRA 1.0\n")
    b = oo.compile_ops(src, cache_dir=tmp_path / "c")
    assert not b.cache_hit and a.path != b.path
    np.testing.assert_array_equal(run_atan(atan_model_bytes, b), reference(ATAN_INPUT) + np.float32(1))


FAKE_CC = """#!/bin/sh
# A compiler wrapper whose version line we control.
case "$1" in --version) echo "fakecc {version}"; exit 0;; esac
exec gcc "$@"
"""


def test_compiler_version_is_part_of_the_key(tmp_path, monkeypatch, atan_model_bytes):
    cc = tmp_path / "bin" / "fakecc"
    cc.parent.mkdir()
    cc.write_text(FAKE_CC.format(version="1.0"))
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    src = MACRO_ATAN + "/* compiler key */"
    a = oo.compile_ops(src, cache_dir=tmp_path / "c")
    assert not a.cache_hit
    assert oo.compile_ops(src, cache_dir=tmp_path / "c").cache_hit
    # The same path now reports another version: the old entry must not serve it.
    cc.write_text(FAKE_CC.format(version="2.0") + "\n")
    b = oo.compile_ops(src, cache_dir=tmp_path / "c")
    assert not b.cache_hit and b.path != a.path
    np.testing.assert_array_equal(run_atan(atan_model_bytes, b), reference(ATAN_INPUT))


_DAMAGED = """
import sys
import numpy as np
import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN, make_model, reference
lib = oo.compile_ops(MACRO_ATAN + "/* damaged */", cache_dir=sys.argv[1])
it = oo.Interpreter(model_content=make_model.build(), custom_ops=[lib])
it.allocate_tensors()
it.set_tensor(0, ATAN_INPUT)
it.invoke()
ok = bool(np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), reference(ATAN_INPUT)))
print("RESULT", lib.cache_hit, ok, lib.path)
"""


@pytest.mark.parametrize("damage", ["truncate", "corrupt_code", "empty"])
def test_damaged_cache_entry_is_rebuilt_not_loaded(tmp_path, damage):
    cache = tmp_path / "cache"
    r = run_child(_DAMAGED, cache, timeout=300, cwd=ROOT / "examples" / "atan")
    assert r.returncode == 0 and "RESULT False True" in r.stdout, r.stdout + r.stderr
    [entry] = entries(cache)
    data = bytearray(entry.read_bytes())
    if damage == "truncate":  # mapping past the end of a file is SIGBUS
        data = data[: len(data) // 2]
    elif damage == "corrupt_code":  # every byte of .text after the ELF headers set to int3 / brk
        data[0x1000 : len(data) - 0x1000] = b"\xcc" * (len(data) - 0x2000)
    else:
        data = bytearray()
    entry.write_bytes(bytes(data))
    # In a child: on a cache that loads what it finds this dies with SIGBUS/SIGTRAP.
    r = run_child(_DAMAGED, cache, timeout=300, cwd=ROOT / "examples" / "atan")
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}{r.stderr}"
    assert "RESULT False True" in r.stdout, r.stdout + r.stderr
    assert not entry.exists() or entry.read_bytes() != bytes(data)


def test_planted_entry_under_a_valid_name_is_not_loaded(tmp_path, atan_model_bytes):
    lib = oo.compile_ops(MACRO_ATAN + "/* planted */", cache_dir=tmp_path)
    other = oo.compile_ops('#include "opaque_ops.h"\nint planted_library;\n', cache_dir=tmp_path / "o")
    # Someone swaps the file but keeps the name (and our ownership and mode).
    shutil.copyfile(other.path, tmp_path / "planted")
    os.replace(tmp_path / "planted", lib.path)
    again = oo.compile_ops(MACRO_ATAN + "/* planted */", cache_dir=tmp_path)
    assert not again.cache_hit
    np.testing.assert_array_equal(run_atan(atan_model_bytes, again), reference(ATAN_INPUT))


def test_cache_dir_that_is_a_file_is_a_cache_error(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.raises(oo.CacheError, match="is a file, not a directory.*cache_dir"):
        oo.compile_ops(MACRO_ATAN, cache_dir=blocker)
    with pytest.raises(oo.CacheError, match="a file is in the way"):
        oo.compile_ops(MACRO_ATAN, cache_dir=blocker / "sub")
    assert issubclass(oo.CacheError, oo.OpaqueOpsError)


_UNWRITABLE = """
import sys
import opaque_ops as oo
try:
    oo.compile_ops('#include "opaque_ops.h"\\n', cache_dir=sys.argv[1])
except oo.CacheError as exc:
    print("CacheError:", exc)
"""


def test_unwritable_cache_dir_is_a_cache_error(tmp_path):
    cache = tmp_path / "readonly"
    cache.mkdir()
    cache.chmod(0o500)
    cmd = []
    if os.geteuid() == 0:
        # root writes anywhere: run the check without the capability that allows it.
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    r = run_child(_UNWRITABLE, cache, python=[*cmd, sys.executable], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "CacheError: cannot write cache directory" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------- the cache as a trust boundary --


def test_cache_dir_and_entries_are_private(tmp_path, monkeypatch):
    monkeypatch.delenv("OPAQUE_OPS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0o022)
    try:
        lib = oo.compile_ops(MACRO_ATAN + "/* private */")
    finally:
        os.umask(old)
    assert lib.path.parent == tmp_path / "xdg" / "opaque_ops"
    for d in (tmp_path / "xdg", tmp_path / "xdg" / "opaque_ops"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert stat.S_IMODE(lib.path.stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777], ids=oct)
def test_cache_dir_writable_by_others_is_refused(tmp_path, mode):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(oo.CacheError, match=rf"mode {mode:04o} lets other users write it.*chmod 700"):
        oo.compile_ops(MACRO_ATAN, cache_dir=cache)
    assert not list(cache.iterdir())


def test_cache_dir_under_a_parent_others_can_write_is_refused(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # no sticky bit: anyone may rename our directory away
    with pytest.raises(oo.CacheError, match="parent .*open .*without the sticky bit"):
        oo.compile_ops(MACRO_ATAN, cache_dir=parent / "cache")
    parent.chmod(0o1777)  # like /tmp: allowed
    assert oo.compile_ops(MACRO_ATAN, cache_dir=parent / "cache").path.parent == parent / "cache"


def test_cache_dir_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() == 0:
        cache = tmp_path / "theirs"
        cache.mkdir(mode=0o755)
        os.chown(cache, 65534, 65534)
        owner = "uid 65534"
    else:
        cache, owner = Path("/usr"), "uid 0"  # root's, and not writable by others
    with pytest.raises(oo.CacheError, match=rf"refusing cache directory .*owned by .*{owner}.*not by you"):
        oo.compile_ops(MACRO_ATAN, cache_dir=cache)


def test_cache_entry_writable_by_others_or_foreign_is_refused(tmp_path):
    lib = oo.compile_ops(MACRO_ATAN + "/* entry mode */", cache_dir=tmp_path)
    lib.path.chmod(0o766)
    with pytest.raises(oo.CacheError, match="refusing cache entry .*writable by other users.*rm "):
        oo.compile_ops(MACRO_ATAN + "/* entry mode */", cache_dir=tmp_path)
    lib.path.chmod(0o700)
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(lib.path, 65534, 65534)
        with pytest.raises(oo.CacheError, match="refusing cache entry .*owned by .*uid 65534"):
            oo.compile_ops(MACRO_ATAN + "/* entry mode */", cache_dir=tmp_path)
    lib.path.unlink()
    os.symlink(tmp_path / "elsewhere.so", lib.path)
    with pytest.raises(oo.CacheError, match="not a regular file"):
        oo.compile_ops(MACRO_ATAN + "/* entry mode */", cache_dir=tmp_path)


# ------------------------------------------------------- one build, many threads --

_THREADS = r"""
import os, sys, threading, time
import opaque_ops as oo
from tests.helpers.atan import MACRO_ATAN

cache = sys.argv[1]
start_cwd = os.getcwd()
sources = [MACRO_ATAN.replace('"Atan"', f'"Atan{i}"') for i in range(4)]
errors, libs, cwd_changes = [], {}, []
done = threading.Event()

def compile_one(i, src):
    try:
        libs[i] = oo.compile_ops(src, cache_dir=cache).names
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")

def watch():
    # What the rest of the program sees while the compilers run.
    n = 0
    while not done.is_set():
        if os.getcwd() != start_cwd:
            cwd_changes.append(os.getcwd())
        os.write(1, f"out-{n}\n".encode()); os.write(2, f"err-{n}\n".encode())
        n += 1
        time.sleep(0.002)
    print("watched", n, flush=True)

for round_ in range(2):  # 4 different sources, then 4 copies of one (a race on one entry)
    srcs = sources if round_ == 0 else [sources[0] + "/* same */"] * 4
    w = threading.Thread(target=watch)
    w.start()
    threads = [threading.Thread(target=compile_one, args=(i, s)) for i, s in enumerate(srcs)]
    for t in threads: t.start()
    for t in threads: t.join()
    done.set(); w.join(); done.clear()
    print("round", round_, sorted(libs.items()), flush=True)
print("ERRORS", errors, flush=True)
print("CWD", cwd_changes[:3], flush=True)
sys.stdout.write("STDOUT-END\n"); sys.stderr.write("STDERR-END\n")
"""


def test_four_threads_compile_at_once_and_the_process_keeps_its_fds_and_cwd(tmp_path):
    r = run_child(_THREADS, tmp_path / "cache", timeout=300, cwd=ROOT / "tests")
    assert r.returncode == 0, r.stderr[-3000:]
    out, err = r.stdout, r.stderr
    assert "ERRORS []" in out, out
    assert "CWD []" in out, out
    assert "round 0 [(0, ['Atan0']), (1, ['Atan1']), (2, ['Atan2']), (3, ['Atan3'])]" in out, out
    assert "round 1 [(0, ['Atan0']), (1, ['Atan0']), (2, ['Atan0']), (3, ['Atan0'])]" in out, out
    # Every line the program wrote while compiling reached its own stdout/stderr.
    written = int(out.split("watched ")[1].split()[0])
    assert written > 0
    for i in range(written):
        assert f"out-{i}\n" in out and f"err-{i}\n" in err, i
    assert out.rstrip().endswith("STDOUT-END") and err.rstrip().endswith("STDERR-END")
    # The compilers' chatter went nowhere near them.
    assert "gcc" not in out + err and "running build_ext" not in out + err
    assert len(entries(tmp_path / "cache")) == 5


def test_compile_ops_and_build_py_share_one_build(tmp_path, atan_source):
    """Same flags, same glue, same checks: the two libraries are the same kind of file."""
    from opaque_ops._native import elf
    from opaque_ops.build import standalone as build

    cached = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path / "c")
    built = build.build_library([atan_source], tmp_path / "atan.so", ops={"Atan": "AtanOpRegistrationExternal"})
    for path in (cached.path, built):
        needed = elf.needed_libraries(path)
        assert needed and not any("python" in n for n in needed), needed
        assert not any(s.startswith("Py") for s in elf.undefined_symbols(path)), path  # not a Python extension
        data = path.read_bytes()
        # Python's own build flags (-g, an rpath to its lib directory) stay out.
        assert b"RUNPATH" not in data and b"RPATH" not in data and b".debug_info" not in data, path
    assert oo.load_ops(built).ops == cached.ops == [("Atan", 1)]


# --------------------------------------------------------------- sources --


def test_compile_error_has_file_and_line(tmp_path):
    src = tmp_path / "broken_kernel.c"
    src.write_text('#include "opaque_ops.h"\n\nint f(void) {\n  return undefined_thing;\n}\n')
    with pytest.raises(oo.CompileError) as err:
        oo.compile_ops(src, cache_dir=tmp_path / "c")
    msg = str(err.value)
    assert "broken_kernel.c:4:" in msg and "undefined_thing" in msg
    assert msg.startswith(f"compiling {src} failed:")
    assert "undefined_thing" in err.value.output


def test_compile_error_in_a_string_names_the_string(tmp_path):
    with pytest.raises(oo.CompileError, match=r"<string>:2:.*nope"):
        oo.compile_ops('#include "opaque_ops.h"\nint f(void) { return nope; }\n', cache_dir=tmp_path)


def test_unknown_factory_name_is_a_compile_error(tmp_path, atan_source):
    with pytest.raises(oo.CompileError, match="undefined symbol.*NoSuchFactory.*not be static"):
        oo.compile_ops(atan_source, ops={"Atan": "NoSuchFactory"}, cache_dir=tmp_path)


def test_misspelt_function_fails_at_compile_time_not_load_time(tmp_path):
    src = MACRO_ATAN.replace("#include <math.h>", "#include <math.h>\nint oo_no_such_helper(int);").replace(
        "return kTfLiteOk;\n}\n\nOPAQUE_OP", "return oo_no_such_helper(0) ? kTfLiteOk : kTfLiteError;\n}\n\nOPAQUE_OP"
    )
    with pytest.raises(oo.CompileError, match="undefined symbol.*oo_no_such_helper"):
        oo.compile_ops(src, cache_dir=tmp_path)


def test_invalid_factory_name_rejected(atan_source):
    with pytest.raises(oo.CompileError, match="must name a C function"):
        oo.compile_ops(atan_source, ops={"Atan": "not a name; system()"})


def test_missing_source_path():
    with pytest.raises(oo.CompileError, match="does not exist"):
        oo.compile_ops("no_such_kernel.c")


def test_a_binary_file_as_source_is_a_compile_error(tmp_path, atan_model_bytes):
    # A model passed where the C goes was a UnicodeDecodeError.
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    with pytest.raises(oo.CompileError, match=r"is not a text file .*Interpreter\(model_path=...\)"):
        oo.compile_ops(model)
    with pytest.raises(oo.CompileError, match="is not a text file"):
        oo.compile_ops(str(model), cache_dir=tmp_path / "c")
    zeros = tmp_path / "zeros.c"  # valid UTF-8, and no C source
    zeros.write_bytes(bytes(4096))
    with pytest.raises(oo.CompileError, match=r"not a text file \(it holds NUL bytes\)"):
        oo.compile_ops(zeros, cache_dir=tmp_path / "c")


def test_str_path_with_braces_is_a_path(tmp_path, atan_model_bytes):
    d = tmp_path / "ops{v2}"
    d.mkdir()
    src = d / "atan{1}.c"
    src.write_text(MACRO_ATAN)
    lib = oo.compile_ops(str(src), cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(run_atan(atan_model_bytes, lib), reference(ATAN_INPUT))
    with pytest.raises(oo.CompileError) as err:
        (d / "bad{}.c").write_text("int f(void) { return nope; }\n")
        oo.compile_ops(str(d / "bad{}.c"), cache_dir=tmp_path / "c")
    assert "bad{}.c:1:" in str(err.value)


def test_no_ops_declared_is_explained(tmp_path):
    lib = oo.compile_ops('#include "opaque_ops.h"\nint unused_symbol_here;\n', cache_dir=tmp_path)
    with pytest.raises(oo.OpLibraryError, match="declares no ops"):
        _ = lib.names


def test_same_kernel_under_two_versions(tmp_path):
    src = MACRO_ATAN.replace(
        'OPAQUE_OP("Atan", 1,', 'OPAQUE_OP("Atan", 1, .prepare = Prepare, .invoke = Invoke);\nOPAQUE_OP("Atan", 2,'
    )
    lib = oo.compile_ops(src, cache_dir=tmp_path)
    assert lib.ops == [("Atan", 1), ("Atan", 2)]
    for version in (1, 2):
        out = run_atan(make_model.build(atan_version=version), lib)
        np.testing.assert_array_equal(out, reference(ATAN_INPUT))


# ------------------------------------------------------------ load_ops --


def test_load_ops_reuses_a_compiled_library(tmp_path, atan_model_bytes):
    lib = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    copy = tmp_path / "elsewhere" / "atan_ops.so"
    copy.parent.mkdir()
    shutil.copy(lib.path, copy)
    loaded = oo.load_ops(copy)
    assert loaded.names == ["Atan"]
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[str(copy)])
    it.allocate_tensors()
    x = np.array([1.0, -2.5, 0.0, 3.0, 1e6], np.float32)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), reference(x))


def _loaded_libm() -> str:
    """The libm this process has mapped (Python always links it)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "/libm.so" in line or "/libm-" in line:
            return line.split()[-1]
    raise AssertionError("no libm in /proc/self/maps")


def test_load_ops_rejects_foreign_files(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(Path(_loaded_libm()).read_bytes()[:64] + os.urandom(200))  # a valid header, then noise
    with pytest.raises(oo.OpLibraryError, match="could not load"):
        oo.load_ops(junk)
    with pytest.raises(oo.OpLibraryError, match="does not exist"):
        oo.load_ops(tmp_path / "missing.so")
    with pytest.raises(oo.OpLibraryError, match="not an opaque_ops kernel library"):
        oo.load_ops(_loaded_libm())


_ASAN_LOAD = """
import sys
import opaque_ops as oo
try:
    oo.load_ops(sys.argv[1])
except oo.OpLibraryError as exc:
    print("OpLibraryError:", exc)
"""


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_sanitizer_build_without_its_runtime_is_refused_with_the_preload_line(tmp_path, cc):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed (apt-get install {cc})")
    from opaque_ops.build import standalone as build

    out = build.build_library([], tmp_path / f"atan_asan_{cc}.so", kernels=["atan"], sanitize=["address"], cc=cc)
    # In a child: loading it without the runtime ends the process with no Python error.
    r = run_child(_ASAN_LOAD, out, timeout=300, env={"LD_PRELOAD": ""})
    assert r.returncode == 0, f"status {r.returncode}: {r.stdout}{r.stderr}"
    assert "OpLibraryError:" in r.stdout and "AddressSanitizer" in r.stdout, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if "LD_PRELOAD=" in l).strip()
    preload = line.split()[0].split("=", 1)[1]
    assert os.path.isfile(preload), line
    # The line it prints works: with it, the library loads and declares its op.
    r = run_child(
        "import sys, opaque_ops as oo; print(oo.load_ops(sys.argv[1]).ops)",
        out,
        timeout=300,
        env={"LD_PRELOAD": preload, "ASAN_OPTIONS": "detect_leaks=0"},
    )
    assert r.returncode == 0 and "[('Atan', 1)]" in r.stdout, r.stdout + r.stderr


def test_undefined_sanitizer_alone_needs_no_preload(tmp_path):
    from opaque_ops.build import standalone as build

    out = build.build_library([], tmp_path / "ubsan.so", kernels=["atan"], sanitize=["undefined"], cc="gcc")
    assert oo.load_ops(out).ops == [("Atan", 1)]


def test_duplicate_op_from_two_libraries_is_rejected(tmp_path, atan_model_bytes, guide_atan):
    other = oo.compile_ops(MACRO_ATAN, cache_dir=tmp_path)
    with pytest.raises(oo.OpaqueOpsError, match="provided by both"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan, other])


def test_custom_ops_items_have_a_declared_type_and_anything_else_is_refused_alike(guide_atan):
    from opaque_ops.ops.library import OpBundle
    from opaque_ops.ops.provider import OpProvider

    op = oo.python_op("Atan", invoke=lambda i, o: None)
    for item in (guide_atan, op, OpBundle([guide_atan])):
        assert isinstance(item, OpProvider)

    class LooksLikeALibrary:  # the old duck-typed check took anything with these
        path = guide_atan.path

        def operators(self):
            return guide_atan.operators()

    want = (
        "custom_ops must hold op libraries (from compile_ops, load_ops, python_op or "
        "opaque_ops.kernels) or paths to prebuilt libraries, not LooksLikeALibrary"
    )
    model = oo.testing.build_op_model("Atan", [np.zeros(2, np.float32)], [([2], np.float32)])
    with pytest.raises(TypeError) as in_process:
        oo.Interpreter(model_content=model, custom_ops=[LooksLikeALibrary()])
    with pytest.raises(TypeError) as isolated:
        oo.Interpreter(model_content=model, custom_ops=[LooksLikeALibrary()], isolate=True)
    assert str(in_process.value) == str(isolated.value) == want


@pytest.mark.parametrize("name", ["a.c", "a.so", ".c", "..c", "a.", "dir.c/", "x.tar.gz", "noext", "a/b.c", "/"])
def test_suffix_is_purepaths(name):
    # op_library_from_spec and load_ops tell C source from a library by this.
    from pathlib import PurePath

    from opaque_ops.build import paths

    assert paths.suffix(name) == PurePath(name).suffix


def test_a_fork_while_another_thread_builds_a_librarys_operators_leaves_the_child_able_to_use_it(guide_atan):
    # A library made before the fork; the thread stops inside its
    # operators(), holding its lock: the child's copy stayed held, and its
    # first interpreter with the library waited forever.
    assert_child_returns(
        [("Atan", 1)],
        "import opaque_ops as oo\nlib = oo.load_ops(sys.argv[1])\n",
        code="type(lib).operators.__code__",
        lock="lib._lock",
        worker="lib.ops",
        child="lib.ops",
        args=[guide_atan.path],
    )
