"""What the caches hold, and emptying them: ``opaque-ops cache`` and ``opaque-ops cache clear``.

The compile cache (:mod:`opaque_ops.build.store`) keeps every library it ever built, one per
source, compiler and Python, and the verdict cache (:mod:`opaque_ops.model.cache`)
keeps up to 512 model records: on a machine that tries many kernel versions
the first grows without end.  Both are caches: anything removed is built or
checked again at its next use, so clearing is always safe for correctness
(but a library can be built again only where a C compiler is installed; a
platform wheel's prebuilt libraries are not in the cache).

What counts as the caches' own, and is the only thing ever removed: a file
whose name has the form opaque_ops gives its entries (``<key>-<key>-<digest>.so``
for a library, ``compiler-<key>.note`` memos, ``<key>-<key>-<digest>.rec``
verdict records, and ``.json`` ones of an earlier format),
and temporary files and build directories (``.tmp-*``, ``.build-*``) left by a
process that died, once they are an hour old (a younger one may belong to a
build that is running).  A file of any other name is left alone, so that a
cache directory pointed at by mistake at a directory of other files
(``$OPAQUE_OPS_CACHE_DIR=~``) loses nothing.  Removing a library that a
running process has loaded does not disturb that process (Linux keeps the
mapping); a process looking it up at that moment builds it again.  The
directories are checked as the caches check them before any use
(:func:`opaque_ops.build.store.private_dir_str`): one that others may write, or that another
user owns, is refused with :class:`~opaque_ops.errors.CacheError`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Iterator
from typing import NamedTuple

from .build import store as _store
from .errors import CacheError

# A temporary file or build directory younger than this may belong to a build that is running.
STALE_AFTER_S = 3600.0
_HEX = frozenset("0123456789abcdef")


class Entry(NamedTuple):
    """One file or directory of a cache: what it is (``kind``), its ``path``, ``size`` (bytes) and ``mtime``."""

    kind: str
    path: str
    size: int
    mtime: float


class Area(NamedTuple):
    """One cache directory and its entries."""

    name: str
    directory: str
    entries: list


def _is_hex(s: str) -> bool:
    return bool(s) and set(s) <= _HEX


def kind_of(name: str) -> str | None:
    """What the cache entry called ``name`` is: "library", "note", "record", "temporary", or None (not ours)."""
    if name.endswith(".so"):
        parts = name[: -len(".so")].split("-")
        return "library" if len(parts) == 3 and all(_is_hex(p) for p in parts) else None
    if name.startswith("compiler-") and name.endswith(".note"):  # the compilers' identities (compiler.py)
        return "note" if _is_hex(name[len("compiler-") : -len(".note")]) else None
    if name.endswith((".rec", ".json")):
        parts = name.rsplit(".", 1)[0].split("-")
        return "record" if len(parts) == 3 and all(_is_hex(p) for p in parts) else None
    if name.startswith((".tmp-", ".build-")):
        return "temporary"
    return None


def _size(path: str, st: os.stat_result) -> int:
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    for top, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, f)).st_size
    return total


def _entries(directory: str, kinds: tuple[str, ...]) -> Iterator[Entry]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CacheError(f"cannot read cache directory {directory}: {exc.strerror or exc}") from None
    for name in sorted(names):
        kind = kind_of(name)
        if kind not in kinds:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # removed by a concurrent process
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            continue  # not something this user's opaque_ops wrote: left alone
        if kind != "temporary" and not stat.S_ISREG(st.st_mode):
            continue
        yield Entry(kind, path, _size(path, st), st.st_mtime)


def _checked(directory: str, what: str) -> str | None:
    """``directory``, absolute, if it exists and passes the caches' rules; None if it does not exist."""
    if not os.path.lexists(directory):
        return None
    return _store.private_dir_str(directory, what)


def areas(cache_dir: str | os.PathLike | None = None) -> list[Area]:
    """The compile cache and the verdict cache, with their entries.

    Parameters
    ----------
    cache_dir : path-like, optional
        The compile cache directory (default: ``$OPAQUE_OPS_CACHE_DIR``, or
        the user's cache directory); the verdict cache is
        ``$OPAQUE_OPS_VERDICT_CACHE`` or its ``verdicts`` directory.

    Returns
    -------
    list of Area
        A directory that does not exist is listed with no entries; the
        verdict cache is left out when it is turned off (``=off``).

    Raises
    ------
    CacheError
        A directory others may write, or owned by another user, or unreadable.
    """
    from .model import cache as _verdicts

    root = _store.default_dir_str(cache_dir)
    found = [Area("compile cache", root, [])]
    checked = _checked(root, "compile cache directory")
    if checked is not None:
        found[0] = Area("compile cache", checked, list(_entries(checked, ("library", "note", "temporary"))))
    env = os.environ.get(_verdicts.ENV_VERDICTS)
    if env is not None and env.strip().lower() in ("0", "off", "no", "false", "none"):
        return found
    verdicts = env if env else os.path.join(root, "verdicts")
    checked = _checked(verdicts, "verdict cache directory")
    found.append(
        Area(
            "verdict cache",
            checked or os.path.abspath(verdicts),
            [] if checked is None else list(_entries(checked, ("record", "temporary"))),
        )
    )
    return found


def clear(
    cache_dir: str | os.PathLike | None = None, *, older_than_days: float | None = None, dry_run: bool = False
) -> list[Entry]:
    """Remove the caches' entries (see the module doc); return those removed (or, ``dry_run``, that would be).

    Parameters
    ----------
    cache_dir : path-like, optional
        The compile cache directory, as :func:`areas` takes it.
    older_than_days : float, optional
        Only entries last written more than this many days ago.  Temporary
        files and build directories go only once they are an hour old, whatever
        this says.
    dry_run : bool, optional
        List what would go, remove nothing.

    Raises
    ------
    CacheError
        A directory breaks the caches' rules (nothing is removed from it).
    ValueError
        ``older_than_days`` is negative or not a number.
    """
    if older_than_days is not None:
        try:
            older_than_days = float(older_than_days)
        except (TypeError, ValueError):
            raise ValueError(f"older_than_days must be a number of days, not {older_than_days!r}") from None
        if not older_than_days >= 0:  # (also refuses NaN)
            raise ValueError(f"older_than_days must be 0 or more, not {older_than_days!r}")
    now = time.time()
    cutoff = None if older_than_days is None else now - older_than_days * 86400.0
    removed = []
    for area in areas(cache_dir):
        for e in area.entries:
            if e.kind == "temporary" and now - e.mtime < STALE_AFTER_S:
                continue
            if cutoff is not None and e.mtime > cutoff:
                continue
            if not dry_run:
                try:
                    if e.kind == "temporary" and os.path.isdir(e.path) and not os.path.islink(e.path):
                        shutil.rmtree(e.path)
                    else:
                        os.unlink(e.path)
                except FileNotFoundError:
                    continue  # a concurrent process removed it first
                except OSError as exc:
                    raise CacheError(f"cannot remove {e.path}: {exc.strerror or exc}") from None
            removed.append(e)
    return removed
