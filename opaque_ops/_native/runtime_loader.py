"""Loading the TFLite C library: the lookup order, what it must export, the error reporter.

A runtime named by the user is loaded or refused, never replaced:

- ``library=`` (``load_runtime(path)``, ``Interpreter(library=...)``), else
- ``$OPAQUE_OPS_TFLITE_LIB``.

If one of them is given, that file is the only candidate.  If it cannot be
used, :class:`RuntimeNotFoundError` says why (missing file, wrong ELF class or
machine, glibc too old, missing symbols, no operator API); testing another
library than the one named would be worse than stopping.

Otherwise the automatic lookup takes the first candidate that loads:

1. ``pymicro_wakeword/lib/libtensorflowlite_c.so`` inside the installed
   pymicro-wakeword wheel, found as ``importlib.util.find_spec`` finds it
   (:func:`find_spec`), so that the package (and its dependency
   pymicro_features) is never imported;
2. the system: ``ctypes.util.find_library("tensorflowlite_c")``.  Asked only
   when the wheel's copy is missing or unusable: it runs ``ldconfig`` and
   costs tens of milliseconds.

A file found automatically whose SHA-256 is not in :mod:`.builds` loads with
a one-line :class:`UnknownRuntimeWarning`; a named file is trusted.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import os
import sys
import warnings

from ..errors import OpLibraryError, RuntimeNotFoundError, UnknownRuntimeWarning
from . import builds, elf
from .ffi import DamagedLibraryError, dlopen, ffi
from .pending import stash_exception

ENV_LIBRARY = "OPAQUE_OPS_TFLITE_LIB"

# RECORD's digests are URL-safe base64 without padding (the wheel format).
_URLSAFE_DIGITS = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def record_hex(b64: str) -> str | None:
    """The hex SHA-256 of a wheel RECORD's ``sha256=`` value, or None if it is not one.

    What ``base64.urlsafe_b64decode(b64 + "=").hex()`` gives for a 32-byte
    digest, decoded here by hand: every process that finds the runtime in
    pymicro-wakeword's wheel reads this one value, and ``binascii`` (which
    ``base64`` is built on) loads zlib, 0.2-1 ms of that start-up.
    ``tests/native/test_runtime.py`` holds it to ``base64``.
    """
    if len(b64) != 43:  # 256 bits in 6-bit digits, the last two bits zero
        return None
    n = 0
    for c in b64:
        v = _URLSAFE_DIGITS.get(c)
        if v is None:
            return None
        n = n << 6 | v
    if n & 3:
        return None  # not the canonical encoding of a digest
    return (n >> 2).to_bytes(32, "big").hex()


# How the file was found (RuntimeInfo.found_by).
BY_ARGUMENT = "library= argument"
BY_ENVIRONMENT = f"${ENV_LIBRARY}"
BY_WHEEL = "pymicro-wakeword wheel"
BY_SYSTEM = 'ctypes.util.find_library("tensorflowlite_c")'

# Every name here must be declared in tflite_c.h: cffi finds only declared
# functions (tests/native/test_runtime.py checks both lists on the wheel's build).
# What opaque_ops calls whatever the model: without these it is not a TFLite
# C library (ai-edge-litert's and tflite-runtime's .so files export only a
# handful of TfLite* helpers).
REQUIRED = (
    "TfLiteVersion",
    "TfLiteModelCreateWithErrorReporter",
    "TfLiteModelDelete",
    "TfLiteInterpreterOptionsCreate",
    "TfLiteInterpreterOptionsDelete",
    "TfLiteInterpreterOptionsSetNumThreads",
    "TfLiteInterpreterOptionsSetErrorReporter",
    "TfLiteInterpreterCreate",
    "TfLiteInterpreterDelete",
    "TfLiteInterpreterAllocateTensors",
    "TfLiteInterpreterInvoke",
    "TfLiteInterpreterGetInputTensorCount",
    "TfLiteInterpreterGetOutputTensorCount",
    "TfLiteInterpreterGetInputTensor",
    "TfLiteInterpreterGetOutputTensor",
    "TfLiteTensorData",
    "TfLiteTensorByteSize",
)
# The opaque kernel API every kernel library and python_op calls back into.
# pymicro-wakeword's armv7l build exports the operator functions but none of
# these: builtin ops run, custom ones cannot.
KERNEL_API = (
    "TfLiteOpaqueNodeNumberOfInputs",
    "TfLiteOpaqueNodeNumberOfOutputs",
    "TfLiteOpaqueNodeGetInput",
    "TfLiteOpaqueNodeGetOutput",
    "TfLiteOpaqueNodeGetUserData",
    "TfLiteOpaqueContextResizeTensor",
    "TfLiteOpaqueContextReportError",
    "TfLiteOpaqueTensorType",
    "TfLiteOpaqueTensorNumDims",
    "TfLiteOpaqueTensorDim",
    "TfLiteOpaqueTensorData",
    "TfLiteOpaqueTensorByteSize",
)


class Runtime:
    """The loaded TFLite C library.

    Attributes
    ----------
    path : str
        The file that was loaded.
    found_by : str
        How: ``library= argument``, ``$OPAQUE_OPS_TFLITE_LIB``, the
        pymicro-wakeword wheel or ``ctypes.util.find_library``.
    named : bool
        True if the user named the file (argument or environment variable).
    version : str
        ``TfLiteVersion()``, e.g. ``"2.17.1"``.
    generation : str
        ``"operator"`` (TfLiteOperator*, TFLite 2.17+) or ``"registration_external"``.
    custom_ops_problem : str or None
        Why kernel libraries and python_ops cannot run on this build, or None.
    """

    def __init__(self, path: str, found_by: str, named: bool):
        self.path = path
        self.found_by = found_by
        self.named = named
        problem = elf.load_problem(path) if os.sep in path else None
        if problem:
            raise _Refused(problem)
        try:
            # RTLD_GLOBAL: kernel libraries are linked to no runtime path; their
            # TfLiteOpaque* references resolve against this library.
            self.lib = dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL)
        except DamagedLibraryError as exc:
            raise _Refused(str(exc)) from None
        except OSError as exc:
            raise _Refused(f"dlopen failed: {exc}") from None
        missing = [name for name in REQUIRED if not self.has(name)]
        if missing:
            raise _Refused(
                f"it is not a TFLite C library: it does not export {', '.join(missing[:6])}"
                + (f" (and {len(missing) - 6} more)" if len(missing) > 6 else "")
                + ". The .so files of tflite-runtime, ai-edge-litert and tensorflow do not "
                "export the C API; libtensorflowlite_c does"
            )
        self.libc = dlopen(None)
        if os.sep not in path:
            self.path = _loaded_from(self.lib, self.libc, path)
        self.version = ffi.string(self.lib.TfLiteVersion()).decode()
        if self.has("TfLiteInterpreterOptionsAddOperator"):
            self.generation = "operator"
            self.add_operator = self.lib.TfLiteInterpreterOptionsAddOperator
            self.operator_name = self.lib.TfLiteOperatorGetCustomName
            self.operator_version = self.lib.TfLiteOperatorGetVersion
        elif self.has("TfLiteInterpreterOptionsAddRegistrationExternal"):
            self.generation = "registration_external"
            self.add_operator = self.lib.TfLiteInterpreterOptionsAddRegistrationExternal
            self.operator_name = self.lib.TfLiteRegistrationExternalGetCustomName
            self.operator_version = self.lib.TfLiteRegistrationExternalGetVersion
        else:
            raise _Refused(
                f"TFLite {self.version} without an operator API: it exports neither "
                "TfLiteInterpreterOptionsAddOperator (2.17+) nor "
                "TfLiteInterpreterOptionsAddRegistrationExternal (2.14-2.16), so no custom op "
                "can be registered"
            )
        # 2.18 gave TfLiteOperatorCreate a fourth parameter (user_data).
        self.create_takes_user_data = self.generation == "operator" and _version_tuple(self.version) >= (2, 18)
        lacking = [name for name in KERNEL_API if not self.has(name)]
        self.custom_ops_problem = None
        if lacking:
            self.custom_ops_problem = (
                (
                    f"the TFLite runtime {path} (TFLite {self.version}) exports none of the opaque "
                    f"kernel API it needs ({', '.join(lacking[:3])}, ...): it was built without it, as "
                    "pymicro-wakeword's armv7l (32-bit Raspberry Pi OS) build is. Builtin-only "
                    "models run on it; custom ops need a libtensorflowlite_c built with the opaque "
                    f"API (a 64-bit OS and the aarch64 wheel, or your own build named in {ENV_LIBRARY})"
                )
                if len(lacking) == len(KERNEL_API)
                else (
                    f"the TFLite runtime {path} (TFLite {self.version}) lacks part of the opaque "
                    f"kernel API ({', '.join(lacking)}), so kernel libraries and python_ops cannot run on it"
                )
            )
        self._digest: str | None = None
        self._digest_lock = _thread.allocate_lock()
        self._reporter = ffi.callback("oo_reporter", _report, onerror=_report_interrupted)

    def has(self, name: str) -> bool:
        """Return True if the loaded library exports the C function ``name``."""
        try:
            getattr(self.lib, name)
        except AttributeError:
            return False
        return True

    @property
    def sha256(self) -> str:
        """SHA-256 of the file, computed on first use (about 1 ms per MB)."""
        with self._digest_lock:
            if self._digest is None:
                self._digest = file_sha256(self.path)
            return self._digest

    @property
    def known_build(self) -> builds.KnownBuild | None:
        """The entry of :data:`.builds.KNOWN_BUILDS` this file is, or None."""
        return builds.BY_DIGEST.get(self.sha256)

    def require_custom_ops(self, what: str) -> None:
        """Raise :class:`OpLibraryError` naming ``what`` if this build cannot run custom kernels."""
        if self.custom_ops_problem:
            raise OpLibraryError(f"cannot use {what}: {self.custom_ops_problem}")

    def __repr__(self) -> str:
        return f"<Runtime TFLite {self.version} at {self.path}>"


class _Refused(Exception):
    """A candidate cannot be used; the message is the reason."""


def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file.

    SHA-256, not :mod:`opaque_ops._digest`'s: it is compared with digests made
    elsewhere (``sha256sum`` for :data:`.builds.KNOWN_BUILDS`, pip's RECORD).
    Imported here, on first use: hashlib loads OpenSSL, 2 to 3 ms that a
    start-up with a known runtime never needs.
    """
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _loaded_from(lib, libc, fallback: str) -> str:
    """The file the dynamic loader picked for ``lib`` (it searched for a bare name)."""
    try:
        info = ffi.new("Dl_info*")
        if libc.dladdr(ffi.cast("void*", lib.TfLiteVersion), info) and info.dli_fname != ffi.NULL:
            return os.path.abspath(ffi.string(info.dli_fname).decode())
    except (AttributeError, UnicodeDecodeError):
        pass
    return fallback


