/* Atan in the style of TensorFlow Lite's custom-operator guide (C API):
 * a factory that creates the operator under the guide's name "ATAN" with the
 * pre-2.17 TfLiteRegistrationExternal* calls.  The converted model calls the
 * op "Atan"; compile_ops(ops={"Atan": "AtanOpRegistrationExternal"})
 * registers it under that name. */
#include <math.h>
#include <stddef.h>

#include "tensorflow/lite/c/c_api.h"
#include "tensorflow/lite/c/c_api_opaque.h"
#include "tensorflow/lite/c/common.h"

static TfLiteStatus AtanPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfInputs(node), 1);
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfOutputs(node), 1);
  const TfLiteOpaqueTensor* input = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(context, TfLiteOpaqueTensorType(input), kTfLiteFloat32);

  int num_dims = TfLiteOpaqueTensorNumDims(input);
  TfLiteIntArray* output_size = TfLiteIntArrayCreate(num_dims);
  for (int i = 0; i < num_dims; ++i) output_size->data[i] = TfLiteOpaqueTensorDim(input, i);
  /* The runtime owns output_size from here on, whatever the result. */
  return TfLiteOpaqueContextResizeTensor(context, output, output_size);
}

static TfLiteStatus AtanInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* input = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  const float* in = (const float*)TfLiteOpaqueTensorData(input);
  float* out = (float*)TfLiteOpaqueTensorData(output);
  size_t count = TfLiteOpaqueTensorByteSize(input) / sizeof(float);
  /* atan in double, rounded once: the float result is then correctly rounded. */
  for (size_t i = 0; i < count; ++i) out[i] = (float)atan((double)in[i]);
  return kTfLiteOk;
}

static TfLiteRegistrationExternal* AtanOpCreate(void) {
  TfLiteRegistrationExternal* r =
      TfLiteRegistrationExternalCreate(kTfLiteBuiltinCustom, "ATAN", /*version=*/1);
  TfLiteRegistrationExternalSetPrepare(r, AtanPrepare);
  TfLiteRegistrationExternalSetInvoke(r, AtanInvoke);
  return r;
}

/* One operator per process, never destroyed: TFLite keeps pointing at it. */
TfLiteRegistrationExternal* AtanOpRegistrationExternal(void) {
  static TfLiteRegistrationExternal* atan_op = NULL;
  if (atan_op == NULL) atan_op = AtanOpCreate();
  return atan_op;
}
