"""Which TFLite runtime is in use, how it was found, and whether it is a tested build."""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _native


@dataclass(frozen=True)
class RuntimeInfo:
    """The loaded ``libtensorflowlite_c``.

    Attributes
    ----------
    path : str
        The file loaded.
    version : str
        ``TfLiteVersion()``.
    api : str
        ``"TfLiteOperator"`` (TFLite 2.17+) or ``"TfLiteRegistrationExternal"``.
    found_by : str
        ``"library= argument"``, ``"$OPAQUE_OPS_TFLITE_LIB"`` (both: named by
        the user, loaded or refused), ``"pymicro-wakeword wheel"`` or
        ``'ctypes.util.find_library("tensorflowlite_c")'``.
    sha256 : str
        SHA-256 of the file.
    known_build : bool
        True if ``sha256`` is one of the builds opaque_ops is tested with.
    build : str or None
        Where that known build comes from (package, versions, path inside it).
    custom_ops : bool
        False if the build lacks the opaque kernel API (pymicro-wakeword's
        armv7l build): builtin-only models run, kernel libraries and
        python_ops raise :class:`~opaque_ops.OpLibraryError`.
    custom_ops_problem : str or None
        Why custom ops cannot run, when ``custom_ops`` is False.
    xnnpack : bool
        True if the build exports the XNNPACK delegate.
    """

    path: str
    version: str
    api: str
    found_by: str
    sha256: str
    known_build: bool
    build: str | None
    custom_ops: bool
    custom_ops_problem: str | None
    xnnpack: bool


def load_runtime(library: str | os.PathLike | None = None) -> RuntimeInfo:
    """Load the TFLite C library (once per process) and describe it.

    Parameters
    ----------
    library : path-like, optional
        Exactly this ``libtensorflowlite_c.so``: it is loaded, or refused
        with the reason; there is no fallback.  Without it,
        ``$OPAQUE_OPS_TFLITE_LIB`` is used the same way if set; otherwise
        the automatic lookup tries the pymicro-wakeword wheel, then the
        system library path.

    Returns
    -------
    RuntimeInfo

    Raises
    ------
    RuntimeNotFoundError
        The named file cannot be used (missing, wrong architecture, glibc
        too old, not a TFLite C library), or the automatic lookup found
        nothing; the message says why, or lists every place tried.

    Warns
    -----
    UnknownRuntimeWarning
        The automatic lookup loaded a file that is not a known build.
    """
    return _describe(_native.load_runtime(library))


def runtime_info() -> RuntimeInfo:
    """Describe the runtime in use, loading it if needed (see :func:`load_runtime`).

    The file's SHA-256 is computed on the first call if the load did not
    need it (about 6 ms for pymicro-wakeword's 4.8 MB build).
    """
    return load_runtime()


def _describe(rt: _native.Runtime) -> RuntimeInfo:
    known = rt.known_build
    return RuntimeInfo(
        path=rt.path,
        version=rt.version,
        api="TfLiteOperator" if rt.generation == "operator" else "TfLiteRegistrationExternal",
        found_by=rt.found_by,
        sha256=rt.sha256,
        known_build=known is not None,
        build=known.source if known is not None else None,
        custom_ops=rt.custom_ops_problem is None,
        custom_ops_problem=rt.custom_ops_problem,
        xnnpack=rt.has("TfLiteXNNPackDelegateCreate"),
    )
