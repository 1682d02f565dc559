"""SIMD clones of the bundled kernels (c/include/opaque_ops/simd.h).

Every vectorized kernel is compiled once per instruction set (AVX-512, AVX2
and the SSE2 baseline on x86_64; NEON on aarch64) and picks the best clone
the CPU has, capped by ``OPAQUE_OPS_SIMD``.  The per-kernel tests check the
results against numpy references on whatever clone this machine picks; here
every clone this machine can run, and the aarch64 build under qemu, must give
the same bits on the cases of simd_cases.py, so the references hold for all of
them.  The clone that ran is read back through ``OpLibrary.simd``.

The expected level comes from /proc/cpuinfo, not from the library's own CPU
query.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import opaque_ops.kernels as K
from opaque_ops.build import paths as _paths
from opaque_ops.build import standalone as oob
from tests.helpers import simd_cases
from tests.helpers.hostile_options import run_isolated

ROOT = Path(__file__).resolve().parents[2]
AVX512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"}

_SCRIPT = r"""
import json
import opaque_ops.kernels as K
from tests.helpers import simd_cases
libs = [K.kernel(name) for name in simd_cases.KERNELS]
print(json.dumps({"simd": sorted({lib.simd for lib in libs}), "digests": simd_cases.run_cases(libs)}))
"""


def cpu_levels() -> list[str]:
    """The clones this machine can run, best first, from the kernel's view of the CPU."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ["neon"]
    if machine not in ("x86_64", "amd64"):
        return ["generic"]
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    levels = ["sse2"]
    if "avx2" in flags:
        levels.insert(0, "avx2")
        if AVX512 <= flags:
            levels.insert(0, "avx512")
    return levels


def run_at(cap: str | None) -> dict:
    return json.loads(run_isolated(_SCRIPT, env={"OPAQUE_OPS_SIMD": cap}, timeout=600))


@pytest.fixture(scope="module")
def default_run():
    return run_at(None)


def test_default_is_the_best_clone_the_cpu_has(default_run):
    assert default_run["simd"] == [cpu_levels()[0]]
    assert len(default_run["digests"]) == len(simd_cases.cases()) >= 15


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse2"])
def test_every_clone_gives_the_same_bits(level, default_run):
    """Capped at each level: that clone where the CPU has it, else the best one it has, with the same bits.

    A clone of an instruction set the CPU lacks cannot run here (no
    emulator of AVX-512 is at hand), so its bits are compared only on a CPU
    that has it; on one that does not, the cap must still pick a clone the
    CPU can run (a clone it cannot would die with SIGILL), and that clone
    must give the same bits.
    """
    capped = run_at(level)
    levels = cpu_levels()
    want = level if level in levels else levels[0]
    assert capped["simd"] == [want]
    assert capped["digests"] == default_run["digests"]


def test_a_cap_that_names_no_level_is_ignored(default_run):
    assert run_at("avx-2")["simd"] == default_run["simd"]


def test_cases_are_not_trivial():
    """The digests compare real outputs: the cases' outputs differ from their inputs and each other."""
    digests = simd_cases.run_cases([K.kernel(n) for n in simd_cases.KERNELS])
    assert len(set(digests.values())) == len(digests)


def test_scalar_build_reports_off_and_gives_the_same_bits():
    """-DOPAQUE_OPS_SIMD_OFF (the benchmarks' scalar baseline): no clones, same results."""
    import opaque_ops as oo

    off = oo.compile_ops(_paths.kernels_dir() / "atan.c", define_macros=[("OPAQUE_OPS_SIMD_OFF", None)])
    assert off.simd == "off"
    assert simd_cases.run_cases([off], ["Atan"]) == simd_cases.run_cases([K.atan()], ["Atan"])


def test_library_without_vectorized_kernels_reports_none():
    assert K.kernel("transform_landmarks").simd is None
    assert K.atan().simd == cpu_levels()[0]
    assert set(K.mediapipe().simd) == {
        "Convolution2DTransposeBias",
        "TransformTensorBilinear",
        "MaxPoolingWithArgmax2D",
    }


# ------------------------------------------------------------ aarch64 build --

CROSS_CC = "aarch64-linux-gnu-gcc"


@pytest.mark.skipif(
    shutil.which("qemu-aarch64") is None or shutil.which(CROSS_CC) is None or oob.host_arch() != "x86_64",
    reason="needs an x86_64 host with qemu-aarch64 and aarch64-linux-gnu-gcc "
    "(apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)",
)
def test_aarch64_neon_build_matches_this_machine(tmp_path):
    """The kernels cross-built for aarch64 (NEON clone), run under qemu by c/tools/oo_run.c."""
    from tests.helpers import aarch64_python  # the runtime from pymicro-wakeword's aarch64 wheel, cached

    arm_tflite = aarch64_python.aarch64_tflite()
    arm_so = tmp_path / "kernels_arm64.so"
    assert oob.main(["--kernels", *simd_cases.KERNELS, "--target", "aarch64", "-o", str(arm_so)]) == 0
    nm = subprocess.run(
        [shutil.which("aarch64-linux-gnu-nm") or "nm", "-D", "--defined-only", arm_so], capture_output=True, text=True
    )
    assert "OpaqueOps_SimdLevel" in nm.stdout
    arm_run = tmp_path / "oo_run_arm64"
    r = subprocess.run(
        [
            CROSS_CC,
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{_paths.include_dir()}",
            ROOT / "c" / "tools" / "oo_run.c",
            "-o",
            arm_run,
            "-ldl",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr

    libs = [K.kernel(n) for n in simd_cases.KERNELS]
    import opaque_ops as oo

    for k, (label, model, inputs) in enumerate(simd_cases.cases()):
        mpath = tmp_path / f"case{k}.tflite"
        mpath.write_bytes(model)
        args = []
        for i, a in enumerate(inputs):
            p = tmp_path / f"case{k}_in{i}.bin"
            np.ascontiguousarray(a).tofile(p)
            args += ["--in", p]
        r = subprocess.run(
            [
                "qemu-aarch64",
                "-L",
                "/usr/aarch64-linux-gnu",
                arm_run,
                arm_tflite,
                mpath,
                arm_so,
                *args,
                "--out-prefix",
                tmp_path / f"case{k}_arm_",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, f"{label}: {r.stdout}{r.stderr}"
        it = oo.Interpreter(model_content=model, custom_ops=libs)
        it.allocate_tensors()
        for d, a in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], a)
        it.invoke()
        for i, d in enumerate(it.get_output_details()):
            here = np.ascontiguousarray(it.get_tensor(d["index"])).tobytes()
            arm = (tmp_path / f"case{k}_arm_{i}.bin").read_bytes()
            assert arm == here, f"{label}: output {i} differs between aarch64 and {oob.host_arch()}"
