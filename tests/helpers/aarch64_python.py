"""An emulated Raspberry Pi for the tests: aarch64 CPython under qemu-user.

What a Raspberry Pi OS (64-bit) user has, for each release the tests cover
(:data:`BOOKWORM`: Debian 12, CPython 3.11; :data:`TRIXIE`: Debian 13,
CPython 3.13, the current Raspberry Pi OS), built from registry packages only:

* Debian's arm64 ``python3.X-minimal`` and ``libpython3.X-stdlib`` (and what
  they depend on, ``libc6`` included, plus ``libstdc++6`` for the TFLite
  runtime), fetched with ``apt-get download`` through a private apt
  configuration with its own package list (no change to the machine's apt
  setup, no root needed) and unpacked into a sysroot with ``dpkg-deb -x``;
* the aarch64 wheels of numpy, cffi, pycparser, flatbuffers and
  pymicro-wakeword (the runtime), fetched by the host's pip with
  ``--platform`` and installed by pip running *inside* the emulated Python;
* no compiler: every run gets ``PATH=/nonexistent`` and a clean environment.

The sysroot and the wheels are kept under ``~/.cache/opaque_ops/aarch64-python/<release>``
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
from typing import NamedTuple

import pytest

from opaque_ops.build import store as _cache
from tests.helpers.child_process import run_child


class Release(NamedTuple):
    """A Raspberry Pi OS (64-bit) release: the Debian release it is built on, and its CPython."""

    suite: str  # Debian's name, also the cache directory's
    python: str  # "3.11"

    @property
    def packages(self) -> list[str]:
        """The arm64 packages the sysroot is made from (with what they depend on)."""
        return [f"python{self.python}-minimal", f"libpython{self.python}-stdlib", "libstdc++6"]

    @property
    def headers_package(self) -> str:
        """The Debian package with the Python's headers (a cross build of an extension needs them)."""
        return f"libpython{self.python}-dev"

    @property
    def tag(self) -> str:
        """The Python's ABI tag, as its extension modules' file names carry it."""
        return f"cpython-{self.python.replace('.', '')}-aarch64-linux-gnu"

    @property
    def abi(self) -> str:
        """pip's ``--abi`` for the Python."""
        return "cp" + self.python.replace(".", "")


BOOKWORM = Release("bookworm", "3.11")  # glibc 2.36
TRIXIE = Release("trixie", "3.13")  # glibc 2.41
RELEASES = (BOOKWORM, TRIXIE)

# Pulled in by the recursion but never used by a Python that only imports
# (perl's versioned packages by prefix: each release has its own version).
NOT_NEEDED = {"dpkg", "install-info", "perl", "perl-base", "libgdbm-compat4", "tar", "mailcap"}
NOT_NEEDED_PREFIXES = ("perl-modules-", "libperl")
# Debian's archive, signed by the keyring Debian and Ubuntu ship
# (debian-archive-keyring); only the main component is needed.
ARCHIVE = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# manylinux_2_35 alone finds no numpy: list the older tags a glibc 2.36 system accepts too.
PLATFORMS = [
    "manylinux_2_35_aarch64",
    "manylinux_2_34_aarch64",
    "manylinux_2_28_aarch64",
    "manylinux_2_27_aarch64",
    "manylinux_2_17_aarch64",
    "manylinux2014_aarch64",
]
RECIPE = 3  # bump when the recipe above changes


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _cache.private_dir(Path(base) / "opaque_ops" / "aarch64-python", "aarch64 test sysroot")


def release_root(release: Release) -> Path:
    """The release's own directory under :func:`cache_root` (sysroot, headers, wheels, site)."""
    return _cache.private_dir(cache_root() / release.suite, f"aarch64 test sysroot ({release.suite})")


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


