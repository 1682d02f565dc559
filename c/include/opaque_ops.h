/* opaque_ops.h -- what a TFLite custom-op kernel needs, and nothing more.
 *
 * The declarations below are opaque_ops' own, written from the names and
 * signatures of TensorFlow Lite's public C API (c_api.h, c_api_opaque.h,
 * common.h, operator.h).  A kernel written against upstream TFLite includes
 * "tensorflow/lite/c/c_api.h" and friends; those paths exist under this
 * directory too and forward here, so the same source compiles with either set
 * of headers.
 *
 * How a kernel library meets the runtime:
 *   - The opaque context/node/tensor functions are plain undefined symbols.
 *     opaque_ops loads libtensorflowlite_c with RTLD_GLOBAL before any kernel
 *     library, so they resolve to whichever runtime is in use, wherever it
 *     lives.  Kernel libraries are therefore not tied to a runtime path.
 *   - The operator functions (TfLiteOperator*, and their pre-2.17 names
 *     TfLiteRegistrationExternal*) go through small dispatchers in
 *     opaque_ops_runtime.c, because the runtime exports only one of the two
 *     name generations and TfLiteOperatorCreate changed arity in 2.18.
 *
 * Declaring ops: one line per op, after the callbacks are defined.
 *
 *     OPAQUE_OP("Atan", 1, .prepare = AtanPrepare, .invoke = AtanInvoke);
 *
 * opaque_ops finds every op declared this way in a compiled library.  A
 * guide-style factory (a function returning TfLiteOperator* or
 * TfLiteRegistrationExternal*) is exported with
 *
 *     OPAQUE_OP_FACTORY("Atan", AtanOpRegistrationExternal);
 *
 * which compile_ops(ops={...}) and build.py --op add for you.
 */
#ifndef OPAQUE_OPS_H_
#define OPAQUE_OPS_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct layout, an entry point or the meaning of a
 * declaration changes.  Every library carries it (OpaqueOps_Stamp) and the
 * loader refuses a library whose number differs from its own.  Overridable
 * only so that tests can build a deliberately mismatched library. */
#ifndef OPAQUE_OPS_ABI_VERSION
#define OPAQUE_OPS_ABI_VERSION 1
#endif
#define OPAQUE_OPS_HEADER_VERSION "0.1.0"

/* ---------------------------------------------------------------- types -- */

typedef enum TfLiteStatus {
  kTfLiteOk = 0,
  kTfLiteError = 1,
  kTfLiteDelegateError = 2,
  kTfLiteApplicationError = 3,
  kTfLiteDelegateDataNotFound = 4,
  kTfLiteDelegateDataWriteError = 5,
  kTfLiteDelegateDataReadError = 6,
  kTfLiteUnresolvedOps = 7,
  kTfLiteCancelled = 8,
  kTfLiteOutputShapeNotKnown = 9
} TfLiteStatus;

typedef enum TfLiteType {
  kTfLiteNoType = 0,
  kTfLiteFloat32 = 1,
  kTfLiteInt32 = 2,
  kTfLiteUInt8 = 3,
  kTfLiteInt64 = 4,
  kTfLiteString = 5,
  kTfLiteBool = 6,
  kTfLiteInt16 = 7,
  kTfLiteComplex64 = 8,
  kTfLiteInt8 = 9,
  kTfLiteFloat16 = 10,
  kTfLiteFloat64 = 11,
  kTfLiteComplex128 = 12,
  kTfLiteUInt64 = 13,
  kTfLiteResource = 14,
  kTfLiteVariant = 15,
  kTfLiteUInt32 = 16,
  kTfLiteUInt16 = 17,
  kTfLiteInt4 = 18,
  kTfLiteBFloat16 = 19
} TfLiteType;

/* Only the codes a custom-op author meets; the runtime accepts any int. */
typedef enum TfLiteBuiltinOperator {
  kTfLiteBuiltinAdd = 0,
  kTfLiteBuiltinConv2d = 3,
  kTfLiteBuiltinDequantize = 6,
  kTfLiteBuiltinMul = 18,
  kTfLiteBuiltinReshape = 22,
  kTfLiteBuiltinCustom = 32,
  kTfLiteBuiltinDelegate = 51
} TfLiteBuiltinOperator;

