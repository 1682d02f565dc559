"""Op libraries: custom-op kernels compiled from C, or loaded prebuilt.

Paths are ``str`` here (``OpLibrary.path`` makes its :class:`pathlib.Path`
when asked): an app's start-up loads its kernels through this module, and
``import pathlib`` would cost that start-up 2-3 ms.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import os
import weakref
from functools import cache
from typing import TYPE_CHECKING

from .. import _digest, _native
from .._records import renew_each_after_fork
from ..build import bundles as _bundles
from ..build import paths as _paths
from ..build import store as _store
from ..build.machine import host_arch
from ..errors import CacheError, CompileError, OpaqueOpsError, OpLibraryError
from . import sanitizers as _sanitizers
from .provider import OpProvider

if TYPE_CHECKING:
    from pathlib import Path


class OpLibrary(OpProvider):
    """A set of custom ops backed by one kernel library.

    Create one with :func:`compile_ops` or :func:`load_ops` and pass it to
    ``Interpreter(custom_ops=[...])``.  One library can serve any number of
    interpreters; it stays loaded as long as any of them exists.  It pickles
    as what made it (a bundled kernel's name, a ``compile_ops`` source, a
    ``load_ops`` path) and is re-created in the receiving process.

    Attributes
    ----------
    path : pathlib.Path
        The shared library file.
    cache_hit : bool
        For :func:`compile_ops`: True if the compiler was skipped.
    build_log : str
        The compiler's output (warnings) when it ran.
    prebuilt : bool
        For :mod:`opaque_ops.kernels`: True if the library came prebuilt with
        the package rather than from the compiler.
    """

    def __init__(self, path, *, cache_hit: bool = False, build_log: str = "", prebuilt: bool = False):
        # Absolute: dlopen searches the library path for names without a "/".
        self._path = os.path.realpath(path)
        self.cache_hit = cache_hit
        self.build_log = build_log
        self.prebuilt = prebuilt
        _check_loadable(self._path)
        self._kernel = _native.kernel_library(self._path, host_arch())
        self._operators = None
        self._lock = _thread.allocate_lock()
        _libraries.add(self)
        # How the library was made, so that __reduce__ can re-create it in
        # another process: compile_ops and bundled_kernel set it.
        #   ("load",)                    load_ops(path)
        #   ("compile", source, kwargs)  compile_ops(source, **kwargs)
        #   ("kernel", name)             a bundled kernel file (opaque_ops.kernels.kernel(name))
        self._origin: tuple = ("load",)

    @property
    def path(self) -> Path:
        """The shared library file (absolute, symlinks resolved)."""
        return _paths.as_path(self._path)

    def __reduce__(self):
        # What made it, and its file: a pickle, a pool and the isolated
        # worker all re-create it with restore_library.
        origin = self._origin or ("load",)
        if origin[0] == "compile":
            source = origin[1]
            # A source file travels as its text too: the other process may not have the file.
            if isinstance(source, (str, os.PathLike)) and _is_file(source):
                with open(source, encoding="utf-8") as f:
                    text = f.read()
                origin = ("compile", os.path.realpath(source), origin[2], text)
        return restore_library, (origin, self._path)

    def operators(self) -> list:
        """The library's operators, built once on first use (internal handles)."""
        with self._lock:
            if self._operators is None:
                defs = self._kernel.op_defs()
                if not defs:
                    raise OpLibraryError(
                        f"{self._path} declares no ops. Declare each op with "
                        '`OPAQUE_OP("Name", version, .invoke = ...)` or name guide-style '
                        'factories with compile_ops(..., ops={"ModelOpName": "c_function"})'
                    )
                ops = [self._kernel.make_operator(i) for i in range(len(defs))]
                self._operators = sorted(ops, key=lambda o: (o.name, o.version))
            return self._operators

    @property
    def ops(self) -> list[tuple[str, int]]:
        """``(name, version)`` of every op the library provides, as registered with TFLite."""
        return [(o.name, o.version) for o in self.operators()]

    @property
    def names(self) -> list[str]:
        """The op names the library provides."""
        return sorted({o.name for o in self.operators()})

    @property
    def simd(self) -> str | None:
        """The instruction set the library's vectorized kernels run on this machine.

        ``"avx512"``, ``"avx2"`` or ``"sse2"`` on x86_64, ``"neon"`` on aarch64,
        ``"generic"`` elsewhere: the best the CPU supports, capped by the
        environment variable ``OPAQUE_OPS_SIMD`` (see ``opaque_ops/simd.h``).
        None for a library without vectorized kernels.
        """
        return self._kernel.simd_level()

    def __repr__(self) -> str:
        ops = ", ".join(f"{n} v{v}" for n, v in self.ops)
        return f"<OpLibrary {os.path.basename(self._path)}: {ops}>"