def _apt_options(work: Path, release: Release) -> list[str]:
    state, cache = work / "state", work / "cache"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    # The release's own package list: the machine's apt sources name its own
    # release (or none of Debian's, on Ubuntu), not the Pi's.
    sources = work / "sources.list"
    sources.write_text(f"deb [arch=arm64 signed-by={KEYRING}] {ARCHIVE} {release.suite} main\n")
    return [
        f"-o=Dir::Etc::SourceList={sources}",
        "-o=Dir::Etc::SourceParts=/nonexistent",
        f"-o=Dir::State={state}",
        f"-o=Dir::State::status={state / 'status'}",
        f"-o=Dir::Cache={cache}",
        "-o=APT::Architecture=arm64",
        "-o=APT::Architectures::=arm64",
        "-o=Debug::NoLocking=1",
        "-o=APT::Sandbox::User=root",
        "-o=Acquire::Languages=none",
    ]


def _built_once(final: Path, release: Release, stamp: dict, what: str, fill) -> Path:
    """``final``, built from arm64 Debian packages by ``fill(apt options, work dir, tree)`` once per ``stamp``.

    The packages come through a private apt configuration (no change to the
    machine's apt setup); the tree replaces ``final`` in one rename, with
    ``stamp`` in it.  Skipped where apt-get and dpkg-deb are missing.
    """
    with _locked(cache_root()):
        if (final / "STAMP").is_file() and json.loads((final / "STAMP").read_text()) == stamp:
            return final
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            pytest.skip(f"{what} needs apt-get and dpkg-deb (Debian/Ubuntu)")
        if not os.path.isfile(KEYRING):
            pytest.skip(f"{what} needs Debian's archive keyring {KEYRING} (apt-get install debian-archive-keyring)")
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-") as tmp:
            tmp = Path(tmp)
            opts = _apt_options(tmp / "apt", release)
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


def sysroot(release: Release = BOOKWORM) -> Path:
    """The unpacked arm64 Debian Python of ``release`` (built once, then reused)."""

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
                *release.packages,
            ]
        ).stdout
        names = sorted(
            name
            for name in {
                line.strip()
                for line in deps.splitlines()
                if line and not line[0].isspace() and not line.startswith("<")
            }
            if name not in NOT_NEEDED and not name.startswith(NOT_NEEDED_PREFIXES)
        )
        _unpack_debs(opts, names, tmp, tree)
        # Since trixie, Debian's packages put everything under /usr (merged
        # /usr) and the system's /lib -> usr/lib links come from the
        # installer, which a sysroot does not run; the loader's path
        # (/lib/ld-linux-aarch64.so.1) needs them.
        for top in ("lib", "bin", "sbin"):
            if not (tree / top).exists() and (tree / "usr" / top).is_dir():
                (tree / top).symlink_to(Path("usr") / top)

    stamp = {"recipe": RECIPE, "release": release._asdict(), "packages": release.packages}
    return _built_once(release_root(release) / "sysroot", release, stamp, "building the aarch64 Python", fill)


def python_headers(release: Release = BOOKWORM) -> tuple[str, list[Path]]:
    """The emulated Python's ABI tag and the header directories a cross build of an extension for it needs.

    Debian's arm64 ``libpython3.X-dev`` (its headers only; its dispatching
    ``pyconfig.h`` includes ``aarch64-linux-gnu/python3.X/pyconfig.h``, so
    ``usr/include`` is on the path too) and numpy's headers from the same
    aarch64 numpy wheel the emulated Python installs.
    """
    numpy_version = host_versions()["numpy"]
    wheels = wheels_dir(release)

    def fill(opts, tmp, tree):
        _unpack_debs(opts, [release.headers_package], tmp, tree / "debian")
        [numpy_wheel] = sorted(wheels.glob(f"numpy-{numpy_version}-*.whl"))
        with zipfile.ZipFile(numpy_wheel) as z:
            for name in z.namelist():
                if name.startswith("numpy/_core/include/"):
                    z.extract(name, tree / "numpy")

    stamp = {"recipe": RECIPE, "package": release.headers_package, "numpy": numpy_version}
    final = _built_once(release_root(release) / "headers", release, stamp, "fetching the aarch64 Python headers", fill)
    include = final / "debian" / "usr" / "include"
    return release.tag, [include / f"python{release.python}", include, final / "numpy" / "numpy" / "_core" / "include"]


