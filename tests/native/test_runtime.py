"""Finding, checking and loading the TFLite C library (opaque_ops._native.runtime_loader, opaque_ops.runtime).

Most tests run a child Python: a process holds one runtime for its life, and
the lookup is what is under test.  The children drop $OPAQUE_OPS_TFLITE_LIB
(set by CI's second pass) unless the test names a runtime itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import opaque_ops as oo
from opaque_ops._native import builds, elf
from opaque_ops._native import runtime_loader as native_runtime
from opaque_ops.build import compiler as _cbuild
from tests.helpers.child_process import run_child
from tests.helpers.fork_locks import assert_child_returns
from tests.helpers.locations import ROOT
from tests.helpers.runtime_libraries import (
    PYMICRO_MEMBER,
    child_env,
    downloaded_wheel,
    foreign_library,
    record_digest,
    wheel_library,
)

HOST = _cbuild.host_arch()
CC = shutil.which("cc") or shutil.which("gcc")


def _py(code: str, env=None, **overrides):
    return run_child(code, base_env=child_env(**overrides) if env is None else env)


# Prints the outcome as one JSON line: the error (type and message) or the
# runtime's info, and which TFLite files the process has mapped afterwards.
LOAD = """
    import json, warnings, opaque_ops as oo
    warnings.simplefilter("always")
    out = {}
    try:
        info = oo.load_runtime(LIBRARY)
        out["info"] = {k: getattr(info, k) for k in ("path", "version", "found_by", "known_build", "custom_ops")}
    except oo.RuntimeNotFoundError as e:
        out["error"] = str(e)
    with open("/proc/self/maps") as f:
        maps = f.read()
    out["mapped"] = sorted({l.split()[-1] for l in maps.splitlines() if "tensorflowlite" in l or "litert" in l})
    print(json.dumps(out))
