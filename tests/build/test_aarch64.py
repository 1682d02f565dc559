"""The Raspberry Pi flow, in Python, under emulation; and the platform wheels.

An aarch64 CPython (Debian's arm64 packages, run with qemu-aarch64; see
``aarch64_python.py``) with no compiler on PATH, Raspberry Pi OS bookworm's
3.11 and, for the wheel, trixie's 3.13 too:

* loads a library cross-built with ``build.py --target aarch64`` through
  ``oo.load_ops`` and runs the Atan and MediaPipe selfie models;
* installs the ``py3-none-manylinux_2_35_aarch64`` wheel (with pip, inside the
  emulated Python) and runs the selfie model on ``oo.kernels.mediapipe()``,
  which must use the prebuilt kernels and the fast calls module the wheel
  carries for that Python.

Outputs are compared with the same models run natively on x86_64.  The Atan
kernel (libm's atan in double, rounded to float once) gives the same bits on
both; the selfie model's builtin ops run different SIMD code on each machine,
so there the outputs agree to a tolerance below one 8-bit mask level, and the
custom op alone (a one-op model) gives the same bits on both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops import kernels
from opaque_ops._native import elf
from opaque_ops.build import standalone as oob
from tests.helpers import aarch64_python as arm
from tests.helpers import other_python
from tests.helpers.atan import make_model, reference
from tests.helpers.child_process import run_child, run_python
from tests.helpers.locations import ROOT, package_file
from tests.helpers.manifest_text import manifest_of
from tests.test_start_up import NOT_AT_START_UP

pytestmark = [
    pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="needs qemu-aarch64 (apt-get install qemu-user)"),
    pytest.mark.skipif(oob.host_arch() != "x86_64", reason="emulates aarch64 on an x86_64 host"),
]

CROSS_CC = "aarch64-linux-gnu-gcc"
ATAN_C = ROOT / "examples" / "atan" / "atan.c"
X = np.array([-3.0, -1.5, 1e-30, 0.25, -1e30], np.float32)  # the model takes 5 values
# The selfie model's builtin ops run different SIMD code on each machine
# (XNNPACK's AVX-512 and NEON kernels sum in different orders): measured up to
# 8e-5 apart on the synthetic person.  An 8-bit mask level is 1/255 = 4e-3.
SELFIE_TOLERANCE = 1e-3

_RUN_MODEL = r"""
import json, shutil, sys
import numpy as np
import opaque_ops as oo
kind, model, inputs, out = sys.argv[1:5]
if "--compiler-allowed" not in sys.argv:
    assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is visible"
if kind == "bundle":
    ops = oo.kernels.mediapipe()
    info = {"prebuilt": [lib.prebuilt for lib in ops.libraries], "paths": [str(lib.path) for lib in ops.libraries]}
else:
    ops = oo.load_ops(kind)
    info = {"ops": ops.ops}
