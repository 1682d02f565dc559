"""Every C declaration opaque_ops uses, and the code that loads C libraries.

This is the only module that touches ``ffi`` and ``lib``; everything else in
the package works with the small wrappers defined here and never sees a raw
pointer.  It is cffi's ABI mode: nothing is compiled to use the binding.

Where the runtime comes from (first hit wins):

1. an explicit ``library=`` path, or the ``OPAQUE_OPS_TFLITE_LIB`` environment
   variable;
2. ``pymicro_wakeword/lib/libtensorflowlite_c.so`` inside the installed
   pymicro-wakeword wheel, found with ``importlib.util.find_spec`` so that the
   package (and its dependency pymicro_features) is never imported;
3. the system: ``ctypes.util.find_library("tensorflowlite_c")``.
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
import struct
import threading
from pathlib import Path

from cffi import FFI

from ._cbuild import host_arch
from .errors import OpLibraryError, RuntimeNotFoundError

# Bumped together with OPAQUE_OPS_ABI_VERSION in c/include/opaque_ops.h.
ABI_VERSION = 1

ENV_LIBRARY = "OPAQUE_OPS_TFLITE_LIB"

ffi = FFI()

# Declarations written from the upstream C API (c_api.h, c_api_opaque.h,
# operator.h).  Functions missing from the loaded library are harmless until
# called; ``Runtime.has`` tells which exist.
ffi.cdef(
    """
typedef int TfLiteStatus;  /* an enum in C; same ABI as int */
typedef struct TfLiteModel TfLiteModel;
typedef struct TfLiteInterpreterOptions TfLiteInterpreterOptions;
typedef struct TfLiteInterpreter TfLiteInterpreter;
typedef struct TfLiteTensor TfLiteTensor;
typedef struct TfLiteSignatureRunner TfLiteSignatureRunner;
typedef struct TfLiteOperator TfLiteOperator;
typedef struct TfLiteOpaqueContext TfLiteOpaqueContext;
typedef struct TfLiteOpaqueNode TfLiteOpaqueNode;
typedef struct TfLiteOpaqueTensor TfLiteOpaqueTensor;
typedef struct TfLiteOpaqueDelegateStruct TfLiteOpaqueDelegate;

typedef struct { float scale; int32_t zero_point; } TfLiteQuantizationParams;
typedef struct { int size; int data[]; } TfLiteIntArray;

const char* TfLiteVersion(void);
int TfLiteSchemaVersion(void);
int TfLiteOpaqueTensorGetAllocationType(const TfLiteOpaqueTensor* tensor);

/* The reporter's va_list is declared as void*: on x86-64 a va_list is an
   array and decays to a pointer, and on AArch64 the 32-byte va_list struct
   is passed by reference, so a pointer is what arrives in both cases.  It is
   only ever handed back to vsnprintf with the same declaration. */
typedef void (*oo_reporter)(void* user_data, const char* format, void* args);

TfLiteModel* TfLiteModelCreate(const void* model_data, size_t model_size);
TfLiteModel* TfLiteModelCreateWithErrorReporter(const void* model_data, size_t model_size,
                                                oo_reporter reporter, void* user_data);
void TfLiteModelDelete(TfLiteModel* model);

TfLiteInterpreterOptions* TfLiteInterpreterOptionsCreate(void);
void TfLiteInterpreterOptionsDelete(TfLiteInterpreterOptions* options);
void TfLiteInterpreterOptionsSetNumThreads(TfLiteInterpreterOptions* options, int32_t n);
void TfLiteInterpreterOptionsSetErrorReporter(TfLiteInterpreterOptions* options,
                                              oo_reporter reporter, void* user_data);
void TfLiteInterpreterOptionsAddOperator(TfLiteInterpreterOptions* options,
                                         TfLiteOperator* op);
void TfLiteInterpreterOptionsAddRegistrationExternal(TfLiteInterpreterOptions* options,
                                                     TfLiteOperator* op);
void TfLiteInterpreterOptionsAddDelegate(TfLiteInterpreterOptions* options,
                                         TfLiteOpaqueDelegate* delegate);
TfLiteStatus TfLiteInterpreterOptionsEnableCancellation(TfLiteInterpreterOptions* options,
                                                        bool enable);

TfLiteInterpreter* TfLiteInterpreterCreate(const TfLiteModel* model,
                                           const TfLiteInterpreterOptions* options);
TfLiteInterpreter* TfLiteInterpreterCreateWithSelectedOps(
    const TfLiteModel* model, const TfLiteInterpreterOptions* options);
void TfLiteInterpreterDelete(TfLiteInterpreter* interpreter);
int32_t TfLiteInterpreterGetInputTensorCount(const TfLiteInterpreter* interpreter);
const int* TfLiteInterpreterInputTensorIndices(const TfLiteInterpreter* interpreter);
TfLiteTensor* TfLiteInterpreterGetInputTensor(const TfLiteInterpreter* interpreter,
                                              int32_t input_index);
TfLiteStatus TfLiteInterpreterResizeInputTensor(TfLiteInterpreter* interpreter,
                                                int32_t input_index, const int* input_dims,
                                                int32_t input_dims_size);
