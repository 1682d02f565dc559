"""An emulated Raspberry Pi for the tests: aarch64 CPython 3.11 under qemu-user.

What a Raspberry Pi OS (bookworm, 64-bit) user has, built from registry
packages only:

* Debian's arm64 ``python3.11-minimal`` and ``libpython3.11-stdlib`` (and what
  they depend on, ``libc6`` included, plus ``libstdc++6`` for the TFLite
  runtime), fetched with ``apt-get download`` through a private apt
  configuration (no change to the machine's apt setup, no root needed) and
  unpacked into a sysroot with ``dpkg-deb -x``;
* the aarch64 wheels of numpy, cffi, pycparser, flatbuffers and
  pymicro-wakeword (the runtime), fetched by the host's pip with
  ``--platform`` and installed by pip running *inside* the emulated Python;
* no compiler: every run gets ``PATH=/nonexistent`` and a clean environment.

The sysroot and the wheels are kept under ``~/.cache/opaque_ops/aarch64-python``
(``$XDG_CACHE_HOME`` respected), a directory that follows the compile cache's
ownership rules (``opaque_ops.build.store.private_dir``): its Python is executed.
A stamp file names what was built; a changed recipe rebuilds.  Building it
the first time takes well under a minute (about 15 MB of packages).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest

from opaque_ops.build import store as _cache
from tests.helpers.child_process import run_child

# Debian's package names (bookworm: Python 3.11, glibc 2.36).
PACKAGES = ["python3.11-minimal", "libpython3.11-stdlib", "libstdc++6"]
# Pulled in by the recursion but never used by a Python that only imports.
NOT_NEEDED = {
    "dpkg",
    "install-info",
    "perl",
    "perl-base",
    "perl-modules-5.36",
    "libperl5.36",
    "libgdbm-compat4",
    "tar",
    "mailcap",
}
# manylinux_2_35 alone finds no numpy: list the older tags a glibc 2.36 system accepts too.
PLATFORMS = [
    "manylinux_2_35_aarch64",
    "manylinux_2_34_aarch64",
    "manylinux_2_28_aarch64",
    "manylinux_2_27_aarch64",
    "manylinux_2_17_aarch64",
    "manylinux2014_aarch64",
]
RECIPE = 1  # bump when the recipe above changes


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _cache.private_dir(Path(base) / "opaque_ops" / "aarch64-python", "aarch64 test sysroot")


def qemu() -> str:
    exe = shutil.which("qemu-aarch64")
    if exe is None:
        pytest.skip("qemu-aarch64 is not installed (apt-get install qemu-user)")
    return exe


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} ... failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


_held = threading.local()


@contextlib.contextmanager
def _locked(root: Path):
    """Serialize builders across processes (a file lock); re-entrant within one thread."""
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _held.depth = 1
        try:
            yield
        finally:
            _held.depth = 0


def _apt_options(work: Path) -> list[str]:
    state, cache = work / "state", work / "cache"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    return [
        f"-o=Dir::State={state}",
        f"-o=Dir::State::status={state / 'status'}",
        f"-o=Dir::Cache={cache}",
        "-o=APT::Architecture=arm64",
        "-o=APT::Architectures::=arm64",
        "-o=Debug::NoLocking=1",
        "-o=APT::Sandbox::User=root",
        "-o=Acquire::Languages=none",
    ]


def _built_once(final: Path, stamp: dict, what: str, fill) -> Path:
    """``final``, built from arm64 Debian packages by ``fill(apt options, work dir, tree)`` once per ``stamp``.

    The packages come through a private apt configuration (no change to the
    machine's apt setup); the tree replaces ``final`` in one rename, with
    ``stamp`` in it.  Skipped where apt-get and dpkg-deb are missing.
    """
    root = final.parent
    with _locked(root):
        if (final / "STAMP").is_file() and json.loads((final / "STAMP").read_text()) == stamp:
            return final
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            pytest.skip(f"{what} needs apt-get and dpkg-deb (Debian/Ubuntu)")
        with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
            tmp = Path(tmp)
            opts = _apt_options(tmp / "apt")
            _run(["apt-get", *opts, "-qq", "update"])
            tree = tmp / "tree"
            tree.mkdir()
            fill(opts, tmp, tree)
            (tree / "STAMP").write_text(json.dumps(stamp))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tree, final)
    return final


def _unpack_debs(opts: list[str], names, tmp: Path, dest: Path) -> None:
    """Download the arm64 packages ``names`` and unpack each into ``dest``."""
    debs = tmp / "debs"
    debs.mkdir()
    _run(["apt-get", *opts, "-qq", "download", *names], cwd=debs)
    dest.mkdir(parents=True, exist_ok=True)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", deb, dest])


def sysroot() -> Path:
    """The unpacked arm64 Debian Python (built once, then reused)."""

    def fill(opts, tmp, tree):
        deps = _run(
            [
                "apt-cache",
                *opts,
                "depends",
                "--recurse",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
                *PACKAGES,
            ]
        ).stdout
        names = sorted(
            {line.strip() for line in deps.splitlines() if line and not line[0].isspace() and not line.startswith("<")}
            - NOT_NEEDED
        )
        _unpack_debs(opts, names, tmp, tree)

    stamp = {"recipe": RECIPE, "packages": PACKAGES}
    return _built_once(cache_root() / "sysroot", stamp, "building the aarch64 Python", fill)


# The emulated Python's ABI tag, and the Debian package with its headers.
PYTHON_TAG = "cpython-311-aarch64-linux-gnu"
HEADERS_PACKAGE = "libpython3.11-dev"


def python_headers() -> tuple[str, list[Path]]:
    """The emulated Python's ABI tag and the header directories a cross build of an extension for it needs.

    Debian's arm64 ``libpython3.11-dev`` (its headers only; its dispatching
    ``pyconfig.h`` includes ``aarch64-linux-gnu/python3.11/pyconfig.h``, so
    ``usr/include`` is on the path too) and numpy's headers from the same
    aarch64 numpy wheel the emulated Python installs.
    """
    numpy_version = host_versions()["numpy"]
    wheels = wheels_dir()

    def fill(opts, tmp, tree):
        _unpack_debs(opts, [HEADERS_PACKAGE], tmp, tree / "debian")
        [numpy_wheel] = sorted(wheels.glob(f"numpy-{numpy_version}-*.whl"))
        with zipfile.ZipFile(numpy_wheel) as z:
            for name in z.namelist():
                if name.startswith("numpy/_core/include/"):
                    z.extract(name, tree / "numpy")

    stamp = {"recipe": RECIPE, "package": HEADERS_PACKAGE, "numpy": numpy_version}
    final = _built_once(cache_root() / "headers", stamp, "fetching the aarch64 Python headers", fill)
    include = final / "debian" / "usr" / "include"
    return PYTHON_TAG, [include / "python3.11", include, final / "numpy" / "numpy" / "_core" / "include"]


def python_cmd(root: Path) -> list[str]:
    return [qemu(), "-L", str(root), str(root / "usr" / "bin" / "python3.11")]


def run(script: str, *args, pythonpath=(), cwd=None, timeout=900) -> subprocess.CompletedProcess:
    """Run ``script`` in the emulated Python, with no compiler and a clean environment."""
    root = sysroot()
    env = {
        "PATH": "/nonexistent",
        "HOME": str(cache_root() / "home"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("OPAQUE_OPS_CACHE_DIR",):
        if name in os.environ:
            env[name] = os.environ[name]
    return run_child(
        script,
        *args,
        python=python_cmd(root),
        base_env=env,
        pythonpath=list(pythonpath),
        cwd=cwd or root,
        timeout=timeout,
    )


def host_versions() -> dict[str, str]:
    """The host's versions of the packages the emulated Python gets (same numpy on both sides)."""
    from importlib.metadata import version

    return {name: version(name) for name in ("numpy", "cffi", "pycparser", "flatbuffers", "pymicro-wakeword")}


