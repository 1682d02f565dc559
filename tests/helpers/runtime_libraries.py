"""Real TFLite runtime files for the runtime tests: the installed wheel's, and other architectures' from PyPI."""

from __future__ import annotations

import base64
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PYMICRO = "pymicro-wakeword"
PYMICRO_VERSION = "2.5.0"
PYMICRO_MEMBER = "pymicro_wakeword/lib/libtensorflowlite_c.so"
# pip's --platform takes exact tags: list the ones each wheel is published under.
PLATFORMS = {
    "x86_64": ["manylinux_2_35_x86_64"],
    "aarch64": ["manylinux_2_35_aarch64"],
    "armv7l": ["manylinux_2_35_armv7l"],
}


def wheel_library() -> Path:
    """The pymicro-wakeword wheel's libtensorflowlite_c.so as installed (found without importing it)."""
    spec = importlib.util.find_spec("pymicro_wakeword")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pymicro-wakeword (the TFLite C library) is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "lib" / "libtensorflowlite_c.so"


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "opaque_ops" / "wheels"


def downloaded_wheel(arch: str) -> Path:
    """pymicro-wakeword 2.5.0's wheel for ``arch``, downloaded once with pip (skips if offline)."""
    d = _cache() / arch
    d.mkdir(parents=True, exist_ok=True)
    found = sorted(d.glob(f"pymicro_wakeword-{PYMICRO_VERSION}-*{arch}.whl"))
    if found:
        return found[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        f"{PYMICRO}=={PYMICRO_VERSION}",
        "-d",
        str(d),
    ]
    for tag in PLATFORMS[arch]:
        cmd += ["--platform", tag]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = sorted(d.glob(f"pymicro_wakeword-{PYMICRO_VERSION}-*{arch}.whl"))
    if r.returncode != 0 or not found:
        pytest.skip(
            f"could not download the {arch} {PYMICRO} wheel: " + (r.stderr.strip().splitlines() or ["no output"])[-1]
        )
    return found[0]


def foreign_library(arch: str) -> Path:
    """The libtensorflowlite_c.so of pymicro-wakeword's ``arch`` wheel, extracted once."""
    lib = _cache() / arch / "libtensorflowlite_c.so"
    if not lib.is_file():
        with zipfile.ZipFile(downloaded_wheel(arch)) as z:
            tmp = lib.with_suffix(".tmp")
            tmp.write_bytes(z.read(PYMICRO_MEMBER))
            os.replace(tmp, lib)
    return lib


def record_digest(wheel: Path, member: str) -> tuple[str, int]:
    """``(hex sha256, size)`` of ``member`` as the wheel's own RECORD states them."""
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        for line in z.read(record).decode().splitlines():
            name, digest, size = line.rsplit(",", 2)
            if name == member:
                algo, b64 = digest.split("=", 1)
                assert algo == "sha256"
                raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
                return raw.hex(), int(size)
    raise AssertionError(f"{member} is not in {wheel.name}'s RECORD")


def child_env(**overrides) -> dict[str, str]:
    """This environment without $OPAQUE_OPS_TFLITE_LIB (CI's second pass sets it), plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if k != "OPAQUE_OPS_TFLITE_LIB"}
    env.update({k: str(v) for k, v in overrides.items()})
    return env