def _format(fmt, args) -> str:
    buf = ffi.new("char[]", 1024)
    _runtime.libc.vsnprintf(buf, 1024, fmt, args)
    return ffi.string(buf).decode("utf-8", "replace")


def _report(user_data, fmt, args):
    # Runs inside C; it must never raise.  The message goes to the sink the
    # handle points at (one per interpreter) instead of stderr.
    try:
        msg = _format(fmt, args)
        ffi.from_handle(user_data).append(msg)
    except Exception:  # pragma: no cover - a failure here has nowhere to go
        pass


def _report_interrupted(exc_type, exc_value, tb):
    # A signal handler (Ctrl-C's KeyboardInterrupt) can fire inside the
    # callback, outside _report's try.  Park it for the Interpreter to raise
    # once the C call returns, instead of cffi printing and dropping it.
    if exc_value is not None:
        stash_exception(exc_value)


_runtime: Runtime | None = None
_runtime_lock = _thread.allocate_lock()


def _after_fork_in_child() -> None:
    # A lock another thread held at the fork stays held in the child, by a
    # thread the child does not have: the child's load_runtime() (every
    # interpreter's first step) or runtime_info() waited forever.  They are
    # re-created, not taken around the fork: a first load holds the lock
    # while it runs ldconfig or hashes the library, and the digest's lock
    # while it reads the file.  _runtime and the digest are stored once
    # complete, so the child finds each finished or absent, and loads or
    # hashes it again itself.  tests/native/test_runtime.py forks inside both.
    global _runtime_lock
    _runtime_lock = _thread.allocate_lock()
    if _runtime is not None:
        _runtime._digest_lock = _thread.allocate_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _named(library) -> tuple[str, str] | None:
    """``(found_by, path)`` of the runtime the user named, or None."""
    if library is not None:
        return BY_ARGUMENT, os.fspath(library)
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return BY_ENVIRONMENT, env
    return None


