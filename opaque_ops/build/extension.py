"""The fast calls extension (``c/src/fastcalls.c``, ``c/src/modelreader.c``): its sources, its build and its prebuilt name.

It is the one CPython extension of opaque_ops, and optional: the Python
methods it speeds up stay (:mod:`opaque_ops.interpreter.fast_calls` loads
it).  It comes out of the kernels' build path (:func:`.compiler.build`),
for the running Python and numpy, into the compile cache or, for a platform
wheel, beside the prebuilt kernels (:func:`.standalone.build_prebuilt`).
"""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from typing import TYPE_CHECKING

from . import paths as _paths

if TYPE_CHECKING:
    from . import compiler as _cbuild


# Paths as str: the first Interpreter of every process checks the prebuilt
# module against these files, and pathlib would cost that start-up 2-3 ms.
def source() -> str:
    """The C source of the fast calls module (its module definition)."""
    return os.path.join(_paths.c_dir_str(), "src", "fastcalls.c")


def sources() -> list[str]:
    """Every C file the module is built from: the fast calls, the compiled model reader and the Ctrl-C guard."""
    src = os.path.join(_paths.c_dir_str(), "src")
    return [source(), os.path.join(src, "modelreader.c"), os.path.join(src, "sigint_guard.c")]


def running_tag() -> str:
    """The running Python's ABI tag, as its extension modules' names carry it: ``cpython-311-x86_64-linux-gnu``."""
    suffix = EXTENSION_SUFFIXES[0]  # the interpreter's own tag first (sysconfig's EXT_SUFFIX, cheaper)
    return suffix[1 : -len(".so")] if suffix.startswith(".") and suffix.endswith(".so") else ""


def prebuilt_name(tag: str | None = None) -> str:
    """Its file stem among prebuilt libraries, one per Python ABI: ``_fastcalls.cpython-311-x86_64-linux-gnu``.

    ``tag``: the ABI tag of another Python (a wheel built for it); default: the running one's.
    """
    tag = running_tag() if tag is None else tag
    return "_fastcalls." + tag if tag else "_fastcalls"


def build_spec(
    compiler: list[str] | None = None, *, lookup_only: bool = False, python_include: list[str] | None = None
) -> _cbuild.BuildSpec:
    """What the module is built from, for the running Python and numpy (or the one ``python_include`` names).

    ``lookup_only``: a spec for its cache key alone, which does not depend on
    the compiler; finding the compiler (a walk of ``PATH``) is left to a build.
    ``python_include``: the header directories of another Python and its
    numpy, for a cross build (:func:`.standalone.build_prebuilt`).
    """
    # Imported here: a start-up that loads the prebuilt module never builds one.
    from . import compiler as _cbuild

    return _cbuild.BuildSpec(
        compiler=[] if lookup_only else (compiler or _cbuild.native_compiler()),
        sources=sources(),
        extension=True,
        label="building the fast calls (c/src/fastcalls.c, modelreader.c, sigint_guard.c)",
        python_include=None if python_include is None else [str(d) for d in python_include],
    )
