"""The compile cache, and the rules for every directory opaque_ops writes.

The cache is a trust boundary: its file names are computable from the source,
so whoever can write the directory can plant a library that the next
``compile_ops`` of that source loads into the user's process.  So, like
OpenSSH's StrictModes:

* the directory is created with mode 0700 (and so is any parent created);
* a directory (or any parent of it) that others may write without the sticky
  bit, a directory owned by another user, and an entry owned by another user
  or writable by others are refused with :class:`CacheError`, which says why
  and how to fix it;
* entries are written with mode 0700 (a library) and published with one
  atomic rename;
* every entry carries the digest of its bytes (BLAKE2b-256, see
  :mod:`opaque_ops._digest`) in its file name, checked before the entry is
  loaded.  A truncated or corrupted entry (a full disk, a
  crash, a bad sector) is deleted and rebuilt, never loaded: mapping a
  truncated library kills the process with SIGBUS.

Entry names: ``<source key>-<compiler key>-<digest of the file>.so``.  The
source key covers everything the build reads except the compiler, whose
identity is the second part; with no compiler on the machine, an entry built
by any compiler for the same source is still used.

Paths are ``str`` inside, and :class:`pathlib.Path` only where a public
function hands one out (imported there): every process's start-up reads the
verdict cache through this module, and ``import pathlib`` (with the
``urllib.parse`` and ``ipaddress`` it loads) costs 2-3 ms of it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from .. import _digest
from ..errors import CacheError
from . import paths as _paths

if TYPE_CHECKING:
    from pathlib import Path

ENV_CACHE = "OPAQUE_OPS_CACHE_DIR"
_SUFFIX = ".so"
# The names of what the caches write besides entries, as entry_kind() knows them.
BUILD_DIR_PREFIX = ".opaque-ops-build-"  # + tempfile.mkdtemp's eight characters
_TMP_PREFIX, _TMP_SUFFIX = ".tmp-", ".part"  # new_file's: + 16 hex digits


def _hex(s: str, n: int) -> bool:
    return len(s) == n and all(c in "0123456789abcdef" for c in s)


def entry_kind(name: str, suffix: str = _SUFFIX) -> str | None:
    """What the file ``name`` in a cache directory is, by its name alone; None: nothing the caches write.

    "entry" (``<64 hex>-<16 hex>-<64 hex><suffix>``: a library, or with the
    verdict cache's suffix a record), "note" (``compiler-<32 hex>.note``),
    "temporary" (a file :meth:`Cache.new_file` made), "build directory" (one
    :meth:`Cache.workdir` made).  Only these forms are ever deleted by
    opaque_ops: a directory pointed at by mistake keeps every other file.
    """
    if name.endswith(suffix):
        parts = name[: -len(suffix)].split("-")
        if len(parts) == 3 and _hex(parts[0], 64) and _hex(parts[1], 16) and _hex(parts[2], 64):
            return "entry"
    if name.startswith("compiler-") and name.endswith(".note") and _hex(name[9:-5], 32):
        return "note"
    if name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX) and _hex(name[5:-5], 16):
        return "temporary"
    if name.startswith(BUILD_DIR_PREFIX) and len(name) == len(BUILD_DIR_PREFIX) + 8:
        return "build directory"
    return None


def default_dir(override: str | os.PathLike | None = None) -> Path:
    """The compile cache directory: argument, ``$OPAQUE_OPS_CACHE_DIR``, or the user cache."""
    return _paths.as_path(default_dir_str(override))


def default_dir_str(override: str | os.PathLike | None = None) -> str:
    """:func:`default_dir` as a ``str`` (what a start-up uses: no pathlib)."""
    if override is not None:
        return os.fspath(override)
    env = os.environ.get(ENV_CACHE)
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "opaque_ops")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _writable_by_others(mode: int) -> bool:
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH))


def _parents(path: str):
    """``path``'s ancestors, nearest first, as ``PurePath.parents`` lists them."""
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return
        yield parent
        path = parent


def _absolute(path: str) -> str:
    """``path`` made absolute as ``Path.absolute()`` makes it: ``.`` parts and extra slashes dropped, ``..`` kept.

    (``os.path.abspath`` would also fold ``a/..``, which names another
    directory when ``a`` is a symbolic link.)
    """
    return _paths.pure(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


# How to name another compile cache directory, in the errors below; other
# directories pass their own (the verdict cache: its variable, or off).
CHOOSE_COMPILE_CACHE = f"cache_dir=... or ${ENV_CACHE}"


def _check_dir(path: str, what: str, choose: str = CHOOSE_COMPILE_CACHE) -> None:
    """Refuse a directory that someone other than this user could write (see the module doc)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise CacheError(f"cannot use {path} as {what}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(
            f"cannot use {path} as {what}: it is a file, not a directory. Remove or rename it, "
            f"or choose another directory ({choose})"
        )
    me = os.geteuid()
    if st.st_uid != me:
        raise CacheError(
            f"refusing {what} {path}: it is owned by {_owner(st.st_uid)}, not by you "
            f"({_owner(me)}), so its owner could plant libraries that would be loaded into this "
            f"process. Use a directory you own ({choose})"
        )
    if _writable_by_others(st.st_mode):
        raise CacheError(
            f"refusing {what} {path}: its mode {stat.S_IMODE(st.st_mode):04o} lets other users "
            f"write it, so they could plant libraries that would be loaded into this process. "
            f"Fix: `chmod 700 {path}` (and delete what you did not put there), or use another "
            f"directory"
        )
    # A parent others may write could have this directory swapped for theirs
    # (unless the sticky bit, as on /tmp, keeps them to their own entries).
    for parent in _parents(os.path.realpath(path)):
        try:
            pst = os.stat(parent)
        except OSError:
            continue
        if _writable_by_others(pst.st_mode) and not pst.st_mode & stat.S_ISVTX:
            raise CacheError(
                f"refusing {what} {path}: its parent {parent} (mode "
                f"{stat.S_IMODE(pst.st_mode):04o}) is writable by other users without the sticky "
                f"bit, so they could replace {path} with their own. Fix: `chmod go-w {parent}`, "
                f"or use a directory under one only you can write"
            )


def private_dir(path: str | os.PathLike, what: str = "cache directory", choose: str = CHOOSE_COMPILE_CACHE) -> Path:
    """Create (mode 0700, parents too) or check a directory opaque_ops writes and loads from.

    Parameters
    ----------
    path : path-like
    what : str
        What the directory is for, for error messages.
    choose : str
        How the user names another directory, for error messages.

    Returns
    -------
    pathlib.Path
        ``path``, made absolute.

    Raises
    ------
    CacheError
        The path is a file, cannot be created or written, is owned by another
        user, or can be written by others.
    """
    return _paths.as_path(private_dir_str(path, what, choose))


def private_dir_str(path: str | os.PathLike, what: str = "cache directory", choose: str = CHOOSE_COMPILE_CACHE) -> str:
    """What :func:`private_dir` does, giving the path as a ``str`` (what a start-up uses: no pathlib)."""
    path = _absolute(os.path.expanduser(os.fspath(path)))
    missing = []
    p = path
    while not os.path.lexists(p) and p != os.path.dirname(p):
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d, mode=0o700)
        except FileExistsError:
            pass  # created meanwhile by a concurrent caller; checked below
        except OSError as exc:
            reason = "a file is in the way" if isinstance(exc, NotADirectoryError) else exc.strerror
            raise CacheError(
                f"cannot create {what} {path}: {d}: {reason or exc}. Choose another directory ({choose})"
            ) from None
    _check_dir(path, what, choose)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheError(
            f"cannot write {what} {path} (permission denied). Fix its permissions or choose "
            f"another directory ({choose})"
        )
    return path


class Cache:
    """A checked cache directory (see the module doc).

    Parameters
    ----------
    root : path-like
        The directory; created 0700 if missing.
    suffix : str, optional
        The entries' file name suffix (``.so``: kernel libraries; the model
        verdicts of :mod:`opaque_ops.model.cache` are ``.json``).
    mode : int, optional
        The mode entries are published with.
    what : str, optional
        What the directory is, for error messages.
    choose : str, optional
        How the user names another directory, for error messages.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        suffix: str = _SUFFIX,
        mode: int = 0o700,
        what: str = "cache directory",
        choose: str = CHOOSE_COMPILE_CACHE,
    ):
        self.dir = private_dir_str(root, what, choose)  # absolute, a str (see the module doc)
        self.suffix = suffix
        self.mode = mode
        self.choose = choose

    @property
    def root(self) -> Path:
        """The directory, as a :class:`pathlib.Path` (:attr:`dir` is the same as a ``str``)."""
        return _paths.as_path(self.dir)

    def _check_entry(self, path: str) -> os.stat_result:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise CacheError(
                f"refusing cache entry {path}: it is not a regular file (a link or a device); delete it (`rm {path}`)"
            )
        if st.st_uid != os.geteuid() or _writable_by_others(st.st_mode):
            who = (
                f"owned by {_owner(st.st_uid)}"
                if st.st_uid != os.geteuid()
                else f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
            )
            raise CacheError(
                f"refusing cache entry {path}: it is {who}, so it may not be what opaque_ops "
                f"built. Delete it (`rm {path}`) and compile again"
            )
        return st

    def lookup(self, key: str, compiler_key: str | None) -> str | None:
        """The verified entry for ``key`` (built by ``compiler_key``, or any compiler if None).

        Entries whose bytes do not match their digest are deleted.

        Raises
        ------
        CacheError
            A candidate entry is not a regular file, is owned by another user
            or is writable by others.
        """
        prefix = f"{key}-{compiler_key}-" if compiler_key else f"{key}-"
        candidates = []
        try:
            names = os.listdir(self.dir)
        except OSError as exc:
            raise CacheError(f"cannot read cache directory {self.dir}: {exc.strerror or exc}") from None
        for name in names:
            if name.startswith(prefix) and name.endswith(self.suffix):
                path = os.path.join(self.dir, name)
                try:
                    st = self._check_entry(path)
                except FileNotFoundError:
                    continue  # replaced or removed by a concurrent caller
                candidates.append((st.st_mtime_ns, path))
        for _, path in sorted(candidates, reverse=True):
            expected = os.path.basename(path)[: -len(self.suffix)].rsplit("-", 1)[-1]
            try:
                ok = _digest.of_file(path) == expected
            except FileNotFoundError:
                continue
            if ok:
                return path
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # truncated or corrupted: rebuilt by the caller
        return None

    def new_file(self, prefix: str = _TMP_PREFIX, suffix: str = _TMP_SUFFIX) -> tuple[int, str]:
        """A new, empty, private (0600) file inside the cache: ``(fd open for writing, path)``.

        What :func:`tempfile.mkstemp` does (a random name, ``O_EXCL``, retried
        on a clash), without importing :mod:`tempfile`: the model verdicts are
        written at an app's first start, and that import (with the
        :mod:`shutil`, :mod:`random` and compression modules it pulls in)
        cost more than the write.

        Raises
        ------
        OSError
            The file cannot be created.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        for _ in range(100):
            path = os.path.join(self.dir, f"{prefix}{os.urandom(8).hex()}{suffix}")
            try:
                return os.open(path, flags, 0o600), path
            except FileExistsError:
                continue
        raise FileExistsError(f"no unused temporary file name in {self.dir}")

    def read_note(self, name: str) -> str | None:
        """The text of the note ``name`` kept in the cache, or None if there is none (or it is unreadable).

        Notes are small memos that save work, never code (the compiler's
        identity, see :func:`opaque_ops.build.compiler.compiler_identity`).
        One is read under the entries' rules: a regular file, owned by the
        user and not writable by others.

        Raises
        ------
        CacheError
            The note breaks those rules.
        """
        path = os.path.join(self.dir, f"{name}.note")
        try:
            self._check_entry(path)
        except CacheError:
            raise
        except OSError:  # none yet (or unreadable)
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None

    def write_note(self, name: str, text: str) -> None:
        """Keep ``text`` as the note ``name`` (published atomically; a failure to write is ignored)."""
        try:
            fd, tmp = self.new_file()
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, os.path.join(self.dir, f"{name}.note"))
        except BaseException as exc:  # a failed write, or Ctrl-C at the wrong moment: leave no temporary file
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if not isinstance(exc, OSError):
                raise

    @contextlib.contextmanager
    def workdir(self):
        """A private temporary directory inside the cache (same file system: atomic publish)."""
        # Imported here, not at the top: only a compilation needs them, and
        # every process's start-up imports this module (see new_file).
        import shutil
        import tempfile

        try:
            d = tempfile.mkdtemp(prefix=BUILD_DIR_PREFIX, dir=self.dir)
        except OSError as exc:
            raise CacheError(
                f"cannot write in cache directory {self.dir}: {exc.strerror or exc}; fix its "
                f"permissions or choose another directory ({self.choose})"
            ) from None
        try:
            yield _paths.as_path(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def publish(self, built: str | os.PathLike, key: str, compiler_key: str) -> str:
        """Move a freshly built library into the cache under its digest; return its path."""
        os.chmod(built, self.mode)
        final = os.path.join(self.dir, f"{key}-{compiler_key}-{_digest.of_file(built)}{self.suffix}")
        # One rename: a reader sees the old state or the complete new file.
        os.replace(built, final)
        return final