def compile_ops(
    source,
    *,
    ops: dict[str, str] | None = None,
    include_dirs=(),
    define_macros=(),
    extra_compile_args=(),
    cache_dir=None,
    debug: bool = False,
) -> OpLibrary:
    """Compile C kernels into an op library (cached).

    Parameters
    ----------
    source : str or path-like
        Path to a ``.c`` file, or the C source text itself.
    ops : dict, optional
        ``{model op name: C factory function}`` for guide-style sources whose
        function returns a ``TfLiteOperator*`` (or ``TfLiteRegistrationExternal*``).
        The op is registered under the model's name even if the factory
        creates it under another (the guide's "ATAN" vs the model's "Atan").
        Ops declared with ``OPAQUE_OP(...)`` lines are found without this.
    include_dirs, define_macros, extra_compile_args : sequences
        Passed to the compiler; ``define_macros`` holds ``(name, value)`` pairs.
    cache_dir : path-like, optional
        Where compiled libraries are kept; default ``$OPAQUE_OPS_CACHE_DIR`` or
        ``~/.cache/opaque_ops``.  A hit (same source, headers and flags) skips the compiler.
    debug : bool
        Build with ``-O0 -g``.

    Returns
    -------
    OpLibrary

    Raises
    ------
    CompileError
        The compiler failed; the message carries its ``file:line: message`` lines.
    CacheError
        The cache directory is a file, cannot be written, or is not private
        to this user (owned by another user or writable by others).
    OpLibraryError
        The result could not be loaded or declares no ops.

    Notes
    -----
    The compiler runs in a child process, so any number of threads may call
    this at once.  An entry is only loaded after its digest matches; a
    damaged entry is rebuilt.  The key covers the sources, the headers in the
    include directories, the flags and the compiler's identity and version.
    """
    # The build path is imported here, not with this module: a start-up whose
    # kernels come prebuilt (a platform wheel) never compiles.
    from ..build import compiler as _cbuild

    text, display, path = _cbuild.read_source(source)
    # A runtime without the opaque kernel API (pymicro-wakeword's armv7l build)
    # could never load the result: say so now, not after looking for a compiler.
    _native.load_runtime().require_custom_ops(f"compile_ops({display})")
    try:
        compiler = _cbuild.native_compiler()
    except CompileError:
        compiler = [os.environ.get("CC", "cc").split()[0] or "cc"]  # a cache hit may still serve
    spec = _cbuild.BuildSpec(
        compiler=compiler,
        sources=[path] if path is not None else [],
        text=text if path is None else None,
        ops=ops,
        include_dirs=[_paths.as_path(p) for p in include_dirs],
        defines=[(m, None) if isinstance(m, str) else tuple(m) for m in define_macros],
        cflags=[str(a) for a in extra_compile_args],
        debug=debug,
        label=f"compiling {display}",
    )
    lib_path, hit, log = _cbuild.compile_cached(spec, cache_dir)
    lib = _load_cache_entry(lib_path, cache_hit=hit, build_log=log)
    if lib is None:  # built once more
        lib_path, hit, log = _cbuild.compile_cached(spec, cache_dir)
        lib = OpLibrary(lib_path, cache_hit=hit, build_log=log)
    lib._origin = (
        "compile",
        source,
        {
            "ops": ops,
            "include_dirs": list(include_dirs),
            "define_macros": list(define_macros),
            "extra_compile_args": list(extra_compile_args),
            "cache_dir": cache_dir,
            "debug": debug,
        },
    )
    return lib


