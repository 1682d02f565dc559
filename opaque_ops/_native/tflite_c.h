/* Every C declaration opaque_ops' binding uses, read by cffi's cdef (ABI mode).
 *
 * Written for this project from the upstream C API headers
 * (tensorflow/lite/core/c/c_api.h, c_api_opaque.h, c_api_types.h,
 * operator.h, tensorflow/lite/delegates/xnnpack/xnnpack_delegate.h).
 * cffi's cdef is not a C preprocessor: no #include, no macros.  Functions
 * absent from the loaded library are harmless until called; Runtime.has()
 * tells which exist.  Kernel authors use c/include/opaque_ops.h instead.
 */

/* ---- types, the interpreter, models, tensors, signature runners ---- */
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

/* The reporter's va_list is declared as void*: on x86-64 a va_list is an
   array and decays to a pointer, and on AArch64 the 32-byte va_list struct
   is passed by reference, so a pointer is what arrives in both cases.  It is
   only ever handed back to vsnprintf with the same declaration. */
typedef void (*oo_reporter)(void* user_data, const char* format, void* args);

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
/* c_api_experimental.h: zero every variable tensor (tflite_runtime's reset_all_variables). */
TfLiteStatus TfLiteInterpreterResetVariableTensors(TfLiteInterpreter* interpreter);

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
/* TfLiteAllocationStrategy: 4 = kTfLiteAllocationStrategyMalloc (kTfLiteDynamic). */
int TfLiteTensorGetAllocationStrategy(const TfLiteTensor* t);
/* The exact TfLiteAllocationType (constants are kTfLiteMmapRo); only builds
   with the opaque API export it (TensorRef.allocation_type falls back). */
int TfLiteOpaqueTensorGetAllocationType(const TfLiteOpaqueTensor* tensor);
void* TfLiteTensorData(const TfLiteTensor* tensor);
const char* TfLiteTensorName(const TfLiteTensor* tensor);
TfLiteQuantizationParams TfLiteTensorQuantizationParams(const TfLiteTensor* tensor);
TfLiteStatus TfLiteTensorCopyFromBuffer(TfLiteTensor* tensor, const void* input_data,
                                        size_t input_data_size);
/* common.h: resizes a kTfLiteDynamic tensor's malloc'd buffer to num_bytes
   (other allocation types are left alone, still kTfLiteOk).  set_tensor
   sizes a string tensor's buffer with it: its size depends on the strings. */
TfLiteStatus TfLiteTensorRealloc(size_t num_bytes, TfLiteTensor* tensor);

/* Operators: both generations and both arities of Create.  Which one a call
   goes to is decided in Runtime.__init__. */
const char* TfLiteOperatorGetCustomName(const TfLiteOperator* op);
const char* TfLiteRegistrationExternalGetCustomName(const TfLiteOperator* op);
int TfLiteOperatorGetVersion(const TfLiteOperator* op);
int TfLiteRegistrationExternalGetVersion(const TfLiteOperator* op);
/* The user_data given to a 4-argument Create (2.18+) or CreateWithData (2.17). */
void* TfLiteOperatorGetUserData(const TfLiteOperator* op);

/* libc, for the error reporter. */
int vsnprintf(char* str, size_t size, const char* format, void* args);
/* libc (libdl before glibc 2.34): which file a loaded symbol comes from, to
   report the path of a runtime that was loaded by bare name. */
typedef struct {
  const char* dli_fname;
  void* dli_fbase;
  const char* dli_sname;
  void* dli_saddr;
} Dl_info;
int dladdr(const void* addr, Dl_info* info);
/* libc: whether a block of a size can be had at all, before TFLite asks for
   its arena (NativeInterpreter.can_allocate). */
void* malloc(size_t size);
void free(void* ptr);

/* What every kernel library exports (c/src/opaque_ops_runtime.c). */
const char* OpaqueOps_Stamp(void);
int OpaqueOps_NumOps(void);
const char* OpaqueOps_OpName(int index);
int OpaqueOps_OpVersion(int index);
TfLiteOperator* OpaqueOps_MakeOperator(int index);
const char* OpaqueOps_LastError(void);
/* Only in libraries whose kernels include opaque_ops/simd.h: the SIMD clone
   they run ("avx512", "avx2", "sse2", "neon", "generic"). */
const char* OpaqueOps_SimdLevel(void);

/* ---- XNNPACK (xnnpack_delegate.h) ----
 * Only num_threads (offset 0) is stable across releases; the rest of the
 * options struct changes layout (32 bytes on 2.17.1, 64 on 2.23), so it is
 * declared as an opaque tail large enough for any release.  The struct is
 * over 16 bytes in every release with the TfLiteOperator API, so it is
 * returned through a caller-provided buffer on x86-64 and AArch64 alike. */