def find_spec(name: str):
    """``importlib.util.find_spec(name)`` for a top-level module name, without importing importlib.util.

    The imported module's spec if it is imported, else the first spec a
    finder of ``sys.meta_path`` gives (the finder protocol), else None.
    Every process looks up pymicro-wakeword's package this way, and
    importing importlib.util cost that start-up 0.45 ms;
    ``tests/native/test_runtime.py`` holds it to importlib.util's answers.
    """
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, None) if find is not None else None
        if spec is not None:
            return spec
    return None


def _wheel_candidates() -> list[str]:
    spec = find_spec("pymicro_wakeword")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [os.path.join(loc, "lib", "libtensorflowlite_c.so") for loc in spec.submodule_search_locations]


def _load_named(found_by: str, path: str) -> Runtime:
    if os.sep in path and not os.path.exists(path):
        reason = "the file does not exist"
    else:
        try:
            return Runtime(path, found_by, named=True)
        except _Refused as exc:
            reason = str(exc)
    raise RuntimeNotFoundError(
        f"the TFLite runtime named by {found_by} cannot be used: {path}: {reason}. "
        "opaque_ops never falls back to another runtime when one is named; fix the path"
        + (f" or unset {ENV_LIBRARY} to use the automatic lookup" if found_by == BY_ENVIRONMENT else "")
    )


