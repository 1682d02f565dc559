"""Which TFLite runtime is in use, and how it was found."""

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
    """

    path: str
    version: str
    api: str


def load_runtime(library: str | os.PathLike | None = None) -> RuntimeInfo:
    """Load the TFLite C library (once per process) and describe it.

    Parameters
    ----------
    library : path-like, optional
        A specific ``libtensorflowlite_c.so``.  Otherwise the lookup order is
        ``$OPAQUE_OPS_TFLITE_LIB``, the pymicro-wakeword wheel, then the system.

    Returns
    -------
    RuntimeInfo

    Raises
    ------
    RuntimeNotFoundError
        Nothing was found; the message lists every place tried and the fix.
    """
    rt = _native.load_runtime(library)
    api = "TfLiteOperator" if rt.generation == "operator" else "TfLiteRegistrationExternal"
    return RuntimeInfo(path=rt.path, version=rt.version, api=api)


def runtime_info() -> RuntimeInfo:
    """Describe the runtime in use, loading it if needed (see :func:`load_runtime`)."""
    return load_runtime()
