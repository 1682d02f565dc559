/* Forwarding header: C written against upstream TensorFlow Lite includes
 * "tensorflow/lite/c/common.h"; with opaque_ops' include directory on the path
 * that name leads to opaque_ops' own declarations. */
#ifndef OPAQUE_OPS_FWD_COMMON_H
#define OPAQUE_OPS_FWD_COMMON_H
#include "../../../opaque_ops.h"
#endif
