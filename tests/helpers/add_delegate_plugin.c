/* A delegate plugin for the tests of opaque_ops.load_delegate.
 *
 * It has tflite_runtime's plugin entry points
 * (tensorflow/lite/delegates/external/external_delegate_interface.h) and is
 * written against the opaque delegate API (c_api_opaque.h, common.h): it
 * claims every float32 ADD node and runs it itself, as
 *     out = a + b + extra
 * where "extra" is a plugin option (default 0).  A builtin ADD never adds
 * "extra", and the exported counters say how often the delegate ran, so the
 * tests can tell which implementation computed a result.
 *
 * The declarations below are this project's own, written from the upstream
 * headers; the TfLite* functions resolve against the runtime already loaded
 * (with RTLD_GLOBAL) by opaque_ops.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int TfLiteStatus; /* kTfLiteOk = 0, kTfLiteError = 1 */
typedef int TfLiteBufferHandle;
typedef struct TfLiteOpaqueContext TfLiteOpaqueContext;
typedef struct TfLiteOpaqueNode TfLiteOpaqueNode;
typedef struct TfLiteOpaqueTensor TfLiteOpaqueTensor;
typedef struct TfLiteOperator TfLiteOperator;
typedef struct TfLiteOpaqueDelegateStruct TfLiteOpaqueDelegate;
typedef struct { int size; int data[]; } TfLiteIntArray;

typedef struct {
  void* data;
  TfLiteStatus (*Prepare)(TfLiteOpaqueContext*, TfLiteOpaqueDelegate*, void*);
  TfLiteStatus (*CopyFromBufferHandle)(TfLiteOpaqueContext*, TfLiteOpaqueDelegate*, void*,
                                       TfLiteBufferHandle, TfLiteOpaqueTensor*);
  TfLiteStatus (*CopyToBufferHandle)(TfLiteOpaqueContext*, TfLiteOpaqueDelegate*, void*,
                                     TfLiteBufferHandle, TfLiteOpaqueTensor*);
  void (*FreeBufferHandle)(TfLiteOpaqueContext*, TfLiteOpaqueDelegate*, void*, TfLiteBufferHandle*);
  int64_t flags;
} TfLiteOpaqueDelegateBuilder;

typedef struct {
  TfLiteOpaqueDelegate* delegate;
  void* delegate_data;
  TfLiteIntArray* nodes_to_replace;
  TfLiteIntArray* input_tensors;
  TfLiteIntArray* output_tensors;
} TfLiteOpaqueDelegateParams;

TfLiteOpaqueDelegate* TfLiteOpaqueDelegateCreate(const TfLiteOpaqueDelegateBuilder* builder);
void TfLiteOpaqueDelegateDelete(TfLiteOpaqueDelegate* delegate);
void* TfLiteOpaqueDelegateGetData(const TfLiteOpaqueDelegate* delegate);
TfLiteStatus TfLiteOpaqueContextGetExecutionPlan(TfLiteOpaqueContext* ctx, TfLiteIntArray** plan);
TfLiteStatus TfLiteOpaqueContextGetNodeAndRegistration(TfLiteOpaqueContext* ctx, int node_index,
                                                       TfLiteOpaqueNode** node, TfLiteOperator** reg);
TfLiteStatus TfLiteOpaqueContextReplaceNodeSubsetsWithDelegateKernels(
    TfLiteOpaqueContext* ctx, TfLiteOperator* reg, const TfLiteIntArray* nodes, TfLiteOpaqueDelegate* d);
TfLiteOpaqueTensor* TfLiteOpaqueContextGetOpaqueTensor(const TfLiteOpaqueContext* ctx, int index);
TfLiteStatus TfLiteOpaqueContextResizeTensor(TfLiteOpaqueContext* ctx, TfLiteOpaqueTensor* t,
                                             TfLiteIntArray* new_size);
void* TfLiteOpaqueNodeGetUserData(const TfLiteOpaqueNode* node);
TfLiteStatus TfLiteOpaqueNodeInputs(const TfLiteOpaqueNode* node, const int** inputs, int* n);
TfLiteStatus TfLiteOpaqueNodeOutputs(const TfLiteOpaqueNode* node, const int** outputs, int* n);
int TfLiteOperatorGetBuiltInCode(const TfLiteOperator* op);
/* 2.17 declares three parameters, 2.18+ four (user_data): passing a fourth
   NULL is harmless to the three-parameter form on x86-64 and AArch64. */