# A Raspberry Pi 4's CPU.  Also what keeps trixie fast enough to test: its
# packages are built with branch protection, and qemu's default CPU ("max")
# has pointer authentication, which it emulates slowly (numpy's import took
# 13.5 s instead of 2 s); on a Cortex-A72, as on a Pi 4 or 5, those
# instructions are no-ops.
CPU = "cortex-a72"


def python_cmd(root: Path, release: Release = BOOKWORM) -> list[str]:
    return [qemu(), "-cpu", CPU, "-L", str(root), str(root / "usr" / "bin" / f"python{release.python}")]


def run(
    script: str, *args, pythonpath=(), cwd=None, timeout=900, release: Release = BOOKWORM
) -> subprocess.CompletedProcess:
    """Run ``script`` in ``release``'s emulated Python, with no compiler and a clean environment."""
    root = sysroot(release)
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
        python=python_cmd(root, release),
        base_env=env,
        pythonpath=list(pythonpath),
        cwd=cwd or root,
        timeout=timeout,
    )


def host_versions() -> dict[str, str]:
    """The host's versions of the packages the emulated Python gets (same numpy on both sides)."""
    from importlib.metadata import version

    return {name: version(name) for name in ("numpy", "cffi", "pycparser", "flatbuffers", "pymicro-wakeword")}


def requirements(python: str) -> list[str]:
    """What a Python of version ``python`` ("3.13") installs beside opaque_ops: the host's versions.

    From 3.12 on, opaque_ops also depends on setuptools (cffi's compile step
    needs it once the standard library has no distutils; pyproject.toml).
    """
    from importlib.metadata import version

    reqs = [f"{n}=={v}" for n, v in host_versions().items()]
    if tuple(map(int, python.split("."))) >= (3, 12):
        reqs.append(f"setuptools=={version('setuptools')}")
    return reqs


def download(dest: Path, release: Release, *requirements) -> None:
    """Fetch aarch64 wheels for ``release``'s Python (with their dependencies) with the host's pip."""
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
        release.python,
        "--implementation",
        "cp",
        "--abi",
        release.abi,
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


def wheels_dir(release: Release = BOOKWORM) -> Path:
    """aarch64 wheels of the dependencies for ``release``'s Python, and pip itself (kept in the cache)."""
    wheels = release_root(release) / "wheels"
    with _locked(cache_root()):
        reqs = requirements(release.python)
        stamp = wheels / "STAMP"
        if not (stamp.is_file() and json.loads(stamp.read_text()) == reqs):
            wheels.mkdir(exist_ok=True)
            download(wheels, release, *reqs, "pip")
            stamp.write_text(json.dumps(reqs))
    return wheels


def pip_install(
    target: Path, *requirements, wheels: Path, find_links=(), release: Release = BOOKWORM
) -> subprocess.CompletedProcess:
    """``pip install --target`` run by ``release``'s emulated Python, offline from ``wheels`` (:func:`wheels_dir`)."""
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
        release=release,
    )
    if r.returncode != 0:
        raise RuntimeError(f"pip inside the emulated Python failed:\n{r.stdout}\n{r.stderr}")
    return r


def deps_site(release: Release = BOOKWORM) -> Path:
    """numpy, cffi, flatbuffers, pymicro-wakeword installed for ``release``'s emulated Python (cached)."""
    root = release_root(release)
    site = root / "site-deps"
    reqs = requirements(release.python)
    wheels = wheels_dir(release)
    with _locked(cache_root()):
        stamp = site / "STAMP"
        if not (stamp.is_file() and json.loads(stamp.read_text()) == reqs):
            if site.exists():
                shutil.rmtree(site)
            tmp = root / ".site-deps-tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            pip_install(tmp, *reqs, wheels=wheels, release=release)
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