TfLiteStatus TfLiteInterpreterAllocateTensors(TfLiteInterpreter* interpreter);
TfLiteStatus TfLiteInterpreterInvoke(TfLiteInterpreter* interpreter);
TfLiteStatus TfLiteInterpreterCancel(const TfLiteInterpreter* interpreter);
int32_t TfLiteInterpreterGetOutputTensorCount(const TfLiteInterpreter* interpreter);
const int* TfLiteInterpreterOutputTensorIndices(const TfLiteInterpreter* interpreter);
const TfLiteTensor* TfLiteInterpreterGetOutputTensor(const TfLiteInterpreter* interpreter,
                                                     int32_t output_index);
TfLiteTensor* TfLiteInterpreterGetTensor(const TfLiteInterpreter* interpreter, int index);

int32_t TfLiteInterpreterGetSignatureCount(const TfLiteInterpreter* interpreter);
const char* TfLiteInterpreterGetSignatureKey(const TfLiteInterpreter* interpreter,
                                             int32_t signature_index);
TfLiteSignatureRunner* TfLiteInterpreterGetSignatureRunner(
    const TfLiteInterpreter* interpreter, const char* signature_key);
size_t TfLiteSignatureRunnerGetInputCount(const TfLiteSignatureRunner* runner);
const char* TfLiteSignatureRunnerGetInputName(const TfLiteSignatureRunner* runner,
                                              int32_t input_index);
TfLiteStatus TfLiteSignatureRunnerResizeInputTensor(TfLiteSignatureRunner* runner,
                                                    const char* input_name,
                                                    const int* input_dims,
                                                    int32_t input_dims_size);
TfLiteStatus TfLiteSignatureRunnerAllocateTensors(TfLiteSignatureRunner* runner);
TfLiteTensor* TfLiteSignatureRunnerGetInputTensor(TfLiteSignatureRunner* runner,
                                                  const char* input_name);
TfLiteStatus TfLiteSignatureRunnerInvoke(TfLiteSignatureRunner* runner);
size_t TfLiteSignatureRunnerGetOutputCount(const TfLiteSignatureRunner* runner);
const char* TfLiteSignatureRunnerGetOutputName(const TfLiteSignatureRunner* runner,
                                               int32_t output_index);
const TfLiteTensor* TfLiteSignatureRunnerGetOutputTensor(const TfLiteSignatureRunner* runner,
                                                         const char* output_name);
void TfLiteSignatureRunnerDelete(TfLiteSignatureRunner* runner);

int TfLiteTensorType(const TfLiteTensor* tensor);
int32_t TfLiteTensorNumDims(const TfLiteTensor* tensor);
int32_t TfLiteTensorDim(const TfLiteTensor* tensor, int32_t dim_index);
size_t TfLiteTensorByteSize(const TfLiteTensor* tensor);
void* TfLiteTensorData(const TfLiteTensor* tensor);
const char* TfLiteTensorName(const TfLiteTensor* tensor);
TfLiteQuantizationParams TfLiteTensorQuantizationParams(const TfLiteTensor* tensor);
TfLiteStatus TfLiteTensorCopyFromBuffer(TfLiteTensor* tensor, const void* input_data,
                                        size_t input_data_size);
TfLiteStatus TfLiteTensorCopyToBuffer(const TfLiteTensor* output_tensor, void* output_data,
                                      size_t output_data_size);

/* Operators: both generations and both arities of Create.  Which one a call
   goes to is decided in Runtime.__init__. */
TfLiteOperator* TfLiteOperatorCreateWithData(int builtin_code, const char* custom_name,
                                             int version, void* user_data);
void TfLiteOperatorDelete(TfLiteOperator* op);
void TfLiteRegistrationExternalDelete(TfLiteOperator* op);
const char* TfLiteOperatorGetCustomName(const TfLiteOperator* op);
const char* TfLiteRegistrationExternalGetCustomName(const TfLiteOperator* op);
int TfLiteOperatorGetVersion(const TfLiteOperator* op);
int TfLiteRegistrationExternalGetVersion(const TfLiteOperator* op);

/* libc, for the error reporter. */
int vsnprintf(char* str, size_t size, const char* format, void* args);

