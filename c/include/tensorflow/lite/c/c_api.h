/* Forwarding header: C written against upstream TensorFlow Lite includes
 * "tensorflow/lite/c/c_api.h"; with opaque_ops' include directory on the path
 * that name leads to opaque_ops' own declarations. */
#ifndef OPAQUE_OPS_FWD_C_API_H
#define OPAQUE_OPS_FWD_C_API_H
#include "../../../opaque_ops.h"
#endif