def load_ops(path: str | os.PathLike) -> OpLibrary:
    """Load a prebuilt kernel library (from ``build.py`` or ``compile_ops``); no compiler needed.

    Parameters
    ----------
    path : path-like
        The ``.so`` file.

    Returns
    -------
    OpLibrary

    Raises
    ------
    OpLibraryError
        The file is missing, is for another architecture, is not an opaque_ops
        library, or was built for a different header ABI.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise OpLibraryError(f"kernel library {p} does not exist")
    if _paths.suffix(p) == ".c":
        raise OpLibraryError(
            f"{p} is C source, not a compiled library: compile it with opaque_ops.compile_ops({p!r}) "
            "(or pass the path in custom_ops, which compiles a .c file)"
        )
    digest = _file_digest(p)
    lib = OpLibrary(p)
    # Pickled with the digest of the bytes loaded: the receiving process
    # loads the file at the same path only if it still holds those bytes.
    lib._origin = ("load", digest)
    return lib


SPEC_HELP = (
    "custom_ops takes op libraries (compile_ops, load_ops, python_op, opaque_ops.kernels) or, like "
    "the command line's --ops, a prebuilt kernel library's path (.so), a C source file (.c, compiled "
    "with compile_ops) or 'kernels:NAME' (a bundled kernel or bundle), alone or in a list"
)


def op_library_from_spec(spec: str | os.PathLike) -> OpProvider:
    """The op library a ``custom_ops`` string or path names (what the CLI's ``--ops`` takes).

    - ``"kernels:NAME"``: a bundled kernel file or bundle (``opaque_ops.kernels``);
    - a path ending in ``.c``: that source, compiled with :func:`compile_ops`;
    - any other path: a prebuilt kernel library, with :func:`load_ops`.

    Raises
    ------
    OpLibraryError
        The name or file does not exist, or the file is not a shared library;
        the message says what to pass instead.
    """
    text = os.fspath(spec)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if text.startswith("kernels:"):
        name = text.split(":", 1)[1]
        if name in _bundles.BUNDLES:
            return OpBundle([bundled_kernel(n) for n in _bundles.expand(name)], name=name)
        if name in _bundles.available():
            return bundled_kernel(name)
        raise OpLibraryError(
            f"custom_ops={text!r}: no bundled kernel or bundle {name!r} (available: "
            f"{', '.join(_bundles.names())}); for an installed kernel package pass "
            f"opaque_ops.kernels.by_name({name!r}) instead"
        )
    p = text
    if _paths.suffix(p) == ".c":
        if not os.path.isfile(p):
            raise OpLibraryError(f"C source {p} (in custom_ops) does not exist; {SPEC_HELP}")
        return compile_ops(p)
    if not os.path.isfile(p):
        raise OpLibraryError(f"kernel library {p} (in custom_ops) does not exist; {SPEC_HELP}")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise OpLibraryError(f"cannot read kernel library {p}: {exc.strerror or exc}") from None
    if magic != b"\x7fELF":
        raise OpLibraryError(f"{p} (in custom_ops) is not a shared library (no ELF header); {SPEC_HELP}")
    return load_ops(p)


def _file_digest(path: str | os.PathLike) -> str | None:
    """The file's digest (:mod:`opaque_ops._digest`), or None if it cannot be read."""
    try:
        return _digest.of_file(path)
    except OSError:
        return None


@cache
def bundled_kernel(name: str) -> OpLibrary:
    """One bundled kernel file as an op library: prebuilt if the package has it, else compiled.

    What :func:`opaque_ops.kernels.kernel` returns (see there); here, below
    the kernels module, so that a library pickled by name is re-created
    without this layer importing the one above it.

    Parameters
    ----------
    name : str
        A bundled kernel file name, e.g. ``"extract_image_patches"``.

    Returns
    -------
    OpLibrary
        ``lib.prebuilt`` tells which it is.
    """
    if name not in _bundles.available():
        raise ValueError(f"no bundled kernel {name!r}; available: {', '.join(_bundles.names())}")
    lib_path = _bundles.prebuilt_library(name)
    if lib_path is not None:
        lib = OpLibrary(lib_path, prebuilt=True)
    else:
        lib = compile_ops(os.path.join(_paths.kernels_dir_str(), f"{name}.c"))
    lib._origin = ("kernel", name)  # pickled by name: the other process loads or builds its own
    return lib


def restore_library(origin, path) -> OpLibrary:
    """Re-create an op library in this process (the other half of ``OpLibrary.__reduce__``).

    - a bundled kernel by name (prebuilt or compiled here, for this machine);
      where that fails (no compiler, another cache), the sender's file if it exists here;
    - a ``compile_ops`` library: its cache entry if it exists here and passes the
      cache's checks (owner, mode, digest), else compiled again from its source;
    - a ``load_ops`` library: the same path, which must exist here.
    """
    kind = origin[0]
    if kind == "kernel":
        try:
            return bundled_kernel(origin[1])
        except (OpaqueOpsError, OSError):
            if not os.path.isfile(path):
                raise
            # The sender's file: a compile cache entry only through the cache's checks.
            entry = _verified_cache_entry(path) if _cache_entry_parts(path) else path
            if entry is None:
                raise
            lib = load_ops(entry)
            lib._origin = ("kernel", origin[1])
            return lib
    if kind == "compile":
        entry = _verified_cache_entry(path)
        # The same machine, or a shared cache: no compiler needed (None: compiled below).
        lib = _load_cache_entry(entry) if entry is not None else None
        if lib is not None:
            lib._origin = origin[:3]
            return lib
        source, kwargs = origin[1], origin[2]
        text = origin[3] if len(origin) > 3 else None
        if text is not None and not os.path.isfile(source):
            source = text
        return compile_ops(source, **kwargs)
    if not os.path.isfile(path):
        raise OpLibraryError(
            f"kernel library {path} (loaded with load_ops in the sending process) does not exist in this "
            "process's file system; put the library at the same path on every worker, or send a bundled "
            "kernel (opaque_ops.kernels) or a compile_ops library, which are re-created from source"
        )
    expected = origin[1] if len(origin) > 1 else None
    if expected is not None and _file_digest(path) != expected:
        raise OpLibraryError(
            f"kernel library {path} is not the file the sending process loaded with load_ops: its bytes "
            "changed since (its digest differs), so it could run other code; put the same library at that path "
            "on every worker, or send a bundled kernel (opaque_ops.kernels) or a compile_ops library, which "
            "are re-created from source"
        )
    return load_ops(path)


def _load_cache_entry(path: str, **kwargs) -> OpLibrary | None:
    """``OpLibrary(path, **kwargs)`` of a compile cache entry just looked up; None if it is gone.

    Another process's ``opaque-ops cache clear`` may remove the entry between
    the lookup and the load: the caller then builds it again.
    """
    try:
        return OpLibrary(path, **kwargs)
    except OpLibraryError:
        if os.path.lexists(path):
            raise
        return None


def _cache_entry_parts(path) -> list[str] | None:
    """``[KEY, COMPILER, DIGEST]`` of a compile cache entry's file name (``KEY-COMPILER-DIGEST.so``), or None."""
    name = os.path.basename(os.fspath(path))
    parts = name[: -len(".so")].split("-") if name.endswith(".so") else []
    return parts if len(parts) == 3 else None


def _verified_cache_entry(path) -> str | None:
    """``path`` as the compile cache serves it: only through the cache's own checks.

    A compile cache entry is named ``KEY-COMPILER-DIGEST.so``; the cache's
    lookup checks its owner, its mode and its digest (and deletes a damaged
    one).  None if the file is not here or fails those checks: the caller
    compiles instead.
    """
    p = os.fspath(path)
    parts = _cache_entry_parts(p)
    if parts is None or not os.path.isfile(p):
        return None
    try:
        return _store.Cache(os.path.dirname(p) or ".").lookup(parts[0], parts[1])
    except (CacheError, OSError):
        return None


def _is_file(source) -> bool:
    try:
        return len(os.fspath(source)) < 4096 and "\n" not in os.fspath(source) and os.path.isfile(source)
    except (OSError, ValueError):
        return False


def _check_loadable(path: str) -> None:
    """Refuse, before dlopen, a library that would take the process down when loaded."""
    problem = _sanitizers.missing_runtime(str(path), host_arch())
    if problem:
        raise OpLibraryError(problem)


# Every OpLibrary of the process, for the fork handler below.
_libraries: weakref.WeakSet = weakref.WeakSet()


# A library made before a fork (a module-level compile_ops, then a
# process pool) reaches the child; if another thread was building its
# operators at the fork, the child's copy of its lock stayed held by a
# thread the child does not have, and the child's first interpreter
# with it waited forever.  Re-created: the operators are stored once
# all are made, so the child finds them all or makes them itself.
# tests/ops/test_oplib.py forks inside OpLibrary.operators.
renew_each_after_fork(_libraries, _lock=_thread.allocate_lock)


class DeferredKernel:
    """A bundled kernel file named but not loaded yet: what a bundle holds until a model needs it.

    Its ops are the ``OPAQUE_OP`` lines of its source
    (:func:`opaque_ops.build.bundles.declared_ops`); :meth:`load` is
    :func:`bundled_kernel` (prebuilt or compiled, once per process).
    Loading a kernel file costs a ``dlopen``, the prebuilt copy's digest and
    the ELF checks, about 0.3-0.5 ms each: an app's start-up with
    ``kernels.mediapipe()`` pays for the one file selfie segmentation
    uses, not for all six.
    """

    __slots__ = ("file", "ops")

    def __init__(self, file: str):
        # (A name that is not a bundled kernel file declares no ops, and
        # load() raises bundled_kernel's ValueError, which lists them.)
        self.file = file
        self.ops = list(_bundles.declared_ops(file))

    def load(self) -> OpLibrary:
        return bundled_kernel(self.file)

    def __reduce__(self):
        # By name: the receiving process reads its own sources' declarations.
        return DeferredKernel, (self.file,)

    def __repr__(self) -> str:
        return f"<DeferredKernel {self.file}>"


class OpBundle(OpProvider):
    """Several op libraries used as one (e.g. all of MediaPipe's kernels).

    A bundle of bundled kernel files (:func:`opaque_ops.kernels.bundle`,
    ``kernels.mediapipe()``) loads each file when first needed: when an
    interpreter's model uses one of its ops (:meth:`operators_for`), or
    when :attr:`libraries`, :meth:`operators` or :attr:`simd` is asked for.
    Its :attr:`ops` and :attr:`names` need no loading.  A kernel file that
    cannot be loaded (no compiler for a checkout's source) raises then, for
    the model that needs it, and not for one that does not.

    Attributes
    ----------
    libraries : list of OpLibrary
        Every library of the bundle (loading those not loaded yet).
    """

    def __init__(self, libraries, name: str = "bundle"):
        # Each entry: an OpProvider, or a DeferredKernel until it is loaded
        # (then replaced by its OpLibrary: one list store, atomic, so no lock
        # that a fork could leave held).
        self._entries = list(libraries)
        self.name = name

    def __reduce__(self):
        # Its libraries travel by their own rules (bundled kernels by name);
        # a kernel file not loaded here is not loaded for the trip either.
        return OpBundle, (list(self._entries), self.name)

    def _loaded(self, i: int) -> OpProvider:
        entry = self._entries[i]
        if isinstance(entry, DeferredKernel):
            # Two threads here at once may each make an OpLibrary of the file;
            # both share its one KernelLibrary and operators (kernel_library
            # keeps one per path), so either may stay in the list.
            lib = entry.load()
            self._entries[i] = lib
            return lib
        return entry

    @property
    def libraries(self) -> list:
        """Every library of the bundle (each loaded on first use)."""
        return [self._loaded(i) for i in range(len(self._entries))]

    def operators(self) -> list:
        """Every library's operators (internal handles)."""
        return [op for lib in self.libraries for op in lib.operators()]

    def operators_for(self, names) -> list:
        """The operators of the libraries that provide any of ``names``, loading only those."""
        wanted = set(names)
        return [
            op
            for i, entry in enumerate(self._entries)
            if any(n in wanted for n, _v in entry.ops)
            for op in self._loaded(i).operators()
        ]

    @property
    def ops(self) -> list[tuple[str, int]]:
        """``(name, version)`` of every op provided (declared: nothing is loaded to tell)."""
        return sorted(op for entry in self._entries for op in entry.ops)

    @property
    def names(self) -> list[str]:
        """The op names provided."""
        return sorted({n for n, _ in self.ops})

    @property
    def simd(self) -> dict[str, str]:
        """``{op name: instruction set}`` for the ops of vectorized libraries (see ``OpLibrary.simd``)."""
        return {n: lib.simd for lib in self.libraries if lib.simd for n in lib.names}

    def __repr__(self) -> str:
        return f"<OpBundle {self.name}: " + ", ".join(f"{n} v{v}" for n, v in self.ops) + ">"
