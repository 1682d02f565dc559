"""A 32-bit ARM (armhf, Raspberry Pi OS 32-bit) Python to run under qemu-arm.

Debian bookworm's armhf packages of CPython 3.11, numpy and cffi are
downloaded with apt (a private package list: the system's apt configuration
and dpkg database are not touched) and unpacked into a sysroot that
``qemu-arm -L`` runs.  No numpy wheel exists on PyPI for armv7l, which is
why Debian's packages are used.  The sysroot is cached next to the wheels.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.child_process import run_child

# What `import opaque_ops`, numpy and cffi's ABI mode need at run time
# (apt-cache depends --recurse, less what the interpreter never loads).
PACKAGES = [
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libssl3",
    "libuuid1",
    "libcrypt1",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "libblas3",
    "liblapack3",
    "libgfortran5",
    "libgomp1",
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "python3-minimal",
    "libpython3-stdlib",
    "python3",
    "python3.11",
    "python3-numpy",
    "python3-cffi-backend",
    "python3-cffi",
    "python3-pycparser",
    "python3-ply",
]
MULTIARCH = "arm-linux-gnueabihf"


def _cache() -> Path:
    # Its Python is executed: the compile cache's ownership rules apply (0700, ours only).
    from opaque_ops.build.store import private_dir

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return private_dir(base / "opaque_ops" / "armhf", "armhf test sysroot")


def _apt_options(work: Path) -> list[str]:
    return [
        "-o",
        "APT::Architecture=armhf",
        "-o",
        "APT::Architectures::=armhf",
        "-o",
        f"Dir::State::Lists={work / 'lists'}",
        "-o",
        f"Dir::Cache={work / 'cache'}",
        "-o",
        "Dir::State::status=/dev/null",
        "-o",
        "Debug::NoLocking=1",
    ]


def sysroot() -> Path:
    """The unpacked armhf sysroot (built once; skips when apt or qemu-arm is missing)."""
    root = _cache() / "root"
    done = root / ".complete"
    if done.is_file():
        return root
    if shutil.which("qemu-arm") is None:
        pytest.skip("needs qemu-arm (apt-get install qemu-user)")
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs Debian's apt-get and dpkg-deb to fetch the armhf Python packages")
    work = _cache()
    (work / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (work / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    debs = work / "debs"
    debs.mkdir(exist_ok=True)
    opts = _apt_options(work)
    # The exit status is ignored: an unreachable extra suite (updates,
    # security) fails the update while the main index is there.
    subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=600)
    r = subprocess.run(
        ["apt-get", *opts, "download", *[p + ":armhf" for p in PACKAGES]],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=debs,
    )
    if r.returncode != 0:
        pytest.skip(
            "could not download Debian's armhf packages: " + (r.stderr.strip().splitlines() or ["no output"])[-1]
        )
    tmp = work / "root.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    # update-alternatives would make these links on a real system.
    lib = tmp / "usr" / "lib" / MULTIARCH
    for name in ("blas", "lapack"):
        link = lib / f"lib{name}.so.3"
        if not link.exists():
            link.symlink_to(f"{name}/lib{name}.so.3")
    # flatbuffers is pure Python: the host's copy, of the version opaque_ops requires, serves.
    spec = importlib.util.find_spec("flatbuffers")
    pure = tmp / "opt" / "pure"
    pure.mkdir(parents=True)
    shutil.copytree(Path(list(spec.submodule_search_locations)[0]), pure / "flatbuffers")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    done.write_text("ok\n")
    return root


def run(code: str, *pythonpath: str | os.PathLike, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``code`` with the armhf Python under qemu-arm."""
    root = sysroot()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPAQUE_OPS_TFLITE_LIB", "PYTHON"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the host's __pycache__ is not the guest's business
    # The fast calls module the session built is an x86_64 one; the guest has no compiler for its own.
    env["OPAQUE_OPS_FASTCALLS"] = "0"
    return run_child(
        code,
        python=["qemu-arm", "-L", str(root), str(root / "usr" / "bin" / "python3.11")],
        base_env=env,
        pythonpath=[*pythonpath, root / "opt" / "pure"],
        cwd=None,
        timeout=timeout,
    )