typedef enum TfLiteAllocationType {
  kTfLiteMemNone = 0,
  kTfLiteMmapRo,
  kTfLiteArenaRw,
  kTfLiteArenaRwPersistent,
  kTfLiteDynamic,
  kTfLitePersistentRo,
  kTfLiteCustom,
  kTfLiteVariantObject
} TfLiteAllocationType;

typedef enum TfLiteQuantizationType {
  kTfLiteNoQuantization = 0,
  kTfLiteAffineQuantization = 1
} TfLiteQuantizationType;

/* Flexible array members: allocate with TfLiteIntArrayCreate only. */
typedef struct TfLiteIntArray {
  int size;
  int data[];
} TfLiteIntArray;

typedef struct TfLiteFloatArray {
  int size;
  float data[];
} TfLiteFloatArray;

typedef struct TfLiteQuantizationParams {
  float scale;
  int32_t zero_point;
} TfLiteQuantizationParams;

typedef struct TfLiteQuantization {
  TfLiteQuantizationType type;
  void* params; /* TfLiteAffineQuantization* when type is affine */
} TfLiteQuantization;

typedef struct TfLiteAffineQuantization {
  TfLiteFloatArray* scale;
  TfLiteIntArray* zero_point;
  int32_t quantized_dimension;
} TfLiteAffineQuantization;

/* Opaque handles: only pointers to these ever cross the API. */
typedef struct TfLiteOpaqueContext TfLiteOpaqueContext;
typedef struct TfLiteOpaqueNode TfLiteOpaqueNode;
typedef struct TfLiteOpaqueTensor TfLiteOpaqueTensor;
typedef struct TfLiteOpaqueTensorBuilder TfLiteOpaqueTensorBuilder;
typedef struct TfLiteOpaqueDelegateStruct TfLiteOpaqueDelegate;
typedef struct TfLiteOperator TfLiteOperator;
/* The pre-2.17 name of the same object. */
typedef TfLiteOperator TfLiteRegistrationExternal;

/* --------------------------------------------------------- arrays, types -- */

int TfLiteIntArrayGetSizeInBytes(int size);
TfLiteIntArray* TfLiteIntArrayCreate(int size);
TfLiteIntArray* TfLiteIntArrayCopy(const TfLiteIntArray* src);
void TfLiteIntArrayFree(TfLiteIntArray* a);
int TfLiteIntArrayEqual(const TfLiteIntArray* a, const TfLiteIntArray* b);
TfLiteFloatArray* TfLiteFloatArrayCreate(int size);
void TfLiteFloatArrayFree(TfLiteFloatArray* a);
const char* TfLiteTypeGetName(TfLiteType type);
const char* TfLiteVersion(void);

/* ------------------------------------------------------- opaque tensors -- */

TfLiteType TfLiteOpaqueTensorType(const TfLiteOpaqueTensor* tensor);
int32_t TfLiteOpaqueTensorNumDims(const TfLiteOpaqueTensor* tensor);
int32_t TfLiteOpaqueTensorDim(const TfLiteOpaqueTensor* tensor, int32_t dim_index);
TfLiteStatus TfLiteOpaqueTensorGetNumDimsSignature(const TfLiteOpaqueTensor* tensor,
                                                   int32_t* num_dims);
TfLiteStatus TfLiteOpaqueTensorGetDimSignature(const TfLiteOpaqueTensor* tensor,
                                               int32_t dim_index, int32_t* dim_length);
int TfLiteOpaqueTensorIsVariable(const TfLiteOpaqueTensor* tensor);
size_t TfLiteOpaqueTensorByteSize(const TfLiteOpaqueTensor* tensor);
void* TfLiteOpaqueTensorData(const TfLiteOpaqueTensor* tensor);
TfLiteAllocationType TfLiteOpaqueTensorGetAllocationType(const TfLiteOpaqueTensor* tensor);
const char* TfLiteOpaqueTensorName(const TfLiteOpaqueTensor* tensor);
TfLiteQuantization TfLiteOpaqueTensorGetQuantization(const TfLiteOpaqueTensor* tensor);
TfLiteQuantizationParams TfLiteOpaqueTensorGetQuantizationParams(
    const TfLiteOpaqueTensor* tensor);
TfLiteStatus TfLiteOpaqueTensorCopyFromBuffer(TfLiteOpaqueTensor* tensor, const void* src,
                                              size_t size);
