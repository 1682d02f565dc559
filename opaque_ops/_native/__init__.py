"""The binding to the TFLite C library: the only package that touches cffi.

Every C declaration is in ``tflite_c.h`` (read by :mod:`.ffi`); everything
outside this package works with the small wrappers defined here and never
sees a raw pointer.  It is cffi's ABI mode: nothing is compiled to use it.

- :mod:`.runtime_loader`: finding and loading ``libtensorflowlite_c``, the error reporter;
- :mod:`.native_interpreter`: models, interpreters, signature runners, tensors, and
  :class:`NativeHooks` (what a caller may wrap around one interpreter's calls);
- :mod:`.kernel_library`: kernel libraries and their operators;
- :mod:`.python_operator`: operators whose callbacks are Python functions;
- :mod:`.native_delegate`: delegate plugins (``tflite_plugin_create_delegate``);
- :mod:`.lifetime`: freeing C objects that interpreters point to, in a safe order;
- :mod:`.pending`: exceptions raised inside callbacks, re-raised after C returns;
- :mod:`.fast_calls`: importing the fast calls extension (``c/src/fastcalls.c``) and
  the addresses it calls.

It imports nothing of opaque_ops but :mod:`opaque_ops.errors`: policy (XNNPACK's
op aliases, the host architecture for a message) comes in as arguments
(``tools/import_layers.py`` checks).
"""

from __future__ import annotations

from . import fast_calls
from .kernel_library import ABI_VERSION, KernelLibrary, Operator, kernel_library, parse_stamp
from .native_interpreter import (
    STATUS_NAMES,
    TENSOR_ALIGNMENT,
    TFLITE_TO_NUMPY,
    ErrorSink,
    NativeHooks,
    NativeInterpreter,
    NativeModel,
    NativeSignatureRunner,
    TensorRef,
    mapping_room,
)
from .pending import clear_frames, pop_pending_exception, stash_exception
from .runtime_loader import ENV_LIBRARY, Runtime, load_runtime

# Python operators and delegate plugins are loaded on first use (PEP 562):
# a plain start-up needs neither, and they are 0.3 ms of its imports.
_LAZY = {
    "NativeDelegate": "native_delegate",
    "OpaqueNodeView": "python_operator",
    "PyOperator": "python_operator",
    "live_python_operators": "python_operator",
    "make_python_operator": "python_operator",
}


def __getattr__(name: str) -> object:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ABI_VERSION",
    "ENV_LIBRARY",
    "ErrorSink",
    "KernelLibrary",
    "NativeHooks",
    "NativeInterpreter",
    "NativeDelegate",
    "NativeModel",
    "NativeSignatureRunner",
    "OpaqueNodeView",
    "Operator",
    "PyOperator",
    "Runtime",
    "fast_calls",
    "STATUS_NAMES",
    "TENSOR_ALIGNMENT",
    "TFLITE_TO_NUMPY",
    "TensorRef",
    "kernel_library",
    "live_python_operators",
    "load_runtime",
    "make_python_operator",
    "mapping_room",
    "parse_stamp",
    "clear_frames",
    "pop_pending_exception",
    "stash_exception",
]