it = oo.Interpreter(model_path=model, custom_ops=[ops])
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.load(inputs))
it.invoke()
np.save(out, it.get_tensor(it.get_output_details()[0]["index"]))
info["build_path_imported"] = "opaque_ops.build.compiler" in sys.modules
import platform
from opaque_ops.interpreter import fast_calls
info.update(machine=platform.machine(), oo=oo.__file__, fastcalls=fast_calls.status())
print("INFO " + json.dumps(info))
"""


# Never needed by a platform wheel's start-up: what no start-up needs
# (tests/test_start_up.py's list), and the compile path itself.
_NOT_AT_WHEEL_START_UP = [*NOT_AT_START_UP, "opaque_ops.build.compiler"]
_START_UP_MODULES = r"""
import sys
_NOT = %r
before = [m for m in _NOT if m in sys.modules]
import numpy as np
import opaque_ops as oo
it = oo.Interpreter(model_path=sys.argv[1], custom_ops=[oo.kernels.mediapipe()])
it.allocate_tensors()
it.invoke()
imported = sorted(sys.modules)
import json  # (after the list: what a start-up imports is the question)
print("INFO " + json.dumps({"before": before, "imported": imported, "oo": oo.__file__}))
""" % (_NOT_AT_WHEEL_START_UP,)


def _fast_name() -> str:
    return "_fastcalls" + sysconfig.get_config_var("EXT_SUFFIX")[: -len(".so")]


def info_line(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    return json.loads(next(l for l in r.stdout.splitlines() if l.startswith("INFO "))[5:])


def native_run(ops, model: Path, x: np.ndarray) -> np.ndarray:
    it = oo.Interpreter(model_path=str(model), custom_ops=[ops])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def needs_cross_compiler():
    if shutil.which(CROSS_CC) is None:
        pytest.skip(f"needs {CROSS_CC} (apt-get install gcc-aarch64-linux-gnu)")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("aarch64")


@pytest.fixture(scope="module")
def selfie() -> Path:
    path = package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")
    assert path.is_file(), "mediapipe 0.10.14 (installed with --no-deps) carries the model"
    return path


@pytest.fixture(scope="module")
def photo(work) -> Path:
    """A synthetic person on a plain background, as MediaPipe feeds the model (RGB/255)."""
    from tests.helpers.synthetic_images import synthetic_person

    image, _ = synthetic_person(256, 256)
    np.save(work / "photo.npy", image[None])
    return work / "photo.npy"


def assert_segments_the_person(mask: np.ndarray) -> None:
    from tests.helpers.synthetic_images import synthetic_person

    _, person = synthetic_person(256, 256)
    assert mask[0, :, :, 0][person].mean() > 0.5 > mask[0, :, :, 0][~person].mean()


@pytest.fixture(scope="module")
def atan_model(work) -> Path:
    path = work / "atan.tflite"
    path.write_bytes(make_model.build())
    return path


@pytest.fixture(scope="module")
def deps() -> Path:
    arm.sysroot()
    return arm.deps_site()


RELEASES = pytest.mark.parametrize("release", arm.RELEASES, ids=lambda r: r.suite)


# ------------------------------------------------------------- the Pi flow --


@RELEASES
def test_emulated_python_is_aarch64_without_a_compiler(release):
    arm.sysroot(release)
    r = arm.run(
        "import platform, shutil, sys, numpy; print(platform.machine(), sys.version_info[:2], "
        "shutil.which('cc'), shutil.which('gcc'), numpy.__version__)",
        pythonpath=[arm.deps_site(release)],
        release=release,
    )
    assert r.returncode == 0, r.stderr
    major, minor = release.python.split(".")
    assert r.stdout.split()[:1] == ["aarch64"] and f"({major}, {minor})" in r.stdout and "None None" in r.stdout
    assert r.stdout.split()[-1] == arm.host_versions()["numpy"]


def test_pi_flow_atan_cross_built_equals_x86(work, deps, atan_model):
    needs_cross_compiler()
    ops = {"Atan": "AtanOpRegistrationExternal"}
    arm_lib = oob.build_library([ATAN_C], work / "atan_arm64.so", target="aarch64", ops=ops)
    x86_lib = oob.build_library([ATAN_C], work / "atan_x86.so", ops=ops)
    assert elf.read(arm_lib).arch == "aarch64"
    x = work / "atan_x.npy"
    np.save(x, X)
    info = info_line(arm.run(_RUN_MODEL, arm_lib, atan_model, x, work / "atan_arm.npy", pythonpath=[ROOT, deps]))
    assert info["machine"] == "aarch64" and info["ops"] == [["Atan", 1]]
    assert info["oo"].startswith(str(ROOT))
    on_arm = np.load(work / "atan_arm.npy")
    on_x86 = native_run(oo.load_ops(x86_lib), atan_model, X)
    np.testing.assert_array_equal(on_arm, on_x86)
    np.testing.assert_array_equal(on_arm, reference(X))  # atan(x + offset), from the op's definition


def test_pi_flow_selfie_cross_built_equals_x86(work, deps, selfie, photo):
    needs_cross_compiler()
    arm_lib = oob.build_library([], work / "mediapipe_arm64.so", target="aarch64", kernels=["mediapipe"])
    x86_lib = oob.build_library([], work / "mediapipe_x86.so", kernels=["mediapipe"])

    # The custom op alone: the same bits on both machines (-ffp-contract=off, one summation order).
    from tests.helpers.transpose_conv import one_op_model

    rng = np.random.default_rng(5)
    opts = np.array([1, 2, 2], "<i4").tobytes()  # SAME, stride 2x2 (MediaPipe's raw options)
    conv = work / "conv.tflite"
    conv.write_bytes(
        one_op_model(
            (1, 16, 16, 8), rng.standard_normal((4, 3, 3, 8)), rng.standard_normal(4), opts, out_shape=(1, 32, 32, 4)
        )
    )
    x = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    np.save(work / "conv_x.npy", x)
    info_line(arm.run(_RUN_MODEL, arm_lib, conv, work / "conv_x.npy", work / "conv_arm.npy", pythonpath=[ROOT, deps]))
    np.testing.assert_array_equal(np.load(work / "conv_arm.npy"), native_run(oo.load_ops(x86_lib), conv, x))

    info = info_line(arm.run(_RUN_MODEL, arm_lib, selfie, photo, work / "selfie_arm.npy", pythonpath=[ROOT, deps]))
    assert ["Convolution2DTransposeBias", 1] in info["ops"]
    on_arm = np.load(work / "selfie_arm.npy")
    on_x86 = native_run(oo.load_ops(x86_lib), selfie, np.load(photo))
    assert on_arm.shape == on_x86.shape == (1, 256, 256, 1)
    assert_segments_the_person(on_x86)
    assert_segments_the_person(on_arm)
    np.testing.assert_allclose(on_arm, on_x86, rtol=0, atol=SELFIE_TOLERANCE)


# ------------------------------------------------------- the platform wheels --


@pytest.fixture(scope="module")
def other() -> other_python.Other | None:
    """pyenv's 3.13 with its packages (None without it): the x86_64 wheel serves it too."""
    return other_python.prepared()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory, other) -> dict[str, Path]:
    """Both platform wheels, built the way a release builds them (pip wheel, build isolation)."""
    needs_cross_compiler()
    out = tmp_path_factory.mktemp("dist")
    built = {}
    # The aarch64 wheel's fast calls module is cross-built for each emulated
    # Pi's Python (Raspberry Pi OS bookworm: CPython 3.11, trixie: 3.13) from
    # its headers, as a release builds it (setup.py's module doc).
    targets = [arm.python_headers(release) for release in arm.RELEASES]
    cross_python = {
        "OPAQUE_OPS_WHEEL_PYTHON_TAG": ",".join(tag for tag, _ in targets),
        "OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": ";".join(os.pathsep.join(map(str, include)) for _, include in targets),
    }
    # The x86_64 wheel's: for the Python building it, and for another one of
    # the host (pyenv's 3.13), as a release builds it for every Python.
    serve_other = {}
    if other is not None:
        serve_other = {
            "OPAQUE_OPS_WHEEL_PYTHON_TAG": other.tag,
            "OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": os.pathsep.join(other.include),
        }
    for arch in ("x86_64", "aarch64"):
        r = run_python(
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            out,
            ROOT,
            env={"OPAQUE_OPS_WHEEL_ARCH": arch, **(cross_python if arch == "aarch64" else serve_other)},
            pythonpath=(),
            cwd=None,
            timeout=900,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        [built[arch]] = out.glob(f"opaque_ops-*-py3-none-manylinux_2_35_{arch}.whl")
    return built


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_platform_wheel_carries_verified_kernels_for_its_arch(wheels, other, arch):
    with zipfile.ZipFile(wheels[arch]) as z:
        names = z.namelist()
        wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        assert f"Tag: py3-none-manylinux_2_35_{arch}" in wheel_meta and "Root-Is-Purelib: false" in wheel_meta
        assert not any("/prebuilt/" in n and f"/prebuilt/{arch}/" not in n for n in names)
        manifest = manifest_of(z.read(f"opaque_ops/prebuilt/{arch}/manifest.txt"))
        assert manifest["arch"] == arch
        assert sorted(manifest["kernels"]) == kernels.available()
        for name, entry in manifest["kernels"].items():
            data = z.read(f"opaque_ops/prebuilt/{arch}/{name}.so")
            assert hashlib.blake2b(data, digest_size=32).hexdigest() == entry["digest"]
            source = z.read(f"opaque_ops/c/kernels/{name}.c")
            assert hashlib.blake2b(source, digest_size=32).hexdigest() == entry["source_digest"]
            assert {0x3E: "x86_64", 0xB7: "aarch64"}[int.from_bytes(data[18:20], "little")] == arch
            # The tag promises glibc 2.35: no symbol may need a newer one.
            versions = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", data)}
            assert versions and max(versions) <= (2, 35), (name, max(versions))
            assert b"libpython" not in data and b"PyInit_" not in data
        # The fast calls module: for the Python that built the x86_64 wheel, and
        # cross-built for each emulated Pi's Python in the aarch64 one.
        if arch == "x86_64":
            want = [_fast_name()] + ([f"_fastcalls.{other.tag}"] if other is not None else [])
        else:
            want = [f"_fastcalls.{r.tag}" for r in arm.RELEASES]
        assert sorted(manifest["fastcalls"]) == sorted(want)
        digests = b"".join(
            hashlib.blake2b(z.read(f"opaque_ops/c/src/{f}"), digest_size=32).digest()
            for f in ("fastcalls.c", "modelreader.c", "sigint_guard.c")
        )
        for name, entry in manifest["fastcalls"].items():
            data = z.read(f"opaque_ops/prebuilt/{arch}/{name}.so")
            assert hashlib.blake2b(data, digest_size=32).hexdigest() == entry["digest"]
            assert b"PyInit__fastcalls" in data
            assert {0x3E: "x86_64", 0xB7: "aarch64"}[int.from_bytes(data[18:20], "little")] == arch
            versions = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", data)}
            assert versions and max(versions) <= (2, 35), (name, max(versions))
            assert hashlib.blake2b(digests, digest_size=32).hexdigest() == entry["source_digest"]


_X86_WHEEL = _RUN_MODEL


def test_x86_64_wheel_runs_prebuilt_kernels_without_a_compiler(wheels, work, selfie, photo):
    target = work / "x86_site"
    r = run_python(
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        target,
        wheels["x86_64"],
        pythonpath=(),
        cwd=None,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    # Only the installed wheel on the path: the checkout's opaque_ops must not be found
    # (nor the fast calls module the test session built).
    env = {
        "PATH": "/nonexistent",
        "OPAQUE_OPS_CACHE_DIR": str(work / "never_used_cache"),
        "CC": None,
        "OPAQUE_OPS_FASTCALLS": None,
    }
    r = run_child(
        _X86_WHEEL,
        "bundle",
        selfie,
        photo,
        work / "selfie_wheel_x86.npy",
        env=env,
        pythonpath=[target],
        timeout=600,
        cwd=work,
    )
    info = info_line(r)
    assert info["oo"].startswith(str(target))
    assert info["prebuilt"] == [True] * len(kernels.MEDIAPIPE)
    assert all(p.startswith(str(target / "opaque_ops" / "prebuilt" / "x86_64")) for p in info["paths"])
    assert info["fastcalls"] == [True, str(target / "opaque_ops" / "prebuilt" / "x86_64" / f"{_fast_name()}.so")]
    # Everything came prebuilt, so the build path was not even imported (a start-up cost).
    assert info["build_path_imported"] is False
    # Nothing compiled: no library in the compile cache (creating the
    # interpreter keeps the model's verdict in its verdicts/ directory).
    assert not list((work / "never_used_cache").glob("*.so")), "nothing may be compiled"
    assert list((work / "never_used_cache" / "verdicts").glob("*.rec"))
    # The same source compiled here with the same build path gives the same output, bit for bit.
    compiled = native_run(oo.kernels.mediapipe(), selfie, np.load(photo))
    np.testing.assert_array_equal(np.load(work / "selfie_wheel_x86.npy"), compiled)

    # What the start-up imported, from a bare interpreter (-S: a site-packages
    # .pth hook may import pathlib itself): none of tests/test_start_up.py's
    # list, such as pathlib, threading or dataclasses (bench/README.md,
    # "Eleventh pass" and "Twelfth pass").  The first start (the
    # rules run, the record is written) and a later one (the record is read).
    site_dirs = [target, *site.getsitepackages()]
    for start in ("first", "later"):
        r = run_python(
            "-S",
            "-c",
            _START_UP_MODULES,
            selfie,
            env={**env, "OPAQUE_OPS_VERDICT_CACHE": str(work / "start_up_verdicts")},
            pythonpath=site_dirs,
            timeout=600,
            cwd=work,
        )
        info = info_line(r)
        assert info["oo"].startswith(str(target)), start
        assert info["before"] == [], f"{start}: the bare interpreter had loaded {info['before']} already"
        assert "opaque_ops.interpreter.core" in info["imported"] and "_cffi_backend" in info["imported"], start
        assert [m for m in _NOT_AT_WHEEL_START_UP if m in info["imported"]] == [], start

    # A damaged prebuilt library is not loaded: that kernel is compiled instead.
    victim = target / "opaque_ops" / "prebuilt" / "x86_64" / "convolution2d_transpose_bias.so"
    victim.write_bytes(victim.read_bytes()[:1000])
    env.update(PATH=os.environ["PATH"])
    r = run_child(
        _X86_WHEEL,
        "bundle",
        selfie,
        photo,
        work / "selfie_wheel_x86b.npy",
        "--compiler-allowed",
        env=env,
        pythonpath=[target],
        timeout=600,
        cwd=work,
    )
    info = info_line(r)
    assert info["prebuilt"] == [name != "convolution2d_transpose_bias" for name in kernels.MEDIAPIPE]
    np.testing.assert_array_equal(np.load(work / "selfie_wheel_x86b.npy"), compiled)


def test_x86_64_wheel_serves_another_python_without_a_compiler(wheels, other, work, selfie, photo):
    # A slim container's Python: no compiler, and not the Python that built
    # the wheel.  The wheel's own module for it gives the fast calls, and the
    # same bits as everywhere else.
    if other is None:
        pytest.skip(f"needs pyenv's Python {other_python.VERSION} (.ci/run's Python matrix installs it)")
    deps, tag = other.deps, other.tag
    target = work / "x86_site_other"
    r = run_python(
        "-m", "pip", "install", "-q", "--no-deps", "--target", target, wheels["x86_64"], pythonpath=(), cwd=None
    )
    assert r.returncode == 0, r.stderr
    env = {
        "PATH": "/nonexistent",
        "OPAQUE_OPS_CACHE_DIR": str(work / "other_cache"),
        "CC": None,
        "OPAQUE_OPS_FASTCALLS": None,  # the session's module is this Python's, not the other one's
    }
    out = work / "selfie_wheel_x86_other.npy"
    info = info_line(
        run_child(
            _RUN_MODEL,
            "bundle",
            selfie,
            photo,
            out,
            python=[str(other.python)],
            env=env,
            pythonpath=[target, deps],
            cwd=work,
        )
    )
    assert info["oo"].startswith(str(target)) and info["prebuilt"] == [True] * len(kernels.MEDIAPIPE)
    assert info["fastcalls"] == [True, str(target / "opaque_ops" / "prebuilt" / "x86_64" / f"_fastcalls.{tag}.so")]
    assert not list((work / "other_cache").glob("*.so")), "nothing may be compiled"
    np.testing.assert_array_equal(np.load(out), native_run(oo.kernels.mediapipe(), selfie, np.load(photo)))
    # Its module against that Python's own methods: the same bytes and errors.
    face = package_file("mediapipe", "modules", "face_detection", "face_detection_short_range.tflite")
    runs = {
        setting: info_line(
            run_child(
                _BOTH_WAYS,
                setting,
                selfie,
                face,
                python=[str(other.python)],
                env=env,
                pythonpath=[target, ROOT, deps],
                cwd=work,
                timeout=900,
            )
        )
        for setting in ("", "0")
    }
    assert runs[""]["fast calls"] is True and runs["0"]["fast calls"] is False
    assert runs[""]["models compared"] == 2
    assert runs[""]["scenarios"] == runs["0"]["scenarios"]
    # Named by hand, this Python's module is refused there: not imported (its
    # init would run against the other ABI), a FastCallsError that says so.
    mine = str(target / "opaque_ops" / "prebuilt" / "x86_64" / f"{_fast_name()}.so")
    code = (
        "from opaque_ops.interpreter import fast_calls\n"
        "try:\n    fast_calls.module()\nexcept fast_calls.FastCallsError as exc:\n    print('REFUSED', exc)\n"
    )
    r = run_child(
        code, python=[str(other.python)], env={**env, "OPAQUE_OPS_FASTCALLS": mine}, pythonpath=[target, deps]
    )
    assert r.returncode == 0, r.stderr
    major, minor = sys.version_info[:2]
    assert f"built for CPython {major}.{minor}, and this is CPython {other_python.VERSION}" in r.stdout


def _installed_wheel(wheels, work, release) -> Path:
    """The aarch64 wheel installed for ``release``'s emulated Python (once per module)."""
    target = work / f"arm_site_{release.suite}"
    if not (target / "opaque_ops").is_dir():
        # pip inside the emulated Python decides whether the wheel's tag fits an aarch64 machine.
        arm.pip_install(target, str(wheels["aarch64"]), wheels=arm.wheels_dir(release), release=release)
    return target


@RELEASES
def test_aarch64_wheel_installs_and_runs_in_emulated_python(wheels, work, release, selfie, photo):
    target = _installed_wheel(wheels, work, release)
    out = work / f"selfie_wheel_arm_{release.suite}.npy"
    info = info_line(arm.run(_RUN_MODEL, "bundle", selfie, photo, out, pythonpath=[target], release=release))
    assert info["machine"] == "aarch64" and info["oo"].startswith(str(target))
    assert info["prebuilt"] == [True] * len(kernels.MEDIAPIPE)
    assert all("/prebuilt/aarch64/" in p for p in info["paths"])
    # With no compiler, the fast calls (and the compiled reader) come from the
    # wheel: the module built for this very Python.
    fast = str(target / "opaque_ops" / "prebuilt" / "aarch64" / f"_fastcalls.{release.tag}.so")
    assert info["fastcalls"] == [True, fast]
    on_x86 = native_run(oo.kernels.mediapipe(), selfie, np.load(photo))
    on_arm = np.load(out)
    assert_segments_the_person(on_x86)
    np.testing.assert_allclose(on_arm, on_x86, rtol=0, atol=SELFIE_TOLERANCE)


_BOTH_WAYS = r"""
import json, os, sys
os.environ["OPAQUE_OPS_FASTCALLS"] = sys.argv[1]   # "" (find the wheel's module) or "0" (none)
from tests.helpers.fast_call_scenarios import scenarios
from tests.helpers.model_compare import differences
from opaque_ops.interpreter import fast_calls
from opaque_ops.model import reader
out = {"fast calls": fast_calls.status()[0], "scenarios": scenarios()}
if out["fast calls"]:
    # The compiled reader (in the same module) against the Python reader, on real models.
    for path in sys.argv[2:]:
        data = open(path, "rb").read()
        compiled = reader._read_compiled(data)
        assert compiled is not None, f"the compiled reader left {path} to Python"
        saved, reader._compiled = reader._compiled, None
        python = reader._read(data)
        reader._compiled = saved
        found = differences(compiled, python)
        assert not found, found
    out["models compared"] = len(sys.argv) - 2
print("INFO " + json.dumps(out))
"""


@RELEASES
def test_aarch64_wheels_fast_calls_agree_with_the_python_methods(wheels, work, release, selfie):
    # The cross-built module under the emulated Pi: every scenario of
    # tests/helpers/fast_call_scenarios.py gives the same bytes and errors
    # with it and without it, and its compiled reader reads real models into
    # the same objects as the Python reader.
    target = _installed_wheel(wheels, work, release)
    face = package_file("mediapipe", "modules", "face_detection", "face_detection_short_range.tflite")
    path = [target, ROOT]
    runs = {
        setting: info_line(arm.run(_BOTH_WAYS, setting, selfie, face, pythonpath=path, timeout=1800, release=release))
        for setting in ("", "0")
    }
    assert runs[""]["fast calls"] is True and runs["0"]["fast calls"] is False
    assert runs[""]["models compared"] == 2
    assert runs[""]["scenarios"] == runs["0"]["scenarios"]
