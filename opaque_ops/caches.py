"""What the caches hold, and emptying them: ``opaque-ops cache`` and ``opaque-ops cache clear``.

The compile cache (:mod:`opaque_ops.build.store`) keeps every library it ever built, one per
source, compiler and Python, and the verdict cache (:mod:`opaque_ops.model.cache`)
keeps up to 512 model records: on a machine that tries many kernel versions
the first grows without end.  Both are caches: anything removed is built or
checked again at its next use, so clearing is always safe for correctness
(but a library can be built again only where a C compiler is installed; a
platform wheel's prebuilt libraries are not in the cache).

What counts as the caches' own, and is the only thing ever removed: a regular
file of this user whose name has exactly the form opaque_ops gives its
entries (``<64 hex>-<16 hex>-<64 hex>.so`` for a library, the same ``.rec``
for a verdict record, and ``.json`` for one of an earlier format,
``compiler-<32 hex>.note`` for a memo, ``.tmp-<16 hex>.part`` for a file
being written), and a build directory (``.opaque-ops-build-`` and eight
characters, as :func:`tempfile.mkdtemp` names it): the forms
:func:`opaque_ops.build.store.entry_kind` knows, which the verdict cache's
own pruning goes by too.  A temporary file or build directory goes
only once it is an hour old: a younger one may belong to a build that is
running.  A file of any other name is left alone, so that a
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
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .build import store as _store
from .errors import CacheError
from .model import cache as _verdicts

# A temporary file or build directory younger than this may belong to a build that is running.
STALE_AFTER_S = 3600.0


class Entry(NamedTuple):
    """One file or directory of a cache: what it is (``kind``), its ``path``, ``size`` (bytes) and ``mtime``."""

    kind: str
    path: str
    size: int
    mtime: float


class Area(NamedTuple):
    """One cache directory and its entries; ``error``: why it is not read (None: it is)."""

    name: str
    directory: str
    entries: list
    error: str | None = None


def kind_of(name: str) -> str | None:
    """What the compile cache's file ``name`` is ("library", "note", "temporary", "build directory"),
    or None: not a name the cache gives (:func:`opaque_ops.build.store.entry_kind`)."""
    kind = _store.entry_kind(name)
    return "library" if kind == "entry" else kind


def record_kind_of(name: str) -> str | None:
    """What the verdict cache's file ``name`` is ("record", "temporary"), or None."""
    if _verdicts.is_record_name(name):
        return "record"
    return "temporary" if _store.entry_kind(name) == "temporary" else None


def _size(path: str, st: os.stat_result) -> int:
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    for top, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, f)).st_size
    return total


def _entries(directory: str, kind_of_name: Callable[[str], str | None]) -> Iterator[Entry]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CacheError(f"cannot read cache directory {directory}: {exc.strerror or exc}") from None
    for name in sorted(names):
        kind = kind_of_name(name)
        if kind is None:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # removed by a concurrent process
            continue
        if st.st_uid != os.geteuid():
            continue  # not something this user's opaque_ops wrote: left alone
        if not (stat.S_ISDIR(st.st_mode) if kind == "build directory" else stat.S_ISREG(st.st_mode)):
            continue  # a link, or a file where a directory belongs (or the reverse)
        yield Entry(kind, path, _size(path, st), st.st_mtime)


def _area(name: str, directory: str, kind_of_name, what: str, choose: str) -> Area:
    """One cache's Area: its entries, or, if its directory breaks the rules, the reason (``error``)."""
    directory = _store._absolute(os.path.expanduser(directory))  # ("~" as the caches themselves take it)
    if not os.path.lexists(directory):
        return Area(name, directory, [], None)
    try:
        checked = _store.private_dir_str(directory, what, choose)
        return Area(name, checked, list(_entries(checked, kind_of_name)), None)
    except CacheError as exc:
        return Area(name, directory, [], str(exc))


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
        A directory that does not exist is listed with no entries, and one
        that breaks the caches' rules (others may write it, another user
        owns it, it is a file) with none and the reason in ``error``; the
        verdict cache is left out when it is turned off (``=off``).
    """
    found = [
        _area(
            "compile cache",
            _store.default_dir_str(cache_dir),
            kind_of,
            "compile cache directory",
            _store.CHOOSE_COMPILE_CACHE,
        )
    ]
    verdicts = _verdicts.directory_path(cache_dir)
    if verdicts is None:
        return found
    found.append(_area("verdict cache", verdicts, record_kind_of, "verdict cache directory", _verdicts.CHOOSE))
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
        A cache's directory breaks the caches' rules: nothing is removed from
        it, the other is cleared all the same, and the exception's
        ``removed`` holds what was.
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
    removed: list[Entry] = []
    refused = []
    for area in areas(cache_dir):
        if area.error is not None:
            refused.append(area.error)
            continue
        for e in area.entries:
            if e.kind in ("temporary", "build directory") and now - e.mtime < STALE_AFTER_S:
                continue
            if cutoff is not None and e.mtime > cutoff:
                continue
            if not dry_run:
                try:
                    if e.kind == "build directory":
                        shutil.rmtree(e.path)
                    else:
                        os.unlink(e.path)
                except FileNotFoundError:
                    continue  # a concurrent process removed it first
                except OSError as exc:
                    refused.append(f"cannot remove {e.path}: {exc.strerror or exc}")
                    continue
            removed.append(e)
    if refused:
        err = CacheError("; ".join(refused))
        err.removed = removed  # type: ignore[attr-defined]
        raise err
    return removed