TfLiteOperator* TfLiteOperatorCreate(int builtin_code, const char* name, int version, void* user_data);
void TfLiteOperatorSetInit(TfLiteOperator* op, void* (*init)(TfLiteOpaqueContext*, const char*, size_t));
void TfLiteOperatorSetFree(TfLiteOperator* op, void (*free)(TfLiteOpaqueContext*, void*));
void TfLiteOperatorSetPrepare(TfLiteOperator* op, TfLiteStatus (*prepare)(TfLiteOpaqueContext*, TfLiteOpaqueNode*));
void TfLiteOperatorSetInvoke(TfLiteOperator* op, TfLiteStatus (*invoke)(TfLiteOpaqueContext*, TfLiteOpaqueNode*));
int TfLiteOpaqueTensorType(const TfLiteOpaqueTensor* t);
int32_t TfLiteOpaqueTensorNumDims(const TfLiteOpaqueTensor* t);
int32_t TfLiteOpaqueTensorDim(const TfLiteOpaqueTensor* t, int32_t i);
size_t TfLiteOpaqueTensorByteSize(const TfLiteOpaqueTensor* t);
void* TfLiteOpaqueTensorData(const TfLiteOpaqueTensor* t);
TfLiteIntArray* TfLiteIntArrayCreate(int size);

enum { kBuiltinAdd = 0, kBuiltinDelegate = 51, kFloat32 = 1 };

/* What the tests read back. */
static int g_invocations, g_live, g_claimed;
int oo_test_delegate_invocations(void) { return g_invocations; }
int oo_test_delegate_live(void) { return g_live; }
int oo_test_delegate_claimed(void) { return g_claimed; }

typedef struct { float extra; } Settings;

/* One delegate kernel: the ADD nodes of one partition, in execution order. */
typedef struct { int n; int (*io)[3]; float extra; } Kernel;

static void* KernelInit(TfLiteOpaqueContext* ctx, const char* buffer, size_t length) {
  const TfLiteOpaqueDelegateParams* params = (const TfLiteOpaqueDelegateParams*)buffer;
  Settings* s = TfLiteOpaqueDelegateGetData(params->delegate);
  Kernel* k = calloc(1, sizeof *k);
  if (!k) return NULL;
  k->n = params->nodes_to_replace->size;
  k->io = calloc((size_t)k->n, sizeof *k->io);
  k->extra = s->extra;
  for (int i = 0; i < k->n; ++i) {
    TfLiteOpaqueNode* node;
    TfLiteOperator* reg;
    const int *ins, *outs;
    int n_in, n_out;
    if (TfLiteOpaqueContextGetNodeAndRegistration(ctx, params->nodes_to_replace->data[i], &node, &reg) != 0 ||
        TfLiteOpaqueNodeInputs(node, &ins, &n_in) != 0 || TfLiteOpaqueNodeOutputs(node, &outs, &n_out) != 0 ||
        n_in != 2 || n_out != 1) {
      k->n = -1;
      return k;
    }
    k->io[i][0] = ins[0];
    k->io[i][1] = ins[1];
    k->io[i][2] = outs[0];
  }
  return k;
}

static void KernelFree(TfLiteOpaqueContext* ctx, void* data) {
  Kernel* k = data;
  if (k) {
    free(k->io);
    free(k);
  }
}

static TfLiteStatus KernelPrepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  Kernel* k = TfLiteOpaqueNodeGetUserData(node);
  if (!k || k->n < 0) return 1;
  for (int i = 0; i < k->n; ++i) {
    const TfLiteOpaqueTensor* a = TfLiteOpaqueContextGetOpaqueTensor(ctx, k->io[i][0]);
    TfLiteOpaqueTensor* out = TfLiteOpaqueContextGetOpaqueTensor(ctx, k->io[i][2]);
    int nd = TfLiteOpaqueTensorNumDims(a);
    TfLiteIntArray* shape = TfLiteIntArrayCreate(nd);
    for (int d = 0; d < nd; ++d) shape->data[d] = TfLiteOpaqueTensorDim(a, d);
    if (TfLiteOpaqueContextResizeTensor(ctx, out, shape) != 0) return 1;
  }
  return 0;
}