/* What every kernel library exports (c/src/opaque_ops_runtime.c). */
const char* OpaqueOps_Stamp(void);
int OpaqueOps_NumOps(void);
const char* OpaqueOps_OpName(int index);
int OpaqueOps_OpVersion(int index);
TfLiteOperator* OpaqueOps_MakeOperator(int index);
const char* OpaqueOps_LastError(void);
"""
)

def _lookup_order(library: str | os.PathLike | None) -> list[tuple[str, str | None]]:
    """Return ``(description, path)`` candidates in the documented order."""
    found: list[tuple[str, str | None]] = []
    if library is not None:
        found.append(("library= argument", os.fspath(library)))
    env = os.environ.get(ENV_LIBRARY)
    if env:
        found.append((f"${ENV_LIBRARY}", env))
    spec = importlib.util.find_spec("pymicro_wakeword")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            found.append(("pymicro-wakeword wheel", str(Path(loc) / "lib" / "libtensorflowlite_c.so")))
    else:
        found.append(("pymicro-wakeword wheel", None))
    found.append(('ctypes.util.find_library("tensorflowlite_c")', ctypes.util.find_library("tensorflowlite_c")))
    return found


class Runtime:
    """The loaded TFLite C library.

    Attributes
    ----------
    path : str
        The file that was loaded.
    version : str
        ``TfLiteVersion()``, e.g. ``"2.17.1"``.
    generation : str
        ``"operator"`` (TfLiteOperator*, TFLite 2.17+) or ``"registration_external"``.
    """

    def __init__(self, path: str):
        self.path = path
        # RTLD_GLOBAL: kernel libraries are linked to no runtime path; their
        # TfLiteOpaque* references resolve against this library.
        self.lib = ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL)
        self.libc = ffi.dlopen(None)
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
            raise RuntimeNotFoundError(
                f"{path} (TFLite {self.version}) exports neither "
                "TfLiteInterpreterOptionsAddOperator nor "
                "TfLiteInterpreterOptionsAddRegistrationExternal, so it cannot run custom ops; "
                f"point {ENV_LIBRARY} at a libtensorflowlite_c built with the C API"
            )
        self._reporter = ffi.callback("oo_reporter", _report, onerror=_report_interrupted)

    def has(self, name: str) -> bool:
        """Return True if the loaded library exports the C function ``name``."""
        try:
            getattr(self.lib, name)
        except AttributeError:
            return False
        return True

    def __repr__(self) -> str:
        return f"<Runtime TFLite {self.version} at {self.path}>"


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
_runtime_lock = threading.Lock()


def load_runtime(library: str | os.PathLike | None = None) -> Runtime:
    """Load ``libtensorflowlite_c`` once per process, following the lookup order.

    Parameters
    ----------
    library : path-like, optional
        Use this file instead of searching.  Only honoured on the first load.

    Returns
    -------
    Runtime

    Raises
    ------
    RuntimeNotFoundError
        Nothing loadable was found; the message lists every place tried.
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
        tried = []
        for where, path in _lookup_order(library):
            if path is None:
                tried.append(f"  {where}: not found")
                continue
            if not os.path.exists(path) and os.sep in path:
                tried.append(f"  {where}: {path} does not exist")
                continue
            try:
                _runtime = Runtime(path)
                return _runtime
            except OSError as exc:
                tried.append(f"  {where}: {path} could not be loaded ({exc})")
        raise RuntimeNotFoundError(
            "no usable libtensorflowlite_c was found. Tried, in order:\n"
            + "\n".join(tried)
            + "\nFix: `pip install pymicro-wakeword` (it ships the library), or set "
            f"{ENV_LIBRARY}=/path/to/libtensorflowlite_c.so"
        )


# --------------------------------------------------------------- kernels --


