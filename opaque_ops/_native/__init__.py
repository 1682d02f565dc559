"""The binding to the TFLite C library: the only package that touches cffi.

Every C declaration is in ``tflite_c.h`` (read by :mod:`.ffi`); everything
outside this package works with the small wrappers defined here and never
sees a raw pointer.  It is cffi's ABI mode: nothing is compiled to use it.

- :mod:`.runtime`: finding and loading ``libtensorflowlite_c``, the error reporter;
- :mod:`.interp`: models, interpreters, signature runners, tensors;
- :mod:`.kernels`: kernel libraries and their operators;
- :mod:`.pyop`: operators whose callbacks are Python functions;
- :mod:`.delegate`: delegate plugins (``tflite_plugin_create_delegate``);
- :mod:`.lifetime`: freeing C objects that interpreters point to, in a safe order;
- :mod:`.pending`: exceptions raised inside callbacks, re-raised after C returns.
"""

from __future__ import annotations

from .native_interpreter import STATUS_NAMES, TENSOR_ALIGNMENT, TFLITE_TO_NUMPY, ErrorSink, NativeInterpreter, NativeModel, NativeSignatureRunner, TensorRef
from .native_delegate import NativeDelegate
from .kernel_library import ABI_VERSION, KernelLibrary, Operator, kernel_library, parse_stamp
from .pending import pop_pending_exception, stash_exception
from .python_operator import OpaqueNodeView, PyOperator, live_python_operators, make_python_operator
from .runtime_loader import ENV_LIBRARY, Runtime, load_runtime

__all__ = [
    "ABI_VERSION",
    "ENV_LIBRARY",
    "ErrorSink",
    "KernelLibrary",
    "NativeInterpreter",
    "NativeDelegate",
    "NativeModel",
    "NativeSignatureRunner",
    "OpaqueNodeView",
    "Operator",
    "PyOperator",
    "Runtime",
    "STATUS_NAMES",
    "TENSOR_ALIGNMENT",
    "TFLITE_TO_NUMPY",
    "TensorRef",
    "kernel_library",
    "live_python_operators",
    "load_runtime",
    "make_python_operator",
    "parse_stamp",
    "pop_pending_exception",
    "stash_exception",
]