def _load_automatic() -> Runtime:
    tried = []
    wheel = _wheel_candidates()
    if not wheel:
        tried.append(f"  {BY_WHEEL}: pymicro-wakeword is not installed")
    for path in wheel:
        if not os.path.exists(path):
            tried.append(f"  {BY_WHEEL}: {path} does not exist")
            continue
        try:
            return Runtime(path, BY_WHEEL, named=False)
        except _Refused as exc:
            tried.append(f"  {BY_WHEEL}: {path}: {exc}")
    import ctypes.util  # only here: find_library runs ldconfig (tens of ms)

    name = ctypes.util.find_library("tensorflowlite_c")
    if name is None:
        tried.append(f"  {BY_SYSTEM}: not found")
    else:
        try:
            return Runtime(name, BY_SYSTEM, named=False)
        except _Refused as exc:
            tried.append(f"  {BY_SYSTEM}: {name}: {exc}")
    raise RuntimeNotFoundError(
        "no usable libtensorflowlite_c was found. Tried, in order:\n"
        + "\n".join(tried)
        + "\nFix: `pip install pymicro-wakeword` (it ships the library), or set "
        f"{ENV_LIBRARY}=/path/to/libtensorflowlite_c.so"
    )


def _wheel_record_build(path: str) -> builds.KnownBuild | None:
    """The known build that pip's RECORD of the wheel says ``path`` is, or None.

    pip checked the file against RECORD when it installed the wheel; whoever
    can rewrite the file since can rewrite opaque_ops too.  Reading RECORD
    (a few kB) instead of hashing the library saves ~5 ms per process; the
    size is compared as well.  ``runtime_info()`` still hashes the file.
    """
    lib_dir = os.path.dirname(path)
    package = os.path.dirname(lib_dir)
    if os.path.basename(lib_dir) != "lib" or os.path.basename(package) != "pymicro_wakeword":
        return None
    site_dir = os.path.dirname(package)
    try:
        infos = sorted(
            n for n in os.listdir(site_dir) if n.startswith("pymicro_wakeword-") and n.endswith(".dist-info")
        )
    except OSError:
        return None
    member = "pymicro_wakeword/lib/libtensorflowlite_c.so,sha256="
    for info in infos:
        try:
            with open(os.path.join(site_dir, info, "RECORD"), encoding="utf-8") as f:
                record = f.read()
        except (OSError, ValueError):
            continue
        for line in record.splitlines():
            if line.startswith(member):
                b64, _, size = line[len(member) :].partition(",")
                try:
                    build = builds.BY_DIGEST.get(record_hex(b64) or "")
                    if build is not None and int(size) == build.size == os.path.getsize(path):
                        return build
                except (ValueError, OSError):
                    pass
    return None


def _warn_if_unknown(rt: Runtime) -> None:
    """Warn once if an automatically found file is not a known build.

    The wheel's RECORD settles it for the wheel's file; otherwise a size
    that no known build has settles it without reading the file, and a
    matching size costs one hash (about 5 ms for the 4.8 MB wheel build).
    """
    if rt.found_by == BY_WHEEL and _wheel_record_build(rt.path) is not None:
        return
    size = os.path.getsize(rt.path) if os.sep in rt.path else -1
    if size in builds.SIZES and rt.known_build is not None:
        return
    warnings.warn(
        f"opaque_ops: the TFLite runtime {rt.path} (TFLite {rt.version}, found by {rt.found_by}) "
        f"is not a build opaque_ops was tested with; name it in {ENV_LIBRARY} to use it "
        "without this warning",
        UnknownRuntimeWarning,
        stacklevel=4,
    )


def load_runtime(library: str | os.PathLike | None = None) -> Runtime:
    """Load ``libtensorflowlite_c`` once per process (see the module docstring for the rules).

    Parameters
    ----------
    library : path-like, optional
        Use exactly this file.  Only honoured on the first load.

    Returns
    -------
    Runtime

    Raises
    ------
    RuntimeNotFoundError
        The named runtime cannot be used (the message says why), or the
        automatic lookup found nothing usable (it lists every place tried).
    """
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            if library is not None and os.path.realpath(library) != os.path.realpath(_runtime.path):
                raise RuntimeNotFoundError(
                    f"the TFLite runtime is already loaded from {_runtime.path}; a process "
                    f"can hold only one, so library={os.fspath(library)!r} cannot be used now"
                )
            return _runtime
        named = _named(library)
        if named is not None:
            _runtime = _load_named(*named)
        else:
            _runtime = _load_automatic()
            _warn_if_unknown(_runtime)
        return _runtime