def _elf_machine(path: str) -> str | None:
    """Return the ELF target of a shared library (for a clear error), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    endian = "<" if head[5] == 1 else ">"
    machine = struct.unpack(endian + "H", head[18:20])[0]
    return {0x3E: "x86_64", 0xB7: "aarch64", 0x28: "arm", 0x03: "x86"}.get(machine, hex(machine))


def parse_stamp(stamp: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in stamp.split(";") if "=" in p)


class KernelLibrary:
    """A loaded kernel library (compiled by ``compile_ops`` or ``build.py``).

    The handle is never closed: TFLite may call into the library for as long
    as any interpreter that was given one of its operators exists, and
    Python cannot prove when that ends.
    """

    def __init__(self, path: str):
        runtime = load_runtime()
        arch = _elf_machine(path)
        if arch is not None and arch != host_arch():
            raise OpLibraryError(
                f"{path} is built for {arch}, but this machine is {host_arch()}; "
                f"rebuild it with `python build.py SOURCE --target {host_arch()}`"
            )
        try:
            self._lib = ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_LOCAL)
        except OSError as exc:
            raise OpLibraryError(f"could not load kernel library {path}: {exc}") from None
        try:
            stamp = ffi.string(self._lib.OpaqueOps_Stamp()).decode()
        except AttributeError:
            raise OpLibraryError(
                f"{path} is not an opaque_ops kernel library (no OpaqueOps_Stamp); build it "
                "with opaque_ops.compile_ops() or build.py, which add the runtime glue"
            ) from None
        fields = parse_stamp(stamp)
        if fields.get("abi") != str(ABI_VERSION):
            raise OpLibraryError(
                f"{path} was built with opaque_ops header ABI {fields.get('abi')} "
                f"(header {fields.get('header')}), but this opaque_ops expects ABI {ABI_VERSION}; "
                "rebuild the library with this version of opaque_ops"
            )
        self.path = path
        self.stamp = fields
        self.runtime = runtime
        self._ops: dict[int, Operator] = {}
        self._ops_lock = threading.Lock()

    def op_defs(self) -> list[tuple[str, int]]:
        """Return the ``(name, version)`` of every op the library declares (version 0 = from the factory)."""
        out = []
        for i in range(self._lib.OpaqueOps_NumOps()):
            out.append((ffi.string(self._lib.OpaqueOps_OpName(i)).decode(), self._lib.OpaqueOps_OpVersion(i)))
        return out

    def make_operator(self, index: int) -> "Operator":
        """The operator of op number ``index``, built on first request and then reused."""
        with self._ops_lock:
            op = self._ops.get(index)
            if op is None:
                ptr = self._lib.OpaqueOps_MakeOperator(index)
                if ptr == ffi.NULL:
                    raise OpLibraryError(
                        f"{self.path}: could not create op #{index}: "
                        + ffi.string(self._lib.OpaqueOps_LastError()).decode()
                    )
                op = self._ops[index] = Operator(ptr, owner=self)
            return op


# One KernelLibrary per file for the life of the process: dlopen returns the
# same handle for the same path anyway, and its operators are never freed
# (see Operator), so building them once per file bounds what is kept.
_kernel_libraries: dict[str, KernelLibrary] = {}
_kernel_libraries_lock = threading.Lock()


def kernel_library(path: str) -> KernelLibrary:
    """Load (once) the kernel library at ``path`` (absolute)."""
    with _kernel_libraries_lock:
        lib = _kernel_libraries.get(path)
        if lib is None:
            lib = _kernel_libraries[path] = KernelLibrary(path)
        return lib


class Operator:
    """One ``TfLiteOperator``, never deleted.

    TFLite keeps a pointer to the operator in every interpreter it was added
    to, and calls its ``free`` when such an interpreter is deleted.  The
    garbage collector may finalize an operator before an interpreter that
    uses it (objects in a reference cycle die in any order), so deleting it
    could leave TFLite a dangling pointer.  A guide-style factory may also
    hand out a singleton that is not ours to delete.  The cost is one small
    allocation per op and library (or per python_op), for the process's life.
    """

    def __init__(self, ptr, owner, keepalive=()):
        self._ptr = ptr
        # The library (or Python callbacks) whose code the operator points into.
        self._owner = owner
        self._keepalive = keepalive
        rt = load_runtime()
        self.name = ffi.string(rt.operator_name(ptr)).decode()
        self.version = int(rt.operator_version(ptr))


# ----------------------------------------------------------- interpreter --

import numpy as _np  # noqa: E402  (kept next to its only users)

# TfLiteType -> numpy dtype.  Types numpy has no match for map to None.
TFLITE_TO_NUMPY = {
    1: _np.dtype(_np.float32),
    2: _np.dtype(_np.int32),
    3: _np.dtype(_np.uint8),
    4: _np.dtype(_np.int64),
    5: _np.dtype(object),
    6: _np.dtype(_np.bool_),
    7: _np.dtype(_np.int16),
    8: _np.dtype(_np.complex64),
    9: _np.dtype(_np.int8),
    10: _np.dtype(_np.float16),
    11: _np.dtype(_np.float64),
    12: _np.dtype(_np.complex128),
    13: _np.dtype(_np.uint64),
    16: _np.dtype(_np.uint32),
    17: _np.dtype(_np.uint16),
}

STATUS_NAMES = {
    0: "ok",
    1: "error",
    2: "delegate error",
    3: "application error",
    7: "unresolved ops",
    8: "cancelled",
    9: "output shape not known",
}


class TensorRef:
    """A tensor of a live interpreter: metadata and data access, no raw pointer outside."""

    __slots__ = ("_t", "_owner")

    def __init__(self, ptr, owner):
        self._t = ptr
        # The interpreter whose memory the tensor lives in.
        self._owner = owner

    @property
    def name(self) -> str:
        p = _runtime.lib.TfLiteTensorName(self._t)
        return ffi.string(p).decode() if p != ffi.NULL else ""

    @property
    def type(self) -> int:
        return int(_runtime.lib.TfLiteTensorType(self._t))

    @property
    def dtype(self):
        return TFLITE_TO_NUMPY.get(self.type)

    @property
    def shape(self) -> tuple[int, ...]:
        lib = _runtime.lib
        n = lib.TfLiteTensorNumDims(self._t)
        return tuple(int(lib.TfLiteTensorDim(self._t, i)) for i in range(max(n, 0)))

    @property
    def nbytes(self) -> int:
        return int(_runtime.lib.TfLiteTensorByteSize(self._t))

    @property
    def quantization(self) -> tuple[float, int]:
        q = _runtime.lib.TfLiteTensorQuantizationParams(self._t)
        return float(q.scale), int(q.zero_point)

    def is_dynamic(self) -> bool:
        """True if TFLite may move or resize the tensor during invoke (kTfLiteDynamic)."""
        # A TfLiteTensor* is what the opaque API's TfLiteOpaqueTensor* points to.
        opaque = ffi.cast("TfLiteOpaqueTensor*", self._t)
        return int(_runtime.lib.TfLiteOpaqueTensorGetAllocationType(opaque)) == 4

    def has_data(self) -> bool:
        return _runtime.lib.TfLiteTensorData(self._t) != ffi.NULL

    def view(self):
        """A numpy array over the tensor's own memory (valid until the next allocate/resize)."""
        dtype = self.dtype
        data = _runtime.lib.TfLiteTensorData(self._t)
        if dtype is None or dtype == object:
            return None
        if data == ffi.NULL:
            shape = self.shape
            # A tensor with no elements has no buffer; it is still a valid (empty) array.
            return _np.empty(shape, dtype) if 0 in shape else None
        arr = _np.frombuffer(ffi.buffer(data, self.nbytes), dtype=dtype)
        return arr.reshape(self.shape)

    def read(self):
        """A copy of the tensor's contents."""
        v = self.view()
        return None if v is None else v.copy()

    def write(self, array) -> int:
        """Copy a C-contiguous array of exactly ``nbytes`` bytes in; return the status."""
        return int(
            _runtime.lib.TfLiteTensorCopyFromBuffer(self._t, ffi.from_buffer(array), array.nbytes)
        )


class ErrorSink(list):
    """Messages the runtime reported through one interpreter's error reporter."""

    def take(self) -> list[str]:
        out = [m.strip() for m in self if m.strip()]
        self.clear()
        return out