static TfLiteStatus KernelInvoke(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  Kernel* k = TfLiteOpaqueNodeGetUserData(node);
  for (int i = 0; i < k->n; ++i) {
    const TfLiteOpaqueTensor* a = TfLiteOpaqueContextGetOpaqueTensor(ctx, k->io[i][0]);
    const TfLiteOpaqueTensor* b = TfLiteOpaqueContextGetOpaqueTensor(ctx, k->io[i][1]);
    TfLiteOpaqueTensor* out = TfLiteOpaqueContextGetOpaqueTensor(ctx, k->io[i][2]);
    const float* x = TfLiteOpaqueTensorData(a);
    const float* y = TfLiteOpaqueTensorData(b);
    float* z = TfLiteOpaqueTensorData(out);
    size_t n = TfLiteOpaqueTensorByteSize(out) / sizeof(float);
    size_t nb = TfLiteOpaqueTensorByteSize(b) / sizeof(float);
    if (!x || !y || !z || nb == 0 || (nb != 1 && nb != n)) return 1;
    for (size_t j = 0; j < n; ++j) z[j] = x[j] + y[nb == 1 ? 0 : j] + k->extra;
  }
  ++g_invocations;
  return 0;
}

static TfLiteStatus DelegatePrepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueDelegate* delegate, void* data) {
  TfLiteIntArray* plan;
  if (TfLiteOpaqueContextGetExecutionPlan(ctx, &plan) != 0) return 1;
  TfLiteIntArray* claim = TfLiteIntArrayCreate(plan->size);
  claim->size = 0;
  for (int i = 0; i < plan->size; ++i) {
    TfLiteOpaqueNode* node;
    TfLiteOperator* reg;
    if (TfLiteOpaqueContextGetNodeAndRegistration(ctx, plan->data[i], &node, &reg) != 0) continue;
    const int* ins;
    int n_in;
    if (TfLiteOperatorGetBuiltInCode(reg) != kBuiltinAdd || TfLiteOpaqueNodeInputs(node, &ins, &n_in) != 0 ||
        n_in != 2)
      continue;
    const TfLiteOpaqueTensor* a = TfLiteOpaqueContextGetOpaqueTensor(ctx, ins[0]);
    const TfLiteOpaqueTensor* b = TfLiteOpaqueContextGetOpaqueTensor(ctx, ins[1]);
    if (TfLiteOpaqueTensorType(a) != kFloat32 || TfLiteOpaqueTensorType(b) != kFloat32) continue;
    claim->data[claim->size++] = plan->data[i];
  }
  g_claimed += claim->size;
  TfLiteStatus status = 0;
  if (claim->size > 0) {
    /* The runtime takes ownership of the operator. */
    TfLiteOperator* kernel = TfLiteOperatorCreate(kBuiltinDelegate, "OoTestAddDelegate", 1, NULL);
    TfLiteOperatorSetInit(kernel, KernelInit);
    TfLiteOperatorSetFree(kernel, KernelFree);
    TfLiteOperatorSetPrepare(kernel, KernelPrepare);
    TfLiteOperatorSetInvoke(kernel, KernelInvoke);
    status = TfLiteOpaqueContextReplaceNodeSubsetsWithDelegateKernels(ctx, kernel, claim, delegate);
  }
  free(claim);
  return status;
}

TfLiteOpaqueDelegate* tflite_plugin_create_delegate(char** keys, char** values, size_t n,
                                                    void (*report_error)(const char*)) {
  Settings* s = calloc(1, sizeof *s);
  if (!s) return NULL;
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(keys[i], "extra") == 0) {
      s->extra = strtof(values[i], NULL);
    } else if (strcmp(keys[i], "fail") == 0 && strcmp(values[i], "1") == 0) {
      if (report_error) report_error("oo test delegate: asked to fail (option fail=1)");
      free(s);
      return NULL;
    } else {
      if (report_error) report_error("oo test delegate: unknown option");
      free(s);
      return NULL;
    }
  }
  TfLiteOpaqueDelegateBuilder builder;
  memset(&builder, 0, sizeof builder);
  builder.data = s;
  builder.Prepare = DelegatePrepare;
  TfLiteOpaqueDelegate* d = TfLiteOpaqueDelegateCreate(&builder);
  if (d) ++g_live;
  return d;
}

void tflite_plugin_destroy_delegate(TfLiteOpaqueDelegate* delegate) {
  if (!delegate) return;
  free(TfLiteOpaqueDelegateGetData(delegate));
  TfLiteOpaqueDelegateDelete(delegate);
  --g_live;
}