TfLiteStatus TfLiteOpaqueTensorCopyToBuffer(const TfLiteOpaqueTensor* tensor, void* dst,
                                            size_t size);
int TfLiteOpaqueTensorGetStringCount(const TfLiteOpaqueTensor* tensor);
TfLiteStatus TfLiteOpaqueTensorGetString(const TfLiteOpaqueTensor* tensor, int index,
                                         const char** str, int* len);
TfLiteStatus TfLiteOpaqueTensorWriteStrings(TfLiteOpaqueTensor* tensor,
                                            const char* const* str_array, int str_array_len,
                                            const int* str_n_len);
TfLiteStatus TfLiteOpaqueTensorWriteString(TfLiteOpaqueTensor* tensor, const char* str,
                                           int len);

/* ------------------------------------------------ opaque tensor builder -- */

TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderCreate(void);
void TfLiteOpaqueTensorBuilderDelete(TfLiteOpaqueTensorBuilder* builder);
TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderSetType(TfLiteOpaqueTensorBuilder* builder,
                                                            TfLiteType type);
TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderSetData(TfLiteOpaqueTensorBuilder* builder,
                                                            void* data);
TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderSetAllocationType(
    TfLiteOpaqueTensorBuilder* builder, TfLiteAllocationType allocation_type);
TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderSetQuantizationParams(
    TfLiteOpaqueTensorBuilder* builder, TfLiteQuantizationParams params);
TfLiteOpaqueTensorBuilder* TfLiteOpaqueTensorBuilderSetQuantization(
    TfLiteOpaqueTensorBuilder* builder, TfLiteQuantization quantization);

/* --------------------------------------------------------- opaque nodes -- */

const TfLiteOpaqueTensor* TfLiteOpaqueNodeGetInput(const TfLiteOpaqueContext* context,
                                                   const TfLiteOpaqueNode* node, int index);
TfLiteOpaqueTensor* TfLiteOpaqueNodeGetOutput(TfLiteOpaqueContext* context,
                                              const TfLiteOpaqueNode* node, int index);
int TfLiteOpaqueNodeNumberOfInputs(const TfLiteOpaqueNode* node);
int TfLiteOpaqueNodeNumberOfOutputs(const TfLiteOpaqueNode* node);
void* TfLiteOpaqueNodeGetUserData(const TfLiteOpaqueNode* node);
void* TfLiteOpaqueNodeGetBuiltinData(const TfLiteOpaqueNode* node);
TfLiteStatus TfLiteOpaqueNodeGetCustomInitialData(const TfLiteOpaqueNode* node,
                                                  const void** init_data, int* size);
TfLiteStatus TfLiteOpaqueNodeInputs(const TfLiteOpaqueNode* node, const int** inputs,
                                    int* num_inputs);
TfLiteStatus TfLiteOpaqueNodeOutputs(const TfLiteOpaqueNode* node, const int** outputs,
                                     int* num_outputs);
TfLiteStatus TfLiteOpaqueNodeTemporaries(const TfLiteOpaqueNode* node, const int** temporaries,
                                         int* num_temporaries);
/* Copies `temporaries` into the node; the caller keeps its array. */
TfLiteStatus TfLiteOpaqueNodeSetTemporaries(TfLiteOpaqueNode* node, const int* temporaries,
                                            int num_temporaries);
int TfLiteOpaqueNodeGetInputTensorIndex(const TfLiteOpaqueNode* node, int index_of_input);
int TfLiteOpaqueNodeGetOutputTensorIndex(const TfLiteOpaqueNode* node, int index_of_output);

/* ------------------------------------------------------ opaque contexts -- */

TfLiteOpaqueTensor* TfLiteOpaqueContextGetOpaqueTensor(const TfLiteOpaqueContext* context,
                                                       int index);
TfLiteStatus TfLiteOpaqueContextGetInputs(const TfLiteOpaqueContext* context, const int** inputs,
                                          int* num_inputs);
TfLiteStatus TfLiteOpaqueContextGetOutputs(const TfLiteOpaqueContext* context,
                                           const int** outputs, int* num_outputs);