typedef struct { int32_t num_threads; uint32_t oo_opaque_tail[63]; } oo_xnnpack_options;
oo_xnnpack_options TfLiteXNNPackDelegateOptionsDefault(void);
TfLiteOpaqueDelegate* TfLiteXNNPackDelegateCreate(const oo_xnnpack_options* options);
void TfLiteXNNPackDelegateDelete(TfLiteOpaqueDelegate* delegate);

/* A kernel registered under a second name (c_api_experimental.h), so that
 * XNNPACK, which claims three MediaPipe ops by their registration's name,
 * leaves the node to the kernel (opaque_ops/interpreter/xnnpack.py).  The struct is
 * TfLiteRegistration from common.h; its layout has been the same since the
 * TfLiteOperator API exists.  Only registration_external is filled: TFLite
 * sets builtin_code, custom_name and version itself, and routes every call
 * of a node through registration_external when it is set.  AddCustomOp
 * copies sizeof(TfLiteRegistration) bytes, so oo_reserved leaves zeroed room
 * for fields a later release may append.  The name is not copied: it must
 * outlive every interpreter created from the options. */
typedef struct {
  void* init;
  void* free;
  void* prepare;
  void* invoke;
  void* profiling_string;
  int32_t builtin_code;
  const char* custom_name;
  int version;
  TfLiteOperator* registration_external;
  void* async_kernel;
  uint64_t inplace_operator;
  uint64_t oo_reserved[8];
} oo_registration;
void TfLiteInterpreterOptionsAddCustomOp(TfLiteInterpreterOptions* options, const char* name,
                                         const oo_registration* registration,
                                         int32_t min_version, int32_t max_version);

/* ---- guarded outputs (testing.run_op) and Python ops (pyop.python_op) ---- */
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

/* Python ops go through four static trampolines (pyop.py); the operator's
   user_data says which op a call is for.  2.17 creates such an operator with
   TfLiteOperatorCreateWithData, 2.18+ with the 4-argument TfLiteOperatorCreate
   (reached through a cast); both have the *WithData setters, which return a
   status since they were added. */
typedef void* (*oo_py_init_wd)(void* user_data, TfLiteOpaqueContext* context,
                               const char* buffer, size_t length);
typedef void (*oo_py_free_wd)(void* user_data, TfLiteOpaqueContext* context, void* data);
typedef TfLiteStatus (*oo_py_step_wd)(void* user_data, TfLiteOpaqueContext* context,
                                      TfLiteOpaqueNode* node);
TfLiteOperator* TfLiteOperatorCreateWithData(int builtin_code, const char* custom_name,
                                             int version, void* user_data);
TfLiteStatus TfLiteOperatorSetInitWithData(TfLiteOperator* op, oo_py_init_wd init);
TfLiteStatus TfLiteOperatorSetFreeWithData(TfLiteOperator* op, oo_py_free_wd free);
TfLiteStatus TfLiteOperatorSetPrepareWithData(TfLiteOperator* op, oo_py_step_wd prepare);
TfLiteStatus TfLiteOperatorSetInvokeWithData(TfLiteOperator* op, oo_py_step_wd invoke);
void TfLiteOperatorDelete(TfLiteOperator* op);

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

/* ---- delegate plugins (delegates.load_delegate) ----
 * The entry points tflite_runtime's load_delegate looks up in a plugin
 * (tensorflow/lite/delegates/external/external_delegate_interface.h).  The
 * plugin returns a TfLiteDelegate*, which is what TfLiteOpaqueDelegate* is
 * at the C API (TfLiteInterpreterOptionsAddDelegate takes it). */
typedef void (*oo_delegate_report)(const char* message);
TfLiteOpaqueDelegate* tflite_plugin_create_delegate(char** options_keys, char** options_values,
                                                    size_t num_options,
                                                    oo_delegate_report report_error);
void tflite_plugin_destroy_delegate(TfLiteOpaqueDelegate* delegate);

/* ---- isolation (opaque_ops.isolate) ----
 * Process-shared POSIX semaphores (glibc; sem_t is 32 bytes on LP64 targets)
 * placed in a shared-memory page signal requests and replies between the
 * parent and the worker.  They are declared on void* so a pointer into a
 * mapping can be passed as is. */
struct timespec { long tv_sec; long tv_nsec; };
int sem_init(void* sem, int pshared, unsigned int value);
int sem_destroy(void* sem);
int sem_post(void* sem);
int sem_wait(void* sem);
int sem_trywait(void* sem);
int sem_timedwait(void* sem, const struct timespec* abstime);
int sem_clockwait(void* sem, int clockid, const struct timespec* abstime);

/* TFLite's telemetry profiler (tensorflow/lite/profiling/telemetry/c/profiler.h);
 * the struct itself is only ever built in C (c/src/isolate_helper.c). */
void TfLiteInterpreterOptionsSetTelemetryProfiler(TfLiteInterpreterOptions* options, void* profiler);

/* The worker's helper library (c/src/isolate_helper.c). */
int OoIsolate_Install(void* record, void* wake);
void* OoIsolate_Profiler(void);
void OoIsolate_ResetProfiler(void);