"""


def _load(library=None, **env) -> tuple[dict, str]:
    r = _py(LOAD.replace("LIBRARY", repr(None if library is None else str(library))), **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


# ------------------------------------------------------------- what is loaded


def test_runtime_info_reports_the_file_its_digest_and_a_known_build():
    info = oo.runtime_info()
    assert info.version.startswith("2.")
    assert os.path.isfile(info.path)
    assert info.api in ("TfLiteOperator", "TfLiteRegistrationExternal")
    # Checked independently of the library's own hashing.
    assert info.sha256 == hashlib.sha256(Path(info.path).read_bytes()).hexdigest()
    # Both runtimes CI runs the suite against are known builds.
    assert info.known_build and info.build, info
    assert info.custom_ops and info.custom_ops_problem is None


def test_the_runtime_named_in_the_environment_is_the_one_in_use():
    # CI's second pass names litert-lm's 2.23 library; without it, the wheel's.
    info = oo.runtime_info()
    named = os.environ.get("OPAQUE_OPS_TFLITE_LIB")
    if named:
        assert info.found_by == "$OPAQUE_OPS_TFLITE_LIB"
        assert os.path.realpath(info.path) == os.path.realpath(named)
    else:
        assert info.found_by == "pymicro-wakeword wheel"
        assert os.path.realpath(info.path) == os.path.realpath(wheel_library())


def test_every_symbol_the_loader_checks_is_declared_and_exported():
    # cffi finds only declared functions, so an undeclared name would read as
    # "missing" on every runtime; both CI runtimes export all of them.
    rt = native_runtime.load_runtime()
    missing = [n for n in native_runtime.REQUIRED + native_runtime.KERNEL_API if not rt.has(n)]
    assert missing == []


# ------------------------------------------------- a named runtime: loaded or refused


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_named_file_that_does_not_exist_is_refused_not_replaced(tmp_path, how):
    missing = tmp_path / "nonexistent" / "libtensorflowlite_c.so"
    if how == "argument":
        out, _ = _load(missing)
        assert "library= argument" in out["error"]
    else:
        out, _ = _load(OPAQUE_OPS_TFLITE_LIB=missing)
        assert "$OPAQUE_OPS_TFLITE_LIB" in out["error"]
    assert str(missing) in out["error"] and "does not exist" in out["error"]
    assert "info" not in out and out["mapped"] == []  # nothing else was loaded instead


def test_a_named_file_that_is_not_a_library_is_refused(tmp_path):
    bad = tmp_path / "libtensorflowlite_c.so"
    bad.write_bytes(b"not a library")
    out, _ = _load(OPAQUE_OPS_TFLITE_LIB=bad)
    assert str(bad) in out["error"] and "dlopen failed" in out["error"], out
    assert out["mapped"] == []


def _other_arch_64() -> str:
    return "aarch64" if HOST != "aarch64" else "x86_64"


@pytest.mark.parametrize("arch", ["other 64-bit", "armv7l"])
def test_a_named_runtime_of_another_architecture_is_refused(arch):
    arch = _other_arch_64() if arch == "other 64-bit" else arch
    if arch == HOST:
        pytest.skip(f"this machine is {HOST}")
    lib = foreign_library(arch)
    out, _ = _load(lib)
    assert str(lib) in out["error"], out
    assert f"is built for {arch}, but this machine is {HOST}" in out["error"], out
    assert out["mapped"] == []


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_a_named_library_without_the_tflite_c_api_is_refused_with_the_missing_symbols(tmp_path):
    # A real shared library that exports TfLiteVersion and nothing else of the API.
    src = tmp_path / "half.c"
    src.write_text('const char* TfLiteVersion(void) { return "9.9.9"; }\n')
    lib = tmp_path / "libhalf.so"
    subprocess.run([CC, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    out, _ = _load(lib)
    err = out["error"]
    assert str(lib) in err and "not a TFLite C library" in err, err
    assert "TfLiteModelCreateWithErrorReporter" in err and "TfLiteVersion," not in err, err


def _glibc_from_the_future(src: Path, dst: Path) -> None:
    """A copy of ``src`` that asks for GLIBC_2.99 where it asked for GLIBC_2.34.

    Same length, so only the string in .dynstr changes: the dynamic loader
    then fails exactly as on a system whose glibc is older than the file.
    """
    data = src.read_bytes()
    assert b"GLIBC_2.34\0" in data
    dst.write_bytes(data.replace(b"GLIBC_2.34\0", b"GLIBC_2.99\0"))


def test_a_named_runtime_needing_a_newer_glibc_is_refused_with_both_versions(tmp_path):
    lib = tmp_path / "libtensorflowlite_c.so"
    _glibc_from_the_future(wheel_library(), lib)
    have = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    out, _ = _load(OPAQUE_OPS_TFLITE_LIB=lib)
    err = out["error"]
    assert "needs glibc 2.99 or newer" in err and f"this system has glibc {have}" in err, err
    assert "bookworm" in err and out["mapped"] == []


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_a_kernel_library_needing_a_newer_glibc_is_refused(tmp_path, guide_atan):
    lib = tmp_path / "atan_future.so"
    _glibc_from_the_future(Path(guide_atan.path), lib)
    with pytest.raises(oo.OpLibraryError, match=r"needs glibc 2\.99 or newer.*this system has glibc"):
        oo.load_ops(lib)


def test_a_named_copy_of_a_known_build_loads_silently_from_anywhere(tmp_path):
    copy = tmp_path / "elsewhere" / "libtflite-any-name.so"
    copy.parent.mkdir()
    shutil.copy(wheel_library(), copy)
    out, err = _load(copy)
    assert out["info"]["path"] == str(copy) and out["info"]["found_by"] == "library= argument"
    assert out["info"]["known_build"] is True
    assert "UnknownRuntimeWarning" not in err, err


# ----------------------------------------------------------- the automatic lookup


def test_the_automatic_lookup_stops_at_the_wheel_and_never_runs_find_library():
    r = _py(
        """
        import ctypes.util, hashlib, json, warnings
        def forbidden(*args):
            raise AssertionError("called with %r" % (args,))
        ctypes.util.find_library = forbidden
        sha256, hashlib.sha256 = hashlib.sha256, forbidden  # the wheel's RECORD vouches for the file
        warnings.simplefilter("error")  # and no warning: the wheel's file is a known build
        from opaque_ops import _native
        rt = _native.load_runtime()
        hashlib.sha256 = sha256
        import opaque_ops as oo
        info = oo.runtime_info()  # this one hashes the file
        print(json.dumps([info.found_by, info.known_build]))
        """
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["pymicro-wakeword wheel", True]


def _shadow_wheel(tmp_path: Path, data: bytes) -> Path:
    """A pymicro_wakeword package on PYTHONPATH whose library is ``data``."""
    pkg = tmp_path / "shadow" / "pymicro_wakeword"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    lib = pkg / "lib" / "libtensorflowlite_c.so"
    lib.write_bytes(data)
    return lib


def test_an_unknown_build_found_automatically_warns_once_in_one_line(tmp_path):
    # The real library with bytes appended: it loads the same, but it is not
    # the file opaque_ops was tested with.
    lib = _shadow_wheel(tmp_path, wheel_library().read_bytes() + b"\0patched")
    out, err = _load(PYTHONPATH=lib.parents[2])
    assert out["info"]["path"] == str(lib) and out["info"]["known_build"] is False
    lines = [ln for ln in err.splitlines() if "UnknownRuntimeWarning" in ln]
    assert len(lines) == 1, err
    assert str(lib) in lines[0] and "TFLite 2.17.1" in lines[0] and "OPAQUE_OPS_TFLITE_LIB" in lines[0]


def test_an_unknown_build_named_explicitly_is_trusted_without_a_warning(tmp_path):
    lib = _shadow_wheel(tmp_path, wheel_library().read_bytes() + b"\0patched")
    out, err = _load(OPAQUE_OPS_TFLITE_LIB=lib)
    assert out["info"]["found_by"] == "$OPAQUE_OPS_TFLITE_LIB" and out["info"]["known_build"] is False
    assert "UnknownRuntimeWarning" not in err, err


def test_an_unusable_wheel_file_falls_through_to_the_system_and_every_place_is_listed(tmp_path):
    # Automatic candidates, unlike a named one, may be skipped: each with its reason.
    lib = _shadow_wheel(tmp_path, b"not a library")
    out, _ = _load(PYTHONPATH=lib.parents[2], LD_LIBRARY_PATH="")
    err = out["error"]
    assert "no usable libtensorflowlite_c" in err
    assert f"pymicro-wakeword wheel: {lib}: dlopen failed" in err
    assert 'find_library("tensorflowlite_c"): not found' in err
    assert "pip install pymicro-wakeword" in err


def test_import_is_cheap():
    r = _py(
        """
        import sys
        import opaque_ops
        print("numpy" in sys.modules, "cffi" in sys.modules, "ctypes.util" in sys.modules)
        """
    )
    assert r.stdout.split() == ["False", "False", "False"], r.stdout + r.stderr


# --------------------------------------------------------- the known-build table


@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "armv7l"])
def test_known_pymicro_builds_match_the_wheels_own_record(arch):
    # pip checks RECORD's digests on install: the table must say the same.
    entry = next(b for b in builds.KNOWN_BUILDS if b.arch == arch and "pymicro-wakeword" in b.source)
    digest, size = record_digest(downloaded_wheel(arch), PYMICRO_MEMBER)
    assert (entry.sha256, entry.size) == (digest, size)
    lib = foreign_library(arch)
    assert elf.read(lib).arch == arch
    assert entry.custom_ops == all(n in elf.defined_symbols(lib) for n in native_runtime.KERNEL_API)


def test_known_litert_lm_build_matches_its_record():
    # A test dependency (the runtime of CI's second pass); its RECORD is the witness.
    from importlib import metadata

    dist = metadata.distribution("litert-lm-api")
    rec = next(f for f in dist.files if str(f).endswith("liblitert-lm.so"))
    path = Path(dist.locate_file(rec))
    entry = builds.BY_DIGEST.get(hashlib.sha256(path.read_bytes()).hexdigest())
    assert entry is not None and entry.version == "2.23.0" and "litert-lm-api" in entry.source
    assert rec.hash.mode == "sha256" and rec.size == entry.size
    raw = base64.urlsafe_b64decode(rec.hash.value + "=" * (-len(rec.hash.value) % 4))
    assert raw.hex() == entry.sha256


def test_the_runtime_wheel_pin_covers_only_tested_versions():
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    req = next(Requirement(d) for d in project["dependencies"] if d.startswith("pymicro-wakeword"))
    # The table lists the versions whose file was checked: 2.0.0-2.5.0.
    assert all(v in req.specifier for v in ("2.0.0", "2.4.1", "2.5.0"))
    assert not any(v in req.specifier for v in ("1.0.0", "2.5.1", "2.6.0", "3.0.0")), str(req.specifier)


# --------------------------------------------------- architectures and builtin-only builds


def test_host_arch_names_a_32_bit_arm_process_as_its_elf_files(monkeypatch):
    # 32-bit Raspberry Pi OS: uname says armv7l on a Pi 2/3, and aarch64 (or
    # armv8l) on a Pi 4/5 whose kernel is 64-bit; the process is armhf in all.
    lib = foreign_library("armv7l")
    for machine in ("armv7l", "armv8l", "aarch64"):
        monkeypatch.setattr(platform, "machine", lambda m=machine: m)
        monkeypatch.setattr(sys, "maxsize", 2**31 - 1)
        assert _cbuild.host_arch() == elf.read(lib).arch == "armv7l", machine


def test_a_kernel_library_of_another_architecture_is_refused_naming_both(tmp_path):
    other = _other_arch_64()
    # The real runtime of that architecture stands in for a kernel library:
    # the architecture check comes before anything else is looked at.
    with pytest.raises(oo.OpLibraryError, match=rf"built for {other}, but this machine is {HOST}.*opaque-ops build"):
        oo.load_ops(foreign_library(other))


def test_the_armv7l_build_is_builtin_only_by_its_symbol_table():
    # What Runtime() finds with dlsym on a Pi, read here from the file itself.
    exported = elf.defined_symbols(foreign_library("armv7l"))
    assert all(n in exported for n in native_runtime.REQUIRED)
    assert "TfLiteInterpreterOptionsAddOperator" in exported
    assert not any(n in exported for n in native_runtime.KERNEL_API)
    assert not any(n.startswith("TfLiteXNNPack") for n in exported)


def test_without_the_kernel_api_builtin_models_run_and_custom_ops_say_why(atan_model_bytes):
    # On x86 the armv7l file cannot be loaded, so this child marks the loaded
    # runtime as Runtime() marks that build, and checks every entry point
    # that would reach the missing API refuses with the reason.  (The
    # detection itself is tested on the real file's symbols above.)
    r = _py(
        f"""
        import numpy as np, opaque_ops as oo
        from opaque_ops._native import runtime_loader as nr
        rt = nr.load_runtime()
        rt.custom_ops_problem = "exports none of the opaque kernel API (test)"
        it = oo.Interpreter(model_content=bytes.fromhex({_add_model().hex()!r}))
        it.allocate_tensors(); it.set_tensor(0, np.array([1, 2], np.float32)); it.invoke()
        print("builtin", it.get_tensor(it.get_output_details()[0]["index"]).tolist())
        for name, call in [
            ("compile_ops", lambda: oo.compile_ops({str(ROOT / "examples" / "atan" / "atan.c")!r},
                                                   ops={{"Atan": "AtanOpRegistrationExternal"}})),
            ("python_op", lambda: oo.Interpreter(model_content=bytes.fromhex({atan_model_bytes.hex()!r}),
                                                 custom_ops=[oo.python_op("Atan", lambda i, o: i[0])])),
        ]:
            try:
                call(); print(name, "NOT REFUSED")
            except oo.OpLibraryError as e:
                print(name, "refused:", e)
        """
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "builtin [2.0, 4.0]", r.stdout
    # Refused before compiling: the result could never be loaded.
    assert lines[1].startswith("compile_ops refused: cannot use compile_ops(") and "(test)" in lines[1]
    assert lines[2].startswith("python_op refused: cannot use python_op 'Atan'") and "(test)" in lines[2]


def _add_model() -> bytes:
    import numpy as np

    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [2], np.float32)
    y = b.add_tensor("y", [2], np.float32)
    b.add_op("ADD", inputs=[x, x], outputs=[y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


# -------------------------------------------------- TFLite 2.18+: 4-argument Create


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_operator_user_data_reaches_the_runtime_through_either_create():
    # 2.17 has CreateWithData; 2.18+ has a 4-argument TfLiteOperatorCreate
    # and no CreateWithData (CI's second pass).  Either way the runtime
    # must hand back the pointer the factory gave.
    import numpy as np

    src = """
    #include "tensorflow/lite/c/c_api_opaque.h"
    static float scale = 42.0f;
    static TfLiteOperator* me;
    static TfLiteStatus prepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return kTfLiteOk; }
    static TfLiteStatus invoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      const float* k = (const float*)TfLiteOperatorGetUserData(me);
      const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
      TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(c, n, 0);
      if (k != &scale) return kTfLiteError;
      const float* x = (const float*)TfLiteOpaqueTensorData(in);
      float* y = (float*)TfLiteOpaqueTensorData(out);
      for (size_t i = 0; i < TfLiteOpaqueTensorByteSize(in) / sizeof(float); i++) y[i] = x[i] * *k;
      return kTfLiteOk;
    }
    TfLiteOperator* MakeScale(void) {
      me = TfLiteOperatorCreate(kTfLiteBuiltinCustom, "Scale", 1, &scale);
      TfLiteOperatorSetPrepare(me, prepare);
      TfLiteOperatorSetInvoke(me, invoke);
      return me;
    }
    """
    # -O0: optimised, the glue tail-calls Create with the 4th argument
    # register untouched, so a 3-argument call would pass unnoticed on x86-64.
    lib = oo.compile_ops(textwrap.dedent(src), ops={"Scale": "MakeScale"}, debug=True)
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [3], np.float32)
    y = b.add_tensor("y", [3], np.float32)
    b.add_custom_op("Scale", inputs=[x], outputs=[y], version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    it.allocate_tensors()
    it.set_tensor(0, np.array([1, 2, 3], np.float32))
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).tolist() == [42.0, 84.0, 126.0]


def test_python_op_operators_carry_their_key_as_user_data():
    from opaque_ops._native.ffi import ffi
    from opaque_ops._native.python_operator import make_python_operator

    class Target:  # what make_python_operator calls back (a PythonOp, normally)
        def _on_init(self, options):
            return 1

    rt = native_runtime.load_runtime()
    target = Target()
    op = make_python_operator("UserDataProbe", 1, target)
    # The operator's user data is the key the shared trampolines look the op
    # up by: CreateWithData on 2.17, the fourth argument of Create on 2.18+.
    # Reading it back proves that argument was passed, not left to whatever
    # was in the register.
    key = int(ffi.cast("intptr_t", rt.lib.TfLiteOperatorGetUserData(op._ptr)))
    assert key == op._record.key and key > 0
    assert rt.create_takes_user_data == (tuple(int(p) for p in rt.version.split(".")[:2]) >= (2, 18))


# ------------------------------------------- 32-bit Raspberry Pi OS, for real (qemu-arm)

ARMV7L_CHILD = """
import json, platform, sys, warnings
warnings.simplefilter("error")  # the armv7l wheel file is a known build: no warning
import numpy as np
import opaque_ops as oo
from opaque_ops.build.compiler import host_arch
out = {"machine": platform.machine(), "host_arch": host_arch()}
info = oo.runtime_info()
out["info"] = {k: getattr(info, k) for k in ("version", "found_by", "known_build", "custom_ops", "xnnpack")}
it = oo.Interpreter(model_path=sys.argv[1], use_xnnpack=True)
out["xnnpack"] = it.xnnpack
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.load(sys.argv[2]))
it.invoke()
np.save(sys.argv[3], it.get_tensor(it.get_output_details()[0]["index"]))
for name, call in [("load_ops", lambda: oo.load_ops(sys.argv[4])),
                   ("compile_ops", lambda: oo.compile_ops("int unused;")),
                   ("python_op", lambda: oo.Interpreter(model_path=sys.argv[1],
                                                        custom_ops=[oo.python_op("Atan", lambda i, o: i[0])]))]:
    try:
        call()
        out[name] = "NOT REFUSED"
    except oo.OpLibraryError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def test_armv7l_runs_builtin_models_and_refuses_custom_ops_with_the_reason(tmp_path):
    # A 32-bit ARM CPython (Debian's armhf packages) under qemu-arm, with
    # pymicro-wakeword's armv7l wheel unpacked on its path: the automatic
    # lookup finds its runtime, which has no opaque kernel API and no XNNPACK.
    import zipfile

    import numpy as np
    from ai_edge_litert.interpreter import Interpreter as Reference

    from tests.helpers.armhf_python import MULTIARCH, run, sysroot
    from tests.helpers.locations import package_file

    site = tmp_path / "site"
    with zipfile.ZipFile(downloaded_wheel("armv7l")) as z:
        z.extractall(site)
    model = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")
    x = (np.random.default_rng(7).standard_normal((1, 1760)) * 1000).astype(np.float32)
    ref = Reference(model_path=str(model))
    ref.resize_tensor_input(ref.get_input_details()[0]["index"], x.shape)
    ref.allocate_tensors()
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    want = ref.get_tensor(ref.get_output_details()[0]["index"])
    # The declared input is [1, 1] (see tests/model/test_checks.py): both resize to 1760 samples.
    np.save(tmp_path / "x.npy", x)
    code = ARMV7L_CHILD.replace(
        "it.allocate_tensors()\n", "it.resize_tensor_input(0, [1, 1760]); it.allocate_tensors()\n", 1
    )
    # A real armv7l shared library stands in for a kernel library: the
    # runtime's missing API is reported before the file is looked at.
    armhf_lib = sysroot() / "usr" / "lib" / MULTIARCH / "libffi.so.8"
    r = run(
        f"import sys; sys.argv = ['child', {str(model)!r}, {str(tmp_path / 'x.npy')!r}, "
        f"{str(tmp_path / 'y.npy')!r}, {str(armhf_lib)!r}]\n" + code,
        ROOT,
        site,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["host_arch"] == "armv7l", out
    assert out["info"] == {
        "version": "2.17.1",
        "found_by": "pymicro-wakeword wheel",
        "known_build": True,
        "custom_ops": False,
        "xnnpack": False,
    }, out
    assert out["xnnpack"] is False
    # compile_ops refuses before it looks for a compiler (there is none for armv7l here).
    for name in ("load_ops", "compile_ops", "python_op"):
        assert "exports none of the opaque kernel API" in out[name] and "armv7l" in out[name], out[name]
    got = np.load(tmp_path / "y.npy")
    assert got.shape == want.shape
    # Measured: 1.5e-5 at most on values of 55-73 (ai-edge-litert uses XNNPACK, armv7l cannot).
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


def test_record_hex_decodes_what_base64_decodes_and_refuses_the_rest():
    # The runtime loader reads the wheel's RECORD without importing base64 (record_hex's docstring).
    import base64
    import hashlib
    import random

    rng = random.Random(5)
    digests = [hashlib.sha256(bytes([i])).digest() for i in range(200)] + [bytes(32), b"\xff" * 32]
    digests += [bytes.fromhex(d) for d in builds.BY_DIGEST]
    for raw in digests:
        b64 = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        assert native_runtime.record_hex(b64) == raw.hex() == base64.urlsafe_b64decode(b64 + "=").hex()
    good = base64.urlsafe_b64encode(digests[0]).decode().rstrip("=")
    bad = [good[:-1], good + "A", good[:10] + "+" + good[11:], good[:10] + "=" + good[11:], "", good[:-1] + "B"]
    bad += ["".join(rng.choice("!@#$%^&*() ") for _ in range(43))]
    for b64 in bad:
        assert native_runtime.record_hex(b64) is None, b64


def test_find_spec_answers_as_importlib_util_does():
    # The runtime loader finds pymicro-wakeword's package without importing importlib.util.
    import importlib.util

    names = ["pymicro_wakeword", "numpy", "opaque_ops", "json", "sys", "no_such_module_here", "tests"]
    for name in names:
        assert native_runtime.find_spec(name) == importlib.util.find_spec(name), name
    assert native_runtime.find_spec("pymicro_wakeword") is not None
    assert native_runtime.find_spec("no_such_module_here") is None


def test_the_fast_calls_module_is_imported_as_importlib_imports_an_extension():
    # load_extension takes importlib's functions from the frozen modules they live in.
    import importlib.machinery
    import importlib.util

    from opaque_ops._native import fast_calls as native_fast
    from opaque_ops.interpreter import fast_calls

    mod = fast_calls.module()
    if mod is None:
        pytest.fail(f"no fast calls module: {fast_calls.status()[1]}")
    assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader)
    assert mod.__spec__ == importlib.util.spec_from_file_location(
        native_fast.MODULE_NAME, mod.__file__, loader=mod.__loader__
    )
    assert mod.__spec__.origin == mod.__file__ and mod.__spec__.has_location


FORK_SETUP = """
import opaque_ops as oo
from opaque_ops._native import runtime_loader as rl
"""


def test_a_fork_while_another_thread_loads_the_runtime_leaves_the_child_able_to_load_it():
    # The thread stops inside load_runtime, holding _runtime_lock, before the
    # runtime is loaded: the child's copy of the lock stayed held, and its
    # load_runtime() (every interpreter's first step) waited forever.
    assert_child_returns(
        native_runtime.load_runtime().path,
        FORK_SETUP,
        code="rl.load_runtime.__code__",
        lock="rl._runtime_lock",
        worker="rl.load_runtime()",
        child="rl.load_runtime().path",
    )


def test_a_fork_while_another_thread_hashes_the_runtime_leaves_the_child_able_to_hash_it():
    # The thread stops inside Runtime.sha256, holding the runtime's digest lock.
    assert_child_returns(
        native_runtime.file_sha256(native_runtime.load_runtime().path),
        FORK_SETUP + "rt = rl.load_runtime()\n",
        code="rl.Runtime.sha256.fget.__code__",
        lock="rt._digest_lock",
        worker="rt.sha256",
        child="oo.runtime_info().sha256",
    )
