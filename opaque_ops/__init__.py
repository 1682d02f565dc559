"""opaque_ops: run TensorFlow Lite models with custom operators written in C.

The TFLite C library is driven through cffi's ABI mode; custom-op kernels are
compiled from C against TFLite's opaque kernel API and registered at run time.

Names are imported lazily (PEP 562) so that ``import opaque_ops`` stays cheap
and numpy and the runtime load on first use.
"""

from __future__ import annotations

# Light (no numpy, no cffi): it registers the isolated Interpreter with the
# interpreter layer, which never imports the isolate layer above it.
from . import isolate as _isolate  # noqa: E402,F401
from ._version import __version__  # noqa: F401  (the lowest layer: model.cache reads it too)
from .errors import (  # noqa: F401  (light: no numpy, no cffi)
    CacheError,
    ClosedError,
    CompileError,
    DelegateError,
    InvalidArgumentError,
    InvalidInputError,
    KernelError,
    LiveViewsError,
    MemoryLimitError,
    ModelError,
    NotAllocatedError,
    OpaqueOpsError,
    OpLibraryError,
    ReadOnlyTensorError,
    ReentrantCallError,
    ResizeError,
    RuntimeCrashError,
    RuntimeNotFoundError,
    RuntimeTimeoutError,
    TensorMemoryError,
    TFLiteError,
    UnknownRuntimeWarning,
    UnresolvedOpsError,
    UnsupportedError,
)

_LAZY = {
    "Interpreter": ("interpreter.core", "Interpreter"),
    "SignatureRunner": ("interpreter.signature_runner", "SignatureRunner"),
    "OpResolverType": ("interpreter.core", "OpResolverType"),
    "Delegate": ("ops.delegates", "Delegate"),
    "load_delegate": ("ops.delegates", "load_delegate"),
    "OpLibrary": ("ops.library", "OpLibrary"),
    "compile_ops": ("ops.library", "compile_ops"),
    "load_ops": ("ops.library", "load_ops"),
    "runtime_info": ("runtime", "runtime_info"),
    "load_runtime": ("runtime", "load_runtime"),
    "python_op": ("ops.python_op", "python_op"),
    "kernels": ("kernels", None),
    "model": ("model", None),
    "testing": ("testing", None),
    "isolate": ("isolate", None),
}

__all__ = sorted(
    list(_LAZY)
    + [
        "CacheError",
        "ClosedError",
        "CompileError",
        "DelegateError",
        "InvalidInputError",
        "KernelError",
        "LiveViewsError",
        "MemoryLimitError",
        "ModelError",
        "NotAllocatedError",
        "OpaqueOpsError",
        "OpLibraryError",
        "ReadOnlyTensorError",
        "ReentrantCallError",
        "ResizeError",
        "RuntimeCrashError",
        "RuntimeNotFoundError",
        "RuntimeTimeoutError",
        "TensorMemoryError",
        "TFLiteError",
        "UnknownRuntimeWarning",
        "UnresolvedOpsError",
        "UnsupportedError",
        "__version__",
    ]
)


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'opaque_ops' has no attribute {name!r}") from None
    import importlib

    mod = importlib.import_module(f".{module}", __name__)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
