"""Where the C headers, runtime glue and bundled kernels are.

In a source checkout (and an editable install) they are in ``c/`` beside the
package; a wheel carries the same tree as package data in ``opaque_ops/c``.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # opaque_ops/, whose c/ (or ../c/) this finds


def package_dir() -> Path:
    """The installed ``opaque_ops`` package directory (symlinks resolved)."""
    return _PKG


@cache
def c_dir() -> Path:
    """Return the directory holding ``include/``, ``src/`` and ``kernels/``."""
    for candidate in (_PKG / "c", _PKG.parent / "c"):
        if (candidate / "include" / "opaque_ops.h").is_file():
            return candidate
    raise FileNotFoundError(
        f"opaque_ops' C files are missing (looked in {_PKG / 'c'} and {_PKG.parent / 'c'}); reinstall the package"
    )


def include_dir() -> Path:
    """The directory to put on a kernel's include path."""
    return c_dir() / "include"


def runtime_source() -> Path:
    """The runtime glue compiled into every kernel library."""
    return c_dir() / "src" / "opaque_ops_runtime.c"


def kernels_dir() -> Path:
    """The bundled kernel sources."""
    return c_dir() / "kernels"


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