def download(dest: Path, *requirements) -> None:
    """Fetch aarch64 wheels (with their dependencies) with the host's pip."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--dest",
        dest,
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    try:
        _run(cmd + list(requirements))
    except RuntimeError as exc:
        pytest.skip(f"could not download aarch64 wheels: {str(exc)[-400:]}")


def wheels_dir() -> Path:
    """aarch64 wheels of the dependencies, and pip itself (kept in the cache)."""
    root = cache_root()
    wheels = root / "wheels"
    with _locked(root):
        reqs = [f"{n}=={v}" for n, v in host_versions().items()]
        stamp = wheels / "STAMP"
        if not (stamp.is_file() and json.loads(stamp.read_text()) == reqs):
            wheels.mkdir(exist_ok=True)
            download(wheels, *reqs, "pip")
            stamp.write_text(json.dumps(reqs))
    return wheels


def pip_install(target: Path, *requirements, wheels: Path, find_links=()) -> subprocess.CompletedProcess:
    """``pip install --target`` run by the emulated Python, offline from ``wheels`` (see :func:`wheels_dir`)."""
    pip_wheel = sorted(wheels.glob("pip-*.whl"))[-1]
    links = [a for d in (wheels, *find_links) for a in ("--find-links", str(d))]
    # pip runs from its wheel, put on the emulated Python's PYTHONPATH.
    r = run(
        "import runpy, sys; sys.argv[0] = 'pip'; runpy.run_module('pip', run_name='__main__')",
        "install",
        "-q",
        "--no-index",
        *links,
        "--target",
        target,
        "--no-compile",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
        "--no-cache-dir",
        *requirements,
        pythonpath=[pip_wheel],
    )
    if r.returncode != 0:
        raise RuntimeError(f"pip inside the emulated Python failed:\n{r.stdout}\n{r.stderr}")
    return r


def deps_site() -> Path:
    """numpy, cffi, flatbuffers, pymicro-wakeword installed for the emulated Python (cached)."""
    root = cache_root()
    site = root / "site-deps"
    reqs = [f"{n}=={v}" for n, v in host_versions().items()]
    wheels = wheels_dir()
    with _locked(root):
        stamp = site / "STAMP"
        if not (stamp.is_file() and json.loads(stamp.read_text()) == reqs):
            if site.exists():
                shutil.rmtree(site)
            tmp = root / ".site-deps-tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            pip_install(tmp, *reqs, wheels=wheels)
            (tmp / "STAMP").write_text(json.dumps(reqs))
            os.replace(tmp, site)
    return site


def aarch64_tflite() -> Path:
    """The aarch64 libtensorflowlite_c.so from the cached pymicro-wakeword wheel (for C runners)."""
    import zipfile

    wheels = wheels_dir()
    root = cache_root()
    lib = root / "lib" / "libtensorflowlite_c.so"
    with _locked(root):
        [wheel] = sorted(wheels.glob("pymicro_wakeword-*.whl"))[-1:]
        if not lib.is_file() or lib.stat().st_mtime < wheel.stat().st_mtime:
            lib.parent.mkdir(exist_ok=True)
            with zipfile.ZipFile(wheel) as z:
                tmp = lib.with_suffix(".tmp")
                tmp.write_bytes(z.read("pymicro_wakeword/lib/libtensorflowlite_c.so"))
                os.replace(tmp, lib)
    return lib
