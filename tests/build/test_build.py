"""Tests for build.py (opaque_ops.build) and the C runner c/tools/oo_run.c.

Everything is built for real with the system compiler (and, when installed,
aarch64-linux-gnu-gcc + qemu-aarch64).  The reference for Atan is Python's
``math.atan`` (libm, double) of the float32 sum ``x + 0.99999905``, rounded to
float32 -- the op's definition, independent of the kernel.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.build import paths as _paths
from opaque_ops.build import standalone as oob
from opaque_ops.errors import OpLibraryError
from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import run_child, run_python
from tests.helpers.locations import ROOT

BUILD_PY = ROOT / "build.py"
ATAN_C = ROOT / "examples" / "atan" / "atan.c"
OO_RUN_C = ROOT / "c" / "tools" / "oo_run.c"
OFFSET = np.float32(0.99999905)
X = np.array([-3.0, -1.5, 0.0, 0.25, 7.5], dtype=np.float32)
HOST = oob.host_arch()
CROSS_CC = "aarch64-linux-gnu-gcc"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


def atan_reference(x: np.ndarray) -> np.ndarray:
    shifted = (x + OFFSET).astype(np.float32)
    return np.array([math.atan(float(v)) for v in shifted], dtype=np.float32)


def tflite_lib() -> Path:
    spec = importlib.util.find_spec("pymicro_wakeword")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pymicro-wakeword (the TFLite C library) is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "lib" / "libtensorflowlite_c.so"


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kw)


def build(*args) -> subprocess.CompletedProcess:
    """``python build.py ARGS`` in a subprocess (the script users run)."""
    return run_python(BUILD_PY, *args)


def build_atan(out: Path, *extra) -> Path:
    assert oob.main([str(ATAN_C), "--op", "Atan=AtanOpRegistrationExternal", "-o", str(out), *extra]) == 0
    return out


def run_atan_python(lib: oo.OpLibrary, model: Path) -> np.ndarray:
    it = oo.Interpreter(model_path=str(model), custom_ops=[lib])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], X)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def atan_model(work) -> Path:
    out = work / "atan.tflite"
    r = run_python(ROOT / "examples" / "atan" / "make_model.py", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def atan_so(work) -> Path:
    return build_atan(work / "atan_x86.so")


@pytest.fixture(scope="module")
def oo_run(work) -> Path:
    exe = work / "oo_run"
    r = run(["cc", "-std=gnu11", "-O2", "-Wall", "-Werror", f"-I{_paths.include_dir()}", OO_RUN_C, "-o", exe, "-ldl"])
    assert r.returncode == 0, r.stderr
    return exe


@pytest.fixture(scope="module")
def input_bin(work) -> Path:
    p = work / "in0.bin"
    X.tofile(p)
    return p


# ------------------------------------------------------------ portability --

_NO_COMPILER_SCRIPT = r"""
import json, shutil, sys
import numpy as np
import opaque_ops as oo
from opaque_ops import _native
assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is visible"
lib = oo.load_ops(sys.argv[1])
it = oo.Interpreter(model_path=sys.argv[2], custom_ops=[lib])
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.array(json.loads(sys.argv[3]), np.float32))
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
print(json.dumps({"runtime": _native.load_runtime().path, "ops": lib.ops, "y": y.tobytes().hex()}))
"""


def test_library_loads_without_compiler_and_with_runtime_elsewhere(tmp_path, atan_model):
    # Build with the script users run, then load it where no compiler exists
    # and the runtime is a copy in an unrelated directory.
    out = tmp_path / "dist" / "atan_ops.so"
    r = build(ATAN_C, "--op", "Atan=AtanOpRegistrationExternal", "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and f"wrote {out}" in r.stdout

    elsewhere = tmp_path / "elsewhere" / "lib"
    elsewhere.mkdir(parents=True)
    runtime_copy = elsewhere / "libtensorflowlite_c.so"
    shutil.copyfile(tflite_lib(), runtime_copy)
    env = {
        "CC": None,
        "LD_LIBRARY_PATH": None,
        "PATH": "/nonexistent",
        "OPAQUE_OPS_TFLITE_LIB": str(runtime_copy),
        "OPAQUE_OPS_CACHE_DIR": str(tmp_path / "empty_cache"),
    }
    r = run_child(_NO_COMPILER_SCRIPT, out, atan_model, json.dumps(X.tolist()), env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["runtime"] == str(runtime_copy)
    assert got["ops"] == [["Atan", 1]]
    y = np.frombuffer(bytes.fromhex(got["y"]), np.float32)
    np.testing.assert_array_equal(y, atan_reference(X))
    # No library in the compile cache (the interpreter keeps the model's
    # verdict in its verdicts/ directory).
    assert not list((tmp_path / "empty_cache").glob("*.so")), "loading must not compile anything"


def test_library_is_plain_shared_object_not_tied_to_runtime(atan_so):
    readelf = "readelf"  # binutils: installed with every compiler the build needs
    dyn = run([readelf, "-d", atan_so]).stdout
    needed = [l for l in dyn.splitlines() if "(NEEDED)" in l]
    assert needed and not any("tensorflowlite" in l or "python" in l for l in needed), needed
    assert "RPATH" not in dyn and "RUNPATH" not in dyn
    assert "SYMBOLIC" in dyn
    syms = run([readelf, "--dyn-syms", "-W", atan_so]).stdout
    for name in (
        "OpaqueOps_Stamp",
        "OpaqueOps_NumOps",
        "OpaqueOps_OpName",
        "OpaqueOps_OpVersion",
        "OpaqueOps_MakeOperator",
        "OpaqueOps_LastError",
    ):
        assert any(l.split()[-1] == name and " UND " not in l for l in syms.splitlines() if l.strip()), name
    # The opaque API stays undefined: it binds to whichever runtime is loaded.
    assert any(l.split()[-1].startswith("TfLiteOpaque") and " UND " in l for l in syms.splitlines() if l.strip())
    assert "PyInit_" not in syms


def test_stamp_and_ops(atan_so):
    lib = oo.load_ops(atan_so)
    assert lib.ops == [("Atan", 1)]
    assert lib._kernel.stamp["abi"] == "1"
    assert lib._kernel.stamp["arch"] == HOST


# ----------------------------------------------------- version / arch checks --


def test_abi_mismatch_is_rejected(tmp_path, oo_run, atan_model, input_bin):
    out = build_atan(tmp_path / "atan_abi99.so", "-D", "OPAQUE_OPS_ABI_VERSION=99")
    with pytest.raises(OpLibraryError, match=r"header ABI 99 .*expects ABI 1.*rebuild"):
        oo.load_ops(out)
    r = run([oo_run, tflite_lib(), atan_model, out, "--in", input_bin, "--out-prefix", tmp_path / "o"])
    assert r.returncode == 1
    assert "built for opaque_ops ABI 99, but this oo_run expects ABI 1" in r.stderr


def _other_arch() -> tuple[str, int]:
    return ("aarch64", 0xB7) if HOST != "aarch64" else ("x86_64", 0x3E)


def test_wrong_arch_rejected_elf_header(tmp_path, atan_so, oo_run, atan_model, input_bin):
    # The same library with e_machine rewritten: the loader must refuse it
    # before dlopen, with a message naming both architectures.
    other, code = _other_arch()
    data = bytearray(atan_so.read_bytes())
    data[18:20] = code.to_bytes(2, "little")
    fake = tmp_path / "fake_other_arch.so"
    fake.write_bytes(bytes(data))
    with pytest.raises(
        OpLibraryError,
        match=rf"built for {other}, but this machine is {HOST}.*"
        rf"`opaque-ops build SOURCE.c --target {HOST}`",
    ):
        oo.load_ops(fake)
    r = run([oo_run, tflite_lib(), atan_model, fake, "--in", input_bin])
    assert r.returncode == 1 and f"built for {other}, but this oo_run runs on {HOST}" in r.stderr


@pytest.mark.skipif(
    HOST != "x86_64" or shutil.which(CROSS_CC) is None,
    reason=f"needs an x86_64 host with {CROSS_CC} (apt-get install gcc-aarch64-linux-gnu)",
)
def test_real_aarch64_library_rejected_on_x86(tmp_path):
    out = build_atan(tmp_path / "atan_arm.so", "--target", "aarch64")
    assert out.read_bytes()[18:20] == (0xB7).to_bytes(2, "little")
    with pytest.raises(OpLibraryError, match="built for aarch64, but this machine is x86_64"):
        oo.load_ops(out)


@pytest.mark.skipif(HOST == "aarch64", reason="the cross compiler check is for non-aarch64 hosts")
def test_missing_cross_compiler_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no compiler at all
    assert oob.main([str(ATAN_C), "--target", "aarch64", "-o", str(tmp_path / "x.so")]) == 1
    err = capsys.readouterr().err
    assert "aarch64-linux-gnu-gcc not found" in err
    assert "apt-get install gcc-aarch64-linux-gnu" in err
    assert not (tmp_path / "x.so").exists()


# ------------------------------------------------------------ diagnostics --


def test_compile_errors_one_line_each(tmp_path):
    bad = tmp_path / "bad_kernel.c"
    bad.write_text(
        textwrap.dedent("""\
        #include "opaque_ops.h"
        static TfLiteStatus BadInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
          return undeclared_thing;
        }
        int broken( {
        OPAQUE_OP("Bad", 1, .invoke = BadInvoke);
        """)
    )
    out = tmp_path / "bad.so"
    r = build(bad, "-o", out)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert lines[0].startswith("error: building bad.so failed")
    diag = [l for l in lines[1:] if ": error:" in l]
    assert any(f"{bad}:3:" in l and "undeclared_thing" in l for l in diag), r.stderr
    assert any(f"{bad}:5:" in l for l in diag), r.stderr
    # Only diagnostic lines ("file:line:col: error: ..."): no source excerpts, carets,
    # "In function" notes or build-tool chatter.
    diagnostic = re.compile(r"^\S+:\d+(:\d+)?: (fatal error|error|warning): ")
    assert all(diagnostic.match(l) for l in lines[1:]), r.stderr
    assert not out.exists()

    with pytest.raises(oob.BuildError) as info:
        oob.build_library([bad], out)
    assert "undeclared_thing" in str(info.value) and "undeclared_thing" in info.value.output


def test_undefined_symbols_reported(tmp_path):
    # The library would link (shared objects may have undefined symbols) and
    # only fail at dlopen on the target machine; build.py must catch it now,
    # while leaving the runtime's TfLite* symbols undefined.
    src = tmp_path / "typo.c"
    src.write_text(
        textwrap.dedent("""\
        #include "opaque_ops.h"
        int oo_helper_that_does_not_exist(int);
        static TfLiteStatus TInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
          return oo_helper_that_does_not_exist(TfLiteOpaqueNodeNumberOfInputs(n)) ? kTfLiteOk : kTfLiteError;
        }
        OPAQUE_OP("T", 1, .invoke = TInvoke);
        """)
    )
    r = build(src, "-o", tmp_path / "typo.so")
    assert r.returncode == 1, r.stderr
    assert "undefined symbol(s) oo_helper_that_does_not_exist" in r.stderr
    assert "TfLiteOpaqueNodeNumberOfInputs" not in r.stderr
    assert not (tmp_path / "typo.so").exists()

    r = build(ATAN_C, "--op", "Atan=NoSuchFactory", "-o", tmp_path / "x.so")
    assert r.returncode == 1 and "undefined symbol(s) NoSuchFactory" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kernels", "no_such_kernel"], "no bundled kernel 'no_such_kernel'"),
        (["missing_file.c"], "source file 'missing_file.c' does not exist"),
        ([], "nothing to build"),
        ([str(ATAN_C), "--sanitize", "adress"], "unknown sanitizer 'adress'"),
        ([str(ATAN_C), "-D", "1BAD"], "invalid macro '1BAD'"),
        ([str(ATAN_C), "--op", "Atan=not a function"], "must name a C function"),
    ],
)
def test_bad_arguments(tmp_path, capsys, args, message):
    assert oob.main(args + ["-o", str(tmp_path / "x.so")]) == 1
    assert message in capsys.readouterr().err


def test_op_flag_needs_equals():
    r = build(ATAN_C, "--op", "Atan")
    assert r.returncode == 2 and "--op takes ModelName=c_factory" in r.stderr


# -------------------------------------------------------------- --kernels --

_KERNEL = """\
#include "opaque_ops.h"
/* Same static names in every file: each must be its own translation unit. */
static float helper(float v) {{ return {expr}; }}
static TfLiteStatus KPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {{
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(c, TfLiteOpaqueTensorType(in), kTfLiteFloat32);
  TfLiteIntArray* dims = TfLiteIntArrayCreate(TfLiteOpaqueTensorNumDims(in));
  for (int i = 0; i < dims->size; i++) dims->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), dims);
}}
static TfLiteStatus KInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {{
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  for (size_t i = 0; i < TfLiteOpaqueTensorByteSize(in) / sizeof(float); i++) y[i] = helper(x[i]);
  return kTfLiteOk;
}}
OPAQUE_OP("{name}", 1, .prepare = KPrepare, .invoke = KInvoke);
"""


def test_kernels_build_separate_translation_units(tmp_path):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "double_it.c").write_text(_KERNEL.format(name="DoubleIt", expr="v * 2.0f"))
    (kdir / "plus_one.c").write_text(_KERNEL.format(name="PlusOne", expr="v + 1.0f"))
    out = tmp_path / "two.so"
    assert oob.main(["--kernels", "double_it", "plus_one", "--kernels-dir", str(kdir), "-o", str(out)]) == 0
    lib = oo.load_ops(out)
    assert lib.ops == [("DoubleIt", 1), ("PlusOne", 1)]

    b = ModelBuilder()
    x = b.add_tensor("x", shape=[4], dtype=np.float32)
    h = b.add_tensor("h", shape=[4], dtype=np.float32)
    y = b.add_tensor("y", shape=[4], dtype=np.float32)
    b.add_custom_op("DoubleIt", inputs=[x], outputs=[h])
    b.add_custom_op("PlusOne", inputs=[h], outputs=[y])
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    it.allocate_tensors()
    xs = np.array([0.5, -2.0, 3.0, 10.0], np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], xs)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), xs * 2 + 1)


def _declared_ops(files) -> list[tuple[str, int]]:
    """The ops the kernel sources declare, read from their OPAQUE_OP lines (not from a build)."""
    found = set()
    for f in files:
        for name, version in re.findall(r'OPAQUE_OP\(\s*"([^"]+)"\s*,\s*(\d+)', f.read_text()):
            found.add((name, int(version)))
    return sorted(found)


@pytest.mark.parametrize(
    "names, files",
    [
        (["all"], None),
        (["mediapipe"], ["MEDIAPIPE"]),
        (["atan", "mediapipe", "atan.c"], ["atan", "MEDIAPIPE"]),
    ],
)
def test_bundled_kernels_build_by_file_and_bundle_name(tmp_path, names, files):
    from opaque_ops import kernels

    kdir = _paths.kernels_dir()
    if files is None:
        expected = sorted(kdir.glob("*.c"))
    else:
        stems = [s for f in files for s in (kernels.MEDIAPIPE if f == "MEDIAPIPE" else [f])]
        expected = [kdir / f"{s}.c" for s in stems]
    assert expected and all(p.is_file() for p in expected)
    out = tmp_path / "bundled.so"
    assert oob.main(["--kernels", *names, "-o", str(out)]) == 0
    assert oo.load_ops(out).ops == _declared_ops(expected)
    # The same name as in Python: oo.kernels.mediapipe() provides the same ops.
    if names == ["mediapipe"]:
        assert kernels.mediapipe().ops == oo.load_ops(out).ops


# ------------------------------------------------------------- sanitizers --

_OVERFLOW = """\
#include <stdlib.h>
#include <string.h>
#include "opaque_ops.h"
static TfLiteStatus OvPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  TfLiteIntArray* dims = TfLiteIntArrayCreate(TfLiteOpaqueTensorNumDims(in));
  for (int i = 0; i < dims->size; i++) dims->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), dims);
}
/* Deliberately reads one element past its own heap buffer. */
static TfLiteStatus OvInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  size_t count = TfLiteOpaqueTensorByteSize(in) / sizeof(float);
  float* scratch = malloc(count * sizeof(float));
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  memcpy(scratch, TfLiteOpaqueTensorData(in), count * sizeof(float));
  for (size_t i = 0; i < count; i++) y[i] = scratch[i + 1];
  free(scratch);
  return kTfLiteOk;
}
OPAQUE_OP("Atan", 1, .prepare = OvPrepare, .invoke = OvInvoke);
"""

_ASAN_SCRIPT = r"""
import sys
import numpy as np
import opaque_ops as oo
it = oo.Interpreter(model_path=sys.argv[2], custom_ops=[oo.load_ops(sys.argv[1])])
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.array([-3.0, -1.5, 0.0, 0.25, 7.5], np.float32))
it.invoke()
print(it.get_tensor(it.get_output_details()[0]["index"]).tobytes().hex())
"""


def _libasan() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not installed")
    path = run([gcc, "-print-file-name=libasan.so"]).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        pytest.skip("gcc has no libasan (install libasan8 / gcc's sanitizer runtime)")
    return path


def test_sanitize_build_runs_under_asan(tmp_path, atan_model):
    # The documented recipe: LD_PRELOAD the ASan runtime, leak checks off.
    env = {"LD_PRELOAD": _libasan(), "ASAN_OPTIONS": "detect_leaks=0"}
    # gcc explicitly: the preloaded runtime must be the one the library was built against.
    good = build_atan(tmp_path / "atan_asan.so", "--sanitize", "address,undefined", "--cc", "gcc")
    syms = good.read_bytes()
    assert b"__asan_" in syms and b"__ubsan_" in syms, "not instrumented"
    r = run_child(_ASAN_SCRIPT, good, atan_model, env=env)
    assert r.returncode == 0, r.stderr
    y = np.frombuffer(bytes.fromhex(r.stdout.strip().splitlines()[-1]), np.float32)
    np.testing.assert_array_equal(y, atan_reference(X))
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr

    # And ASan really watches the kernel: an out-of-bounds read aborts the run.
    src = tmp_path / "overflow.c"
    src.write_text(_OVERFLOW)
    bad = tmp_path / "overflow_asan.so"
    assert oob.main([str(src), "--sanitize", "address", "--cc", "gcc", "-o", str(bad)]) == 0
    r = run_child(_ASAN_SCRIPT, bad, atan_model, env=env)
    assert r.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in r.stderr
    assert "OvInvoke" in r.stderr and "overflow.c" in r.stderr  # -g: the report names the line


# ----------------------------------------------------------------- oo_run --


def test_oo_run_native_matches_python(tmp_path, oo_run, atan_so, atan_model, input_bin):
    prefix = tmp_path / "x86_"
    r = run([oo_run, tflite_lib(), atan_model, atan_so, "--in", input_bin, "--out-prefix", prefix])
    assert r.returncode == 0, r.stderr
    y = np.fromfile(f"{prefix}0.bin", np.float32)
    np.testing.assert_array_equal(y, atan_reference(X))
    np.testing.assert_array_equal(y, run_atan_python(oo.load_ops(atan_so), atan_model))
    line = r.stdout.strip().splitlines()[0]
    assert line.startswith(f"output 0 y float32 [5] -> {prefix}0.bin:")
    assert [np.float32(v) for v in line.split(":")[-1].split()] == list(y)


def test_oo_run_errors(tmp_path, oo_run, atan_so, atan_model, input_bin):
    lib = tflite_lib()
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 8)
    cases = [
        ([lib, atan_model, atan_so, "--in", short], "takes 20 bytes but"),
        ([lib, atan_model, "--in", input_bin], "custom op no kernel library provides"),
        ([lib, atan_model, atan_so], "the model has 1 inputs but 0 --in files"),
        ([lib, tmp_path / "none.tflite", atan_so, "--in", input_bin], "cannot open"),
        ([atan_so, atan_model, atan_so, "--in", input_bin], "cannot load the TFLite library"),
        ([lib, atan_model, lib, "--in", input_bin], "not an opaque_ops kernel library"),
        ([lib], "usage: oo_run"),
    ]
    for args, message in cases:
        r = run([oo_run, *args])
        assert r.returncode == 1 and message in r.stderr, (args, r.stderr)


# ------------------------------------------------------- aarch64 for real --


@pytest.mark.skipif(
    shutil.which("qemu-aarch64") is None or shutil.which(CROSS_CC) is None,
    reason="needs qemu-aarch64 and aarch64-linux-gnu-gcc "
    "(apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)",
)
def test_aarch64_under_qemu_matches_x86(tmp_path, oo_run, atan_so, atan_model, input_bin):
    from tests.helpers import aarch64_python

    arm_tflite = aarch64_python.aarch64_tflite()  # from the pymicro-wakeword aarch64 wheel, cached
    arm_so = build_atan(tmp_path / "atan_arm64.so", "--target", "aarch64")
    assert arm_so.read_bytes()[18:20] == (0xB7).to_bytes(2, "little")
    arm_run = tmp_path / "oo_run_arm64"
    r = run(
        [
            CROSS_CC,
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{_paths.include_dir()}",
            OO_RUN_C,
            "-o",
            arm_run,
            "-ldl",
        ]
    )
    assert r.returncode == 0, r.stderr

    sysroot = "/usr/aarch64-linux-gnu"
    r = run(
        [
            "qemu-aarch64",
            "-L",
            sysroot,
            arm_run,
            arm_tflite,
            atan_model,
            arm_so,
            "--in",
            input_bin,
            "--out-prefix",
            tmp_path / "arm_",
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TFLite 2.17.1" in r.stderr
    arm = (tmp_path / "arm_0.bin").read_bytes()

    r = run([oo_run, tflite_lib(), atan_model, atan_so, "--in", input_bin, "--out-prefix", tmp_path / "x86_"])
    assert r.returncode == 0, r.stderr
    x86 = (tmp_path / "x86_0.bin").read_bytes()
    py = run_atan_python(oo.load_ops(atan_so), atan_model).tobytes()

    assert arm == x86 == py
    np.testing.assert_array_equal(np.frombuffer(arm, np.float32), atan_reference(X))
