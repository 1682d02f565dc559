"""Where the C headers, runtime glue and bundled kernels are.

In a source checkout (and an editable install) they are in ``c/`` beside the
package; a wheel carries the same tree as package data in ``opaque_ops/c``.

The functions hand out :class:`pathlib.Path` objects; the ``*_str`` ones, the
same places as ``str``, are what a process's start-up uses (loading prebuilt
kernels reads these directories), because ``import pathlib`` costs 2-3 ms of
that start-up.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

# opaque_ops/ (symlinks resolved), whose c/ (or ../c/) this finds
_PKG = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def as_path(path: str | os.PathLike) -> Path:
    """``pathlib.Path(path)``, importing pathlib only now.

    The one way a start-up module hands out a :class:`pathlib.Path` (this
    module's functions, the compile cache's, ``OpLibrary.path``): the
    ``*_str`` paths stay on the start-up path, and pathlib is loaded only by
    a caller that asks for a Path.
    """
    from pathlib import Path

    return Path(path)


def package_dir() -> Path:
    """The installed ``opaque_ops`` package directory (symlinks resolved)."""
    return as_path(_PKG)


def package_dir_str() -> str:
    """:func:`package_dir` as a ``str``."""
    return _PKG


@cache
def c_dir_str() -> str:
    """:func:`c_dir` as a ``str``."""
    candidates = (os.path.join(_PKG, "c"), os.path.join(os.path.dirname(_PKG), "c"))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "include", "opaque_ops.h")):
            return candidate
    raise FileNotFoundError(
        f"opaque_ops' C files are missing (looked in {candidates[0]} and {candidates[1]}); reinstall the package"
    )


def c_dir() -> Path:
    """Return the directory holding ``include/``, ``src/`` and ``kernels/``."""
    return as_path(c_dir_str())


def include_dir() -> Path:
    """The directory to put on a kernel's include path."""
    return as_path(include_dir_str())


def include_dir_str() -> str:
    """:func:`include_dir` as a ``str``."""
    return os.path.join(c_dir_str(), "include")


def runtime_source() -> Path:
    """The runtime glue compiled into every kernel library."""
    return as_path(runtime_source_str())


def runtime_source_str() -> str:
    """:func:`runtime_source` as a ``str``."""
    return os.path.join(c_dir_str(), "src", "opaque_ops_runtime.c")


def pure(path: str) -> str:
    """``str(PurePosixPath(path))``: extra slashes and ``.`` parts dropped, ``..`` kept (``""`` gives ``"."``)."""
    absolute = path.startswith(os.sep)
    parts = [p for p in path.split(os.sep) if p not in ("", ".")]
    if absolute:
        # POSIX keeps exactly two leading slashes as they are ("//x"); three or more are one.
        lead = "//" if path.startswith("//") and not path.startswith("///") else os.sep
        return lead + os.sep.join(parts)
    return os.sep.join(parts) or "."


def suffix(path: str) -> str:
    """``PurePath(path).suffix``: the last name's extension, ``""`` for a name such as ``.c``."""
    name = os.path.basename(path.rstrip(os.sep))
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def kernels_dir() -> Path:
    """The bundled kernel sources."""
    return as_path(kernels_dir_str())


def kernels_dir_str() -> str:
    """:func:`kernels_dir` as a ``str``."""
    return os.path.join(c_dir_str(), "kernels")


def files_named(root: str, suffix: str, rel: tuple = ()) -> list[tuple[str, ...]]:
    """What ``Path(root).rglob("*" + suffix)`` finds, as relative path parts (unsorted).

    ``os.scandir`` instead of pathlib's glob: the digests built from these
    lists (the model verdicts' code digest, a kernel's header digest) are
    computed at every process's start-up, and the glob's pattern compilation
    and path objects alone cost more than the walk.  As rglob: names ending
    in ``suffix`` at any depth, hidden ones too, through directories but not
    through symlinks to directories; a directory that cannot be read is
    skipped.
    """
    out = []
    try:
        entries = list(os.scandir(os.path.join(root, *rel)))
    except OSError:
        return out
    for e in entries:
        parts = (*rel, e.name)
        if e.name.endswith(suffix):
            out.append(parts)
        try:
            walk = e.is_dir() and not e.is_symlink()
        except OSError:
            walk = False
        if walk:
            out += files_named(root, suffix, parts)
    return out
