"""Platform wheels with the bundled kernels prebuilt (the rest is in pyproject.toml).

By default the wheel is pure Python (``py3-none-any``) and the bundled kernels
are compiled on first use.  With ``OPAQUE_OPS_WHEEL_ARCH`` set to ``x86_64``
or ``aarch64`` (``native`` = this machine) the build also compiles every
bundled kernel for that architecture, through opaque_ops' own build path (a
cross compiler for another architecture), into ``opaque_ops/prebuilt/<arch>/``
and tags the wheel ``py3-none-manylinux_2_35_<arch>``: it needs no CPython
extension (the one it may carry, below, is optional), so one wheel serves
every Python 3 version, and the tag's glibc is that of the TFLite runtime it
runs with (pymicro-wakeword's wheels)::

    OPAQUE_OPS_WHEEL_ARCH=x86_64  pip wheel --no-deps -w dist .
    OPAQUE_OPS_WHEEL_ARCH=aarch64 pip wheel --no-deps -w dist .   # needs gcc-aarch64-linux-gnu

A native wheel (x86_64 on an x86_64 machine) also carries the fast calls
module (a CPython extension) for the Python that builds it.  Any platform
wheel also carries one for each other Python it is given: their ABI tags
(``,``-separated) and, for each in the same order, the directories of its
headers and its numpy's (``os.pathsep``-separated, one group per Python,
groups ``;``-separated); a Python the wheel has no module for builds one on
first use, or runs without.  E.g. an x86_64 wheel that also serves 3.13
(``$PY313 -c "import sysconfig; print(sysconfig.get_paths()['include'])"``
and the include directory of a numpy installed for it)::

    OPAQUE_OPS_WHEEL_ARCH=x86_64 \
    OPAQUE_OPS_WHEEL_PYTHON_TAG=cpython-313-x86_64-linux-gnu \
    OPAQUE_OPS_WHEEL_PYTHON_INCLUDE=$PY313_INCLUDE:$NUMPY313/_core/include \
    pip wheel --no-deps -w dist .

and an aarch64 one for Raspberry Pi OS bookworm's Python 3.11 and trixie's
3.13 (headers from Debian's arm64 ``libpython3.X-dev``, numpy's from its
aarch64 wheel for that Python)::

    OPAQUE_OPS_WHEEL_ARCH=aarch64 \
    OPAQUE_OPS_WHEEL_PYTHON_TAG=cpython-311-aarch64-linux-gnu,cpython-313-aarch64-linux-gnu \
    OPAQUE_OPS_WHEEL_PYTHON_INCLUDE="$BOOKWORM/usr/include/python3.11:$BOOKWORM/usr/include:$NUMPY311/_core/include;$TRIXIE/usr/include/python3.13:$TRIXIE/usr/include:$NUMPY313/_core/include" \
    pip wheel --no-deps -w dist .
"""

import os
import shutil
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHES = {"x86_64", "aarch64"}
GLIBC = "2_35"


def wheel_arch():
    arch = os.environ.get("OPAQUE_OPS_WHEEL_ARCH", "").strip()
    if not arch:
        return None
    if arch == "native":
        import platform

        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    if arch not in ARCHES:
        sys.exit(f"OPAQUE_OPS_WHEEL_ARCH={arch!r}: choose one of {', '.join(sorted(ARCHES))} or native")
    return arch


def target_pythons():
    """[(ABI tag, header directories)] of the other Pythons the wheel serves, from the environment."""
    tags = [t.strip() for t in os.environ.get("OPAQUE_OPS_WHEEL_PYTHON_TAG", "").split(",") if t.strip()]
    groups = [g for g in os.environ.get("OPAQUE_OPS_WHEEL_PYTHON_INCLUDE", "").split(";") if g.strip()]
    if len(tags) != len(groups):
        sys.exit(
            f"OPAQUE_OPS_WHEEL_PYTHON_TAG names {len(tags)} Python(s) and OPAQUE_OPS_WHEEL_PYTHON_INCLUDE "
            f"gives {len(groups)} group(s) of header directories: give one group per tag (';' between groups)"
        )
    return [(tag, [d for d in group.split(os.pathsep) if d.strip()]) for tag, group in zip(tags, groups)]


class BuildPyWithKernels(build_py):
    """build_py, then the prebuilt kernels for OPAQUE_OPS_WHEEL_ARCH (if set)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "opaque_ops", "prebuilt")
        shutil.rmtree(target, ignore_errors=True)  # never carry another arch's leftovers
        arch = wheel_arch()
        if arch:
            sys.path.insert(0, HERE)
            from opaque_ops.build.standalone import build_prebuilt

            manifest = build_prebuilt(arch, os.path.join(target, arch), target_pythons=target_pythons())
            print(f"prebuilt {len(manifest['kernels'])} kernels for {arch}")


class PlatformDistribution(Distribution):
    """Not pure when it carries native libraries: they go in platlib, the wheel's root."""

    def has_ext_modules(self):
        return bool(wheel_arch()) or super().has_ext_modules()


class PlatformWheel(bdist_wheel):
    """Tag the wheel py3-none-manylinux_2_35_<arch> when it carries prebuilt kernels."""

    def get_tag(self):
        arch = wheel_arch()
        if arch:
            return "py3", "none", f"manylinux_{GLIBC}_{arch}"
        return super().get_tag()


setup(distclass=PlatformDistribution, cmdclass={"build_py": BuildPyWithKernels, "bdist_wheel": PlatformWheel})