size_t TfLiteOpaqueContextGetNumNodes(const TfLiteOpaqueContext* context);
size_t TfLiteOpaqueContextGetNumTensors(const TfLiteOpaqueContext* context);
const char* TfLiteOpaqueContextGetName(const TfLiteOpaqueContext* context);
/* Takes ownership of `new_size`, also when it fails. */
TfLiteStatus TfLiteOpaqueContextResizeTensor(TfLiteOpaqueContext* context,
                                             TfLiteOpaqueTensor* tensor,
                                             TfLiteIntArray* new_size);
TfLiteStatus TfLiteOpaqueContextAddTensor(TfLiteOpaqueContext* context,
                                          TfLiteOpaqueTensorBuilder* builder,
                                          int* new_tensor_index);
TfLiteStatus TfLiteOpaqueContextGetSizeOfType(TfLiteOpaqueContext* context, TfLiteType type,
                                              size_t* bytes);
void TfLiteOpaqueContextReportError(TfLiteOpaqueContext* context, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void TfLiteOpaqueContextReportErrorVa(TfLiteOpaqueContext* context, const char* format,
                                      va_list args);

/* --------------------------------------------------------- operators ---- *
 * Dispatchers in opaque_ops_runtime.c; see the note at the top. */

typedef void* (*OpaqueOpsInitFn)(TfLiteOpaqueContext* context, const char* buffer,
                                 size_t length);
typedef void (*OpaqueOpsFreeFn)(TfLiteOpaqueContext* context, void* data);
typedef TfLiteStatus (*OpaqueOpsStepFn)(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node);

TfLiteOperator* OpaqueOps_OperatorCreate(TfLiteBuiltinOperator builtin_code,
                                         const char* custom_name, int version,
                                         void* user_data);
void OpaqueOps_OperatorDelete(TfLiteOperator* op);
const char* OpaqueOps_OperatorGetCustomName(const TfLiteOperator* op);
int OpaqueOps_OperatorGetVersion(const TfLiteOperator* op);
TfLiteBuiltinOperator OpaqueOps_OperatorGetBuiltInCode(const TfLiteOperator* op);
void* OpaqueOps_OperatorGetUserData(const TfLiteOperator* op);
void OpaqueOps_OperatorSetInit(TfLiteOperator* op, OpaqueOpsInitFn init);
void OpaqueOps_OperatorSetFree(TfLiteOperator* op, OpaqueOpsFreeFn free_fn);
void OpaqueOps_OperatorSetPrepare(TfLiteOperator* op, OpaqueOpsStepFn prepare);
void OpaqueOps_OperatorSetInvoke(TfLiteOperator* op, OpaqueOpsStepFn invoke);
void OpaqueOps_OperatorSetInplaceOperator(TfLiteOperator* op, uint64_t inplace);

#ifndef OPAQUE_OPS_UPSTREAM_NAMES
/* TfLiteOperatorCreate takes 3 arguments up to TFLite 2.17 and 4 (with
 * user_data) from 2.18 on; both spellings compile here. */
#define OO__CREATE3(b, n, v) OpaqueOps_OperatorCreate((TfLiteBuiltinOperator)(b), (n), (v), NULL)
#define OO__CREATE4(b, n, v, u) OpaqueOps_OperatorCreate((TfLiteBuiltinOperator)(b), (n), (v), (u))
#define OO__PICK(_1, _2, _3, _4, NAME, ...) NAME
#define TfLiteOperatorCreate(...) OO__PICK(__VA_ARGS__, OO__CREATE4, OO__CREATE3, ~, ~)(__VA_ARGS__)
#define TfLiteOperatorCreateWithData(b, n, v, u) OO__CREATE4(b, n, v, u)
#define TfLiteOperatorDelete OpaqueOps_OperatorDelete
#define TfLiteOperatorGetCustomName OpaqueOps_OperatorGetCustomName
#define TfLiteOperatorGetVersion OpaqueOps_OperatorGetVersion
#define TfLiteOperatorGetBuiltInCode OpaqueOps_OperatorGetBuiltInCode
#define TfLiteOperatorGetUserData OpaqueOps_OperatorGetUserData
#define TfLiteOperatorSetInit OpaqueOps_OperatorSetInit
#define TfLiteOperatorSetFree OpaqueOps_OperatorSetFree
#define TfLiteOperatorSetPrepare OpaqueOps_OperatorSetPrepare
#define TfLiteOperatorSetInvoke OpaqueOps_OperatorSetInvoke
#define TfLiteOperatorSetInplaceOperator OpaqueOps_OperatorSetInplaceOperator

/* The names used by TFLite <= 2.16 and by the custom-ops guide. */
#define TfLiteRegistrationExternalCreate(b, n, v) OO__CREATE3(b, n, v)
#define TfLiteRegistrationExternalDelete OpaqueOps_OperatorDelete
#define TfLiteRegistrationExternalGetCustomName OpaqueOps_OperatorGetCustomName
#define TfLiteRegistrationExternalGetVersion OpaqueOps_OperatorGetVersion
#define TfLiteRegistrationExternalGetBuiltInCode OpaqueOps_OperatorGetBuiltInCode
#define TfLiteRegistrationExternalSetInit OpaqueOps_OperatorSetInit
#define TfLiteRegistrationExternalSetFree OpaqueOps_OperatorSetFree
#define TfLiteRegistrationExternalSetPrepare OpaqueOps_OperatorSetPrepare
#define TfLiteRegistrationExternalSetInvoke OpaqueOps_OperatorSetInvoke
#else
/* OPAQUE_OPS_UPSTREAM_NAMES: declare the operator functions exactly as the
 * TFLite 2.17 C library exports them and do not route them through the
 * dispatchers.  Compiling and linking a kernel this way against the real
 * libtensorflowlite_c proves that it uses upstream names and types only. */
TfLiteOperator* TfLiteOperatorCreate(TfLiteBuiltinOperator builtin_code, const char* custom_name,
                                     int version);
void TfLiteOperatorDelete(TfLiteOperator* op);
void TfLiteOperatorSetInit(TfLiteOperator* op, OpaqueOpsInitFn init);
void TfLiteOperatorSetFree(TfLiteOperator* op, OpaqueOpsFreeFn free_fn);
void TfLiteOperatorSetPrepare(TfLiteOperator* op, OpaqueOpsStepFn prepare);
void TfLiteOperatorSetInvoke(TfLiteOperator* op, OpaqueOpsStepFn invoke);
const char* TfLiteOperatorGetCustomName(const TfLiteOperator* op);
int TfLiteOperatorGetVersion(const TfLiteOperator* op);
#define TfLiteRegistrationExternalCreate TfLiteOperatorCreate
#define TfLiteRegistrationExternalDelete TfLiteOperatorDelete
#define TfLiteRegistrationExternalSetInit TfLiteOperatorSetInit
#define TfLiteRegistrationExternalSetFree TfLiteOperatorSetFree
#define TfLiteRegistrationExternalSetPrepare TfLiteOperatorSetPrepare
#define TfLiteRegistrationExternalSetInvoke TfLiteOperatorSetInvoke
#define TfLiteRegistrationExternalGetCustomName TfLiteOperatorGetCustomName
#define TfLiteRegistrationExternalGetVersion TfLiteOperatorGetVersion
#endif /* OPAQUE_OPS_UPSTREAM_NAMES */

/* --------------------------------------------------- checks in kernels -- *
 * Same names and behaviour as upstream: report through the context (the
 * message reaches Python as the exception text) and return kTfLiteError. */

#ifndef TF_LITE_OPAQUE_KERNEL_LOG
#define TF_LITE_OPAQUE_KERNEL_LOG(context, ...) \
  do {                                          \
    TfLiteOpaqueContextReportError((context), __VA_ARGS__); \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE_MSG
#define TF_LITE_OPAQUE_ENSURE_MSG(context, cond, msg)                 \
  do {                                                                \
    if (!(cond)) {                                                    \
      TF_LITE_OPAQUE_KERNEL_LOG((context), "%s:%d: %s", __FILE__, __LINE__, (msg)); \
      return kTfLiteError;                                            \
    }                                                                 \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE
#define TF_LITE_OPAQUE_ENSURE(context, cond)                                         \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      TF_LITE_OPAQUE_KERNEL_LOG((context), "%s:%d: %s was not true.", __FILE__, __LINE__, \
                                #cond);                                              \
      return kTfLiteError;                                                           \
    }                                                                                \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE_EQ
#define TF_LITE_OPAQUE_ENSURE_EQ(context, a, b)                                      \
  do {                                                                               \
    if ((a) != (b)) {                                                                \
      TF_LITE_OPAQUE_KERNEL_LOG((context), "%s:%d: %s != %s (%lld != %lld)", __FILE__, \
                                __LINE__, #a, #b, (long long)(a), (long long)(b));   \
      return kTfLiteError;                                                           \
    }                                                                                \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE_TYPES_EQ
#define TF_LITE_OPAQUE_ENSURE_TYPES_EQ(context, a, b)                                \
  do {                                                                               \
    if ((a) != (b)) {                                                                \
      TF_LITE_OPAQUE_KERNEL_LOG((context), "%s:%d: %s != %s (%s != %s)", __FILE__,   \
                                __LINE__, #a, #b, TfLiteTypeGetName(a),              \
                                TfLiteTypeGetName(b));                               \
      return kTfLiteError;                                                           \
    }                                                                                \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE_STATUS
#define TF_LITE_OPAQUE_ENSURE_STATUS(expr)   \
  do {                                       \
    const TfLiteStatus oo__status = (expr);  \
    if (oo__status != kTfLiteOk) return oo__status; \
  } while (0)
#endif

#ifndef TF_LITE_OPAQUE_ENSURE_NEAR
#define TF_LITE_OPAQUE_ENSURE_NEAR(context, a, b, epsilon)                           \
  do {                                                                               \
    double oo__d = (double)(a) - (double)(b);                                        \
    if (oo__d < 0) oo__d = -oo__d;                                                   \
    if (oo__d > (epsilon)) {                                                         \
      TF_LITE_OPAQUE_KERNEL_LOG((context), "%s:%d: %s not near %s (%f != %f)", __FILE__, \
                                __LINE__, #a, #b, (double)(a), (double)(b));         \
      return kTfLiteError;                                                           \
    }                                                                                \
  } while (0)
#endif

/* ------------------------------------------------ declaring ops ----------- */

typedef struct OpaqueOpsOpDef {
  const char* name;   /* the op name the model uses */
  int version;        /* the op version the model uses; 0 = the factory's own */
  OpaqueOpsInitFn init;
  OpaqueOpsFreeFn free;
  OpaqueOpsStepFn prepare;
  OpaqueOpsStepFn invoke;
  TfLiteOperator* (*factory)(void); /* guide style: the factory builds the operator */
  struct OpaqueOpsOpDef* next;      /* owned by the runtime's list */
} OpaqueOpsOpDef;

void OpaqueOps_RegisterOpDef(OpaqueOpsOpDef* def);

#define OO__CAT2(a, b) a##b
#define OO__CAT(a, b) OO__CAT2(a, b)

/* The constructor runs when the library is loaded and links the definition
 * into the library's own list; nothing is registered with TFLite until the
 * loader asks. */
#define OPAQUE_OP(NAME, VERSION, ...)                                          \
  static OpaqueOpsOpDef OO__CAT(oo__def_, __LINE__) = {                        \
      .name = (NAME), .version = (VERSION), __VA_ARGS__};                      \
  __attribute__((constructor)) static void OO__CAT(oo__register_, __LINE__)(void) { \
    OpaqueOps_RegisterOpDef(&OO__CAT(oo__def_, __LINE__));                     \
  }                                                                            \
  typedef int OO__CAT(oo__require_semicolon_, __LINE__)

#define OPAQUE_OP_FACTORY(NAME, FUNCTION)                                      \
  static OpaqueOpsOpDef OO__CAT(oo__def_, __LINE__) = {                        \
      .name = (NAME), .version = 0,                                            \
      .factory = (TfLiteOperator * (*)(void))(FUNCTION)};                      \
  __attribute__((constructor)) static void OO__CAT(oo__register_, __LINE__)(void) { \
    OpaqueOps_RegisterOpDef(&OO__CAT(oo__def_, __LINE__));                     \
  }                                                                            \
  typedef int OO__CAT(oo__require_semicolon_, __LINE__)

/* ------------------------------------- entry points the loader calls ----- */

const char* OpaqueOps_Stamp(void);
int OpaqueOps_NumOps(void);
const char* OpaqueOps_OpName(int index);
int OpaqueOps_OpVersion(int index);
TfLiteOperator* OpaqueOps_MakeOperator(int index);
const char* OpaqueOps_LastError(void);

#ifdef __cplusplus
}
#endif

#endif /* OPAQUE_OPS_H_ */