class NativeModel:
    """``TfLiteModel`` plus the bytes it points into (TFLite does not copy them)."""

    def __init__(self, data: bytes):
        rt = load_runtime()
        self.sink = ErrorSink()
        self._handle = ffi.new_handle(self.sink)
        # Keep-alive: the model reads these bytes for as long as it exists.
        self._data = ffi.from_buffer(data)
        self._bytes = data
        self._ptr = rt.lib.TfLiteModelCreateWithErrorReporter(
            self._data, len(data), rt._reporter, self._handle
        )
        self.ok = self._ptr != ffi.NULL

    def close(self):
        if getattr(self, "_ptr", None) not in (None, ffi.NULL):
            _runtime.lib.TfLiteModelDelete(self._ptr)
        self._ptr = None

    __del__ = close


# XNNPACK delegate (xnnpack_delegate.h).  Only num_threads (offset 0) is
# stable across releases; the rest of the options struct changes layout, so
# it is declared as an opaque tail large enough for any release.  The struct
# is over 16 bytes in every release that has the TfLiteOperator API, so it is
# returned through a caller-provided buffer on x86-64 and AArch64 alike.
ffi.cdef(
    """
typedef struct { int32_t num_threads; uint32_t oo_opaque_tail[63]; } oo_xnnpack_options;
oo_xnnpack_options TfLiteXNNPackDelegateOptionsDefault(void);
TfLiteOpaqueDelegate* TfLiteXNNPackDelegateCreate(const oo_xnnpack_options* options);
void TfLiteXNNPackDelegateDelete(TfLiteOpaqueDelegate* delegate);
"""
)


def _xnnpack_delegate(rt: Runtime, num_threads):
    """Create an XNNPACK delegate, or return None if the runtime has none.

    The C API's ``TfLiteInterpreterCreate`` applies no default delegate (its
    op resolver is ``BuiltinOpResolverWithoutDefaultDelegates``), so XNNPACK
    runs only when added explicitly with ``TfLiteInterpreterOptionsAddDelegate``.
    """
    if not (rt.has("TfLiteXNNPackDelegateCreate") and rt.has("TfLiteXNNPackDelegateDelete")):
        return None
    if num_threads is not None and int(num_threads) > 1 and rt.has("TfLiteXNNPackDelegateOptionsDefault"):
        opts = ffi.new("oo_xnnpack_options*", rt.lib.TfLiteXNNPackDelegateOptionsDefault())
        opts.num_threads = int(num_threads)
        ptr = rt.lib.TfLiteXNNPackDelegateCreate(opts)
    else:
        ptr = rt.lib.TfLiteXNNPackDelegateCreate(ffi.NULL)  # library defaults: single-threaded
    return None if ptr == ffi.NULL else ptr


def _closed_call(*_args):
    raise RuntimeError("the native interpreter is closed")


class NativeInterpreter:
    """``TfLiteInterpreter`` with its options, model and operators, freed in order.

    Deleting goes interpreter -> options -> model: the interpreter reads the
    model and calls the operators' code until it is gone.
    """

    def __init__(self, model: NativeModel, operators, num_threads=None, cancellable=True,
                 use_xnnpack=False):
        rt = load_runtime()
        self.rt = rt
        self._xnnpack = None
        self.sink = ErrorSink()
        self._handle = ffi.new_handle(self.sink)
        # Keep-alive: model bytes and the operators (and through them, the
        # kernel libraries and Python callbacks) must outlive the interpreter.
        self._model = model
        self._operators = list(operators)
        self._interp = None
        self._options = rt.lib.TfLiteInterpreterOptionsCreate()
        rt.lib.TfLiteInterpreterOptionsSetErrorReporter(self._options, rt._reporter, self._handle)
        if num_threads is not None:
            rt.lib.TfLiteInterpreterOptionsSetNumThreads(self._options, int(num_threads))
        if cancellable and rt.has("TfLiteInterpreterOptionsEnableCancellation"):
            rt.lib.TfLiteInterpreterOptionsEnableCancellation(self._options, True)
        for op in self._operators:
            rt.add_operator(self._options, op._ptr)
        if use_xnnpack:
            # Applied inside TfLiteInterpreterCreate; it must outlive the interpreter.
            self._xnnpack = _xnnpack_delegate(rt, num_threads)
            if self._xnnpack is not None:
                rt.lib.TfLiteInterpreterOptionsAddDelegate(self._options, self._xnnpack)
        self.xnnpack = self._xnnpack is not None
        self._interp = rt.lib.TfLiteInterpreterCreate(model._ptr, self._options)
        self.ok = self._interp != ffi.NULL
        # invoke() is the hot path: a C-level partial, no Python frame between
        # the caller and TfLiteInterpreterInvoke.  close() swaps it out before
        # freeing the interpreter it points to.
        self.invoke = (functools.partial(rt.lib.TfLiteInterpreterInvoke, self._interp)
                       if self.ok else _closed_call)

    # -- lifetime
    def close(self):
        lib = _runtime.lib if _runtime is not None else None
        if lib is None:
            return
        self.invoke = _closed_call
        if getattr(self, "_interp", None) not in (None, ffi.NULL):
            lib.TfLiteInterpreterDelete(self._interp)
        self._interp = None
        if getattr(self, "_options", None) not in (None, ffi.NULL):
            lib.TfLiteInterpreterOptionsDelete(self._options)
        self._options = None
        if getattr(self, "_xnnpack", None) is not None:
            lib.TfLiteXNNPackDelegateDelete(self._xnnpack)
        self._xnnpack = None

    __del__ = close

    # -- calls that return a status
    def allocate(self) -> int:
        return int(self.rt.lib.TfLiteInterpreterAllocateTensors(self._interp))

    def cancel(self) -> int:
        return int(self.rt.lib.TfLiteInterpreterCancel(self._interp))

    def resize_input(self, position: int, shape) -> int:
        dims = ffi.new("int[]", [int(d) for d in shape])
        return int(self.rt.lib.TfLiteInterpreterResizeInputTensor(self._interp, position, dims, len(shape)))

    # -- structure
    def input_indices(self) -> list[int]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetInputTensorCount(self._interp)
        p = lib.TfLiteInterpreterInputTensorIndices(self._interp)
        return [int(p[i]) for i in range(n)]

    def output_indices(self) -> list[int]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetOutputTensorCount(self._interp)
        p = lib.TfLiteInterpreterOutputTensorIndices(self._interp)
        return [int(p[i]) for i in range(n)]

    def tensor(self, index: int) -> TensorRef | None:
        t = self.rt.lib.TfLiteInterpreterGetTensor(self._interp, int(index))
        return None if t == ffi.NULL else TensorRef(t, self)

    def input_tensor(self, position: int) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteInterpreterGetInputTensor(self._interp, position), self)

    def output_tensor(self, position: int) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteInterpreterGetOutputTensor(self._interp, position), self)

    def signature_keys(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetSignatureCount(self._interp)
        return [ffi.string(lib.TfLiteInterpreterGetSignatureKey(self._interp, i)).decode() for i in range(n)]

    def signature_runner(self, key: str) -> "NativeSignatureRunner | None":
        ptr = self.rt.lib.TfLiteInterpreterGetSignatureRunner(self._interp, key.encode())
        return None if ptr == ffi.NULL else NativeSignatureRunner(ptr, self)


class NativeSignatureRunner:
    """``TfLiteSignatureRunner``; keeps its interpreter alive and is deleted before it."""

    def __init__(self, ptr, interp: NativeInterpreter):
        self._ptr = ptr
        self._interp = interp  # keep-alive: the runner points into it
        self.rt = interp.rt

    def close(self):
        if getattr(self, "_ptr", None) is not None and self._interp._interp is not None:
            self.rt.lib.TfLiteSignatureRunnerDelete(self._ptr)
        self._ptr = None

    __del__ = close

    def input_names(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteSignatureRunnerGetInputCount(self._ptr)
        return [ffi.string(lib.TfLiteSignatureRunnerGetInputName(self._ptr, i)).decode() for i in range(n)]

    def output_names(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteSignatureRunnerGetOutputCount(self._ptr)
        return [ffi.string(lib.TfLiteSignatureRunnerGetOutputName(self._ptr, i)).decode() for i in range(n)]

    def input_tensor(self, name: str) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteSignatureRunnerGetInputTensor(self._ptr, name.encode()), self)

    def output_tensor(self, name: str) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteSignatureRunnerGetOutputTensor(self._ptr, name.encode()), self)

    def resize_input(self, name: str, shape) -> int:
        dims = ffi.new("int[]", [int(d) for d in shape])
        return int(self.rt.lib.TfLiteSignatureRunnerResizeInputTensor(self._ptr, name.encode(), dims, len(shape)))

    def allocate(self) -> int:
        return int(self.rt.lib.TfLiteSignatureRunnerAllocateTensors(self._ptr))

    def invoke(self) -> int:
        return int(self.rt.lib.TfLiteSignatureRunnerInvoke(self._ptr))


# ====================================================================== #
# Kernel author's toolkit: guarded outputs (testing.run_op) and Python ops #
# (pyop.python_op).  Everything below is additive; it declares its own    #
# functions in a separate cdef and touches nothing above.                 #
# ====================================================================== #

ffi.cdef(
    """
typedef struct { void* data; size_t bytes; } TfLiteCustomAllocation;
TfLiteStatus TfLiteInterpreterSetCustomAllocationForTensor(
    TfLiteInterpreter* interpreter, int tensor_index,
    const TfLiteCustomAllocation* allocation, int64_t flags);

int32_t TfLiteOpaqueNodeNumberOfInputs(const TfLiteOpaqueNode* node);
int32_t TfLiteOpaqueNodeNumberOfOutputs(const TfLiteOpaqueNode* node);
const TfLiteOpaqueTensor* TfLiteOpaqueNodeGetInput(const TfLiteOpaqueContext* context,
                                                   const TfLiteOpaqueNode* node, int index);
TfLiteOpaqueTensor* TfLiteOpaqueNodeGetOutput(TfLiteOpaqueContext* context,
                                              const TfLiteOpaqueNode* node, int index);
int TfLiteOpaqueTensorType(const TfLiteOpaqueTensor* tensor);
int32_t TfLiteOpaqueTensorNumDims(const TfLiteOpaqueTensor* tensor);
int32_t TfLiteOpaqueTensorDim(const TfLiteOpaqueTensor* tensor, int32_t dim_index);
size_t TfLiteOpaqueTensorByteSize(const TfLiteOpaqueTensor* tensor);
void* TfLiteOpaqueTensorData(const TfLiteOpaqueTensor* tensor);
TfLiteIntArray* TfLiteIntArrayCreate(int size);
TfLiteStatus TfLiteOpaqueContextResizeTensor(TfLiteOpaqueContext* context,
                                             TfLiteOpaqueTensor* tensor, TfLiteIntArray* new_size);
void TfLiteOpaqueContextReportError(TfLiteOpaqueContext* context, const char* format, ...);
void* TfLiteOpaqueNodeGetUserData(const TfLiteOpaqueNode* opaque_node);

typedef void* (*oo_py_init)(TfLiteOpaqueContext* context, const char* buffer, size_t length);
typedef void (*oo_py_free)(TfLiteOpaqueContext* context, void* data);
typedef TfLiteStatus (*oo_py_step)(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node);

/* 2.17 arity; 2.18+ takes a fourth void* user_data (reached through a cast). */
TfLiteOperator* TfLiteOperatorCreate(int builtin_code, const char* custom_name, int version);
void TfLiteOperatorSetInit(TfLiteOperator* op, oo_py_init init);
void TfLiteOperatorSetFree(TfLiteOperator* op, oo_py_free free);
void TfLiteOperatorSetPrepare(TfLiteOperator* op, oo_py_step prepare);
void TfLiteOperatorSetInvoke(TfLiteOperator* op, oo_py_step invoke);
TfLiteOperator* TfLiteRegistrationExternalCreate(int builtin_code, const char* custom_name,
                                                 int version);
void TfLiteRegistrationExternalSetInit(TfLiteOperator* op, oo_py_init init);
void TfLiteRegistrationExternalSetFree(TfLiteOperator* op, oo_py_free free);
void TfLiteRegistrationExternalSetPrepare(TfLiteOperator* op, oo_py_step prepare);
void TfLiteRegistrationExternalSetInvoke(TfLiteOperator* op, oo_py_step invoke);
"""
)

# kTfLiteCustomAllocationFlagsSkipAlignCheck is never passed: the buffers
# handed in are aligned to TFLite's kDefaultTensorAlignment.
TENSOR_ALIGNMENT = 64
_BUILTIN_CUSTOM = 32  # kTfLiteBuiltinCustom


def _set_custom_allocation(self, tensor_index: int, buffer) -> int:
    """Make tensor ``tensor_index`` live in ``buffer`` (a writable, 64-byte aligned numpy array).

    TFLite keeps only the pointer, so the buffer is kept alive on this
    object for as long as the interpreter exists.  ``AllocateTensors`` must
    run afterwards; it checks that the buffer is large enough.
    """
    alloc = ffi.new("TfLiteCustomAllocation*")
    alloc.data = ffi.from_buffer(buffer, require_writable=True)
    alloc.bytes = buffer.nbytes
    status = int(
        self.rt.lib.TfLiteInterpreterSetCustomAllocationForTensor(self._interp, int(tensor_index), alloc, 0)
    )
    if status == 0:
        if not hasattr(self, "_custom_buffers"):
            self._custom_buffers = {}
        self._custom_buffers[int(tensor_index)] = buffer
    return status


NativeInterpreter.set_custom_allocation = _set_custom_allocation


# -- pending Python exceptions ------------------------------------------------
# A Python op runs inside a TFLite call made by this thread.  An exception it
# raises cannot cross the C frames, so it is parked here and re-raised by the
# Interpreter once the C call has returned.
_pending = threading.local()


def stash_exception(exc: BaseException) -> None:
    """Park ``exc`` for the current thread (the first one wins until popped)."""
    if getattr(_pending, "exc", None) is None:
        # The frames' locals include numpy views of tensor memory, which the
        # interpreter may free before anyone looks at the traceback; drop the
        # locals and keep the lines.
        import traceback

        traceback.clear_frames(exc.__traceback__)
        _pending.exc = exc


def pop_pending_exception() -> BaseException | None:
    """Return and clear the exception a Python op raised on this thread, if any."""
    exc = getattr(_pending, "exc", None)
    _pending.exc = None
    return exc


# -- Python ops ---------------------------------------------------------------
# Python callbacks and names of operators created here are never released:
# an interpreter calls free() on its nodes when it is deleted, which the GC
# may do after (or in the same cycle as) the Python op object, and TFLite
# keeps the raw name pointer.  TfLiteOperatorDelete is likewise never called
# (as with the C kernel libraries' operators).
_IMMORTAL: list = []


class OpaqueNodeView:
    """What a Python op's callbacks may do with one node (valid during the callback only)."""

    __slots__ = ("_ctx", "_node")

    def __init__(self, ctx, node):
        self._ctx = ctx
        self._node = node

    def num_inputs(self) -> int:
        return int(_runtime.lib.TfLiteOpaqueNodeNumberOfInputs(self._node))

    def user_key(self) -> int:
        """The integer the op's init() returned for this node."""
        return int(ffi.cast("intptr_t", _runtime.lib.TfLiteOpaqueNodeGetUserData(self._node)))

    def num_outputs(self) -> int:
        return int(_runtime.lib.TfLiteOpaqueNodeNumberOfOutputs(self._node))

    def _input(self, i):
        t = _runtime.lib.TfLiteOpaqueNodeGetInput(self._ctx, self._node, i)
        if t == ffi.NULL:
            raise ValueError(f"input {i} is missing (optional input not given)")
        return t

    def _output(self, i):
        t = _runtime.lib.TfLiteOpaqueNodeGetOutput(self._ctx, self._node, i)
        if t == ffi.NULL:
            raise ValueError(f"output {i} is missing")
        return t

    @staticmethod
    def _meta(t):
        lib = _runtime.lib
        ttype = int(lib.TfLiteOpaqueTensorType(t))
        n = lib.TfLiteOpaqueTensorNumDims(t)
        shape = tuple(int(lib.TfLiteOpaqueTensorDim(t, d)) for d in range(max(n, 0)))
        return ttype, shape

    @classmethod
    def _array(cls, t, writable: bool, what: str):
        lib = _runtime.lib
        ttype, shape = cls._meta(t)
        dtype = TFLITE_TO_NUMPY.get(ttype)
        if dtype is None or dtype == object:
            raise TypeError(f"{what} has TfLiteType {ttype}, which has no numpy equivalent")
        nbytes = int(lib.TfLiteOpaqueTensorByteSize(t))
        data = lib.TfLiteOpaqueTensorData(t)
        if nbytes == 0 or data == ffi.NULL:
            return _np.zeros(shape, dtype)
        arr = _np.frombuffer(ffi.buffer(data, nbytes), dtype=dtype).reshape(shape)
        if not writable:
            arr.flags.writeable = False
        return arr

    def input_meta(self, i):
        """``(numpy dtype or None, shape)`` of input ``i``."""
        ttype, shape = self._meta(self._input(i))
        return TFLITE_TO_NUMPY.get(ttype), shape

    def output_meta(self, i):
        ttype, shape = self._meta(self._output(i))
        return TFLITE_TO_NUMPY.get(ttype), shape

    def input_array(self, i):
        """A read-only numpy view of input ``i``'s memory."""
        return self._array(self._input(i), False, f"input {i}")

    def output_array(self, i):
        """A writable numpy view of output ``i``'s memory."""
        return self._array(self._output(i), True, f"output {i}")

    def resize_output(self, i, shape) -> int:
        dims = [int(d) for d in shape]
        arr = _runtime.lib.TfLiteIntArrayCreate(len(dims))
        if arr == ffi.NULL:
            return 1
        for k, d in enumerate(dims):
            arr.data[k] = d
        # The runtime owns ``arr`` from here on, whatever the result.
        return int(_runtime.lib.TfLiteOpaqueContextResizeTensor(self._ctx, self._output(i), arr))

    def report(self, message: str) -> None:
        """Send ``message`` to the interpreter's error reporter."""
        text = ffi.new("char[]", message.encode("utf-8", "replace"))
        _runtime.lib.TfLiteOpaqueContextReportError(self._ctx, b"%s", ffi.cast("char*", text))


def make_python_operator(name: str, version: int, init, free, prepare, invoke) -> Operator:
    """Create a ``TfLiteOperator`` whose callbacks are Python functions.

    ``init(options: bytes) -> int`` (a non-zero key for the node's state),
    ``free(key)``, ``prepare(node_view) -> int status``,
    ``invoke(node_view) -> int status``.  The functions must not raise: they
    run inside C frames (exceptions go through :func:`stash_exception`).
    """
    rt = load_runtime()
    cname = ffi.new("char[]", name.encode("utf-8"))

    def c_init(ctx, buf, length):
        data = ffi.unpack(buf, length) if buf != ffi.NULL and length else b""
        return ffi.cast("void*", init(data))

    def c_free(ctx, data):
        free(int(ffi.cast("intptr_t", data)))

    def c_prepare(ctx, node):
        return prepare(OpaqueNodeView(ctx, node))

    def c_invoke(ctx, node):
        return invoke(OpaqueNodeView(ctx, node))

    cb_init = ffi.callback("oo_py_init", c_init)
    cb_free = ffi.callback("oo_py_free", c_free)
    cb_prepare = ffi.callback("oo_py_step", c_prepare, error=1)
    cb_invoke = ffi.callback("oo_py_step", c_invoke, error=1)

    if rt.generation == "operator":
        major_minor = tuple(int(p) for p in rt.version.split(".")[:2] if p.isdigit())
        if major_minor >= (2, 18):
            create4 = ffi.cast(
                "TfLiteOperator*(*)(int, const char*, int, void*)",
                ffi.addressof(rt.lib, "TfLiteOperatorCreate"),
            )
            ptr = create4(_BUILTIN_CUSTOM, cname, int(version), ffi.NULL)
        else:
            ptr = rt.lib.TfLiteOperatorCreate(_BUILTIN_CUSTOM, cname, int(version))
        setters = (rt.lib.TfLiteOperatorSetInit, rt.lib.TfLiteOperatorSetFree,
                   rt.lib.TfLiteOperatorSetPrepare, rt.lib.TfLiteOperatorSetInvoke)
    else:
        ptr = rt.lib.TfLiteRegistrationExternalCreate(_BUILTIN_CUSTOM, cname, int(version))
        setters = (rt.lib.TfLiteRegistrationExternalSetInit, rt.lib.TfLiteRegistrationExternalSetFree,
                   rt.lib.TfLiteRegistrationExternalSetPrepare, rt.lib.TfLiteRegistrationExternalSetInvoke)
    if ptr == ffi.NULL:
        raise OpLibraryError(f"TFLite could not create an operator for Python op {name!r}")
    for setter, cb in zip(setters, (cb_init, cb_free, cb_prepare, cb_invoke)):
        setter(ptr, cb)
    keep = (cname, cb_init, cb_free, cb_prepare, cb_invoke)
    _IMMORTAL.append(keep)
    return Operator(ptr, owner=None, keepalive=keep)
