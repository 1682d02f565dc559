/* opaque_ops_runtime.c -- compiled into every kernel library.
 *
 * It does three jobs:
 *   1. dispatches the operator functions to whichever name generation the
 *      loaded TFLite exports (TfLiteOperator* from 2.17, TfLiteRegistration-
 *      External* before), with the right arity for TfLiteOperatorCreate;
 *   2. keeps the list of ops the library declares (OPAQUE_OP lines) and builds
 *      their operators on request;
 *   3. stamps the library with the ABI version the loader checks.
 *
 * Functions are looked up with dlsym(RTLD_DEFAULT) because opaque_ops loads
 * the runtime with RTLD_GLOBAL; the library is not linked to a runtime path.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opaque_ops.h"

#define OO_HIDDEN __attribute__((visibility("hidden")))
#define OO_EXPORT __attribute__((visibility("default")))

#define OO_STR2(x) #x
#define OO_STR(x) OO_STR2(x)

#if defined(__x86_64__)
#define OO_ARCH "x86_64"
#elif defined(__aarch64__)
#define OO_ARCH "aarch64"
#elif defined(__arm__)
#define OO_ARCH "arm"
#else
#define OO_ARCH "unknown"
#endif

/* The loader parses "key=value;" pairs; abi must match exactly. */
OO_EXPORT const char* OpaqueOps_Stamp(void) {
  return "opaque_ops;abi=" OO_STR(OPAQUE_OPS_ABI_VERSION) ";header=" OPAQUE_OPS_HEADER_VERSION
         ";arch=" OO_ARCH ";";
}

static char oo_last_error[256];

OO_EXPORT const char* OpaqueOps_LastError(void) { return oo_last_error; }

static void oo_set_error(const char* what, const char* name) {
  snprintf(oo_last_error, sizeof oo_last_error, "%s%s", what, name ? name : "");
}

/* ------------------------------------------------------------ dispatch -- */

typedef TfLiteOperator* (*oo_create3_fn)(TfLiteBuiltinOperator, const char*, int);
typedef TfLiteOperator* (*oo_create4_fn)(TfLiteBuiltinOperator, const char*, int, void*);

static struct {
  int ready;
  int create_takes_user_data; /* 2.18+: TfLiteOperatorCreate has 4 parameters */
  oo_create3_fn create3;
  oo_create4_fn create4;          /* 4-arity Create, or CreateWithData */
  void (*del)(TfLiteOperator*);
  const char* (*get_name)(const TfLiteOperator*);
  int (*get_version)(const TfLiteOperator*);
  TfLiteBuiltinOperator (*get_code)(const TfLiteOperator*);
  void* (*get_user_data)(const TfLiteOperator*);
  void (*set_init)(TfLiteOperator*, OpaqueOpsInitFn);
  void (*set_free)(TfLiteOperator*, OpaqueOpsFreeFn);
  void (*set_prepare)(TfLiteOperator*, OpaqueOpsStepFn);
  void (*set_invoke)(TfLiteOperator*, OpaqueOpsStepFn);
  void (*set_inplace)(TfLiteOperator*, uint64_t);
} oo_api;

/* New name first, then the pre-2.17 one. */
static void* oo_sym(const char* suffix) {
  char name[96];
  void* p;
  snprintf(name, sizeof name, "TfLiteOperator%s", suffix);
  p = dlsym(RTLD_DEFAULT, name);
  if (p) return p;
  snprintf(name, sizeof name, "TfLiteRegistrationExternal%s", suffix);
  return dlsym(RTLD_DEFAULT, name);
}

static int oo_version_at_least(int major, int minor) {
  const char* (*version)(void) = (const char* (*)(void))dlsym(RTLD_DEFAULT, "TfLiteVersion");
  int ma = 0, mi = 0;
  if (!version || sscanf(version(), "%d.%d", &ma, &mi) != 2) return 0;
  return ma > major || (ma == major && mi >= minor);
}

static int oo_bind(void) {
  if (oo_api.ready) return 1;
  oo_api.create_takes_user_data =
      dlsym(RTLD_DEFAULT, "TfLiteOperatorCreate") != NULL && oo_version_at_least(2, 18);
  if (oo_api.create_takes_user_data) {
    oo_api.create4 = (oo_create4_fn)dlsym(RTLD_DEFAULT, "TfLiteOperatorCreate");
  } else {
    oo_api.create3 = (oo_create3_fn)oo_sym("Create");
    oo_api.create4 = (oo_create4_fn)oo_sym("CreateWithData");
  }
  *(void**)&oo_api.del = oo_sym("Delete");
  *(void**)&oo_api.get_name = oo_sym("GetCustomName");
  *(void**)&oo_api.get_version = oo_sym("GetVersion");
  *(void**)&oo_api.get_code = oo_sym("GetBuiltInCode");
  *(void**)&oo_api.get_user_data = oo_sym("GetUserData");
  *(void**)&oo_api.set_init = oo_sym("SetInit");
  *(void**)&oo_api.set_free = oo_sym("SetFree");
  *(void**)&oo_api.set_prepare = oo_sym("SetPrepare");
  *(void**)&oo_api.set_invoke = oo_sym("SetInvoke");
  *(void**)&oo_api.set_inplace = oo_sym("SetInplaceOperator");
  if ((!oo_api.create3 && !oo_api.create4) || !oo_api.del || !oo_api.set_prepare ||
      !oo_api.set_invoke) {
    oo_set_error("the loaded TFLite runtime exports neither TfLiteOperator* nor "
                 "TfLiteRegistrationExternal* functions; was libtensorflowlite_c loaded "
                 "with RTLD_GLOBAL before this library?",
                 NULL);
    return 0;
  }
  oo_api.ready = 1;
  return 1;
}

/* While the loader builds an op for a model op name, a factory's own name
 * ("ATAN") is replaced by the model's ("Atan").  TFLite keeps the pointer, so
 * it must be static storage: it points into the library's op list. */
static const char* oo_name_override;

OO_EXPORT TfLiteOperator* OpaqueOps_OperatorCreate(TfLiteBuiltinOperator builtin_code,
                                                   const char* custom_name, int version,
                                                   void* user_data) {
  if (!oo_bind()) return NULL;
  if (builtin_code == kTfLiteBuiltinCustom && oo_name_override) custom_name = oo_name_override;
  if (oo_api.create_takes_user_data || (user_data && oo_api.create4))
    return oo_api.create4(builtin_code, custom_name, version, user_data);
  return oo_api.create3(builtin_code, custom_name, version);
}

OO_EXPORT void OpaqueOps_OperatorDelete(TfLiteOperator* op) {
  if (op && oo_bind()) oo_api.del(op);
}
OO_EXPORT const char* OpaqueOps_OperatorGetCustomName(const TfLiteOperator* op) {
  return oo_bind() && oo_api.get_name ? oo_api.get_name(op) : NULL;
}
OO_EXPORT int OpaqueOps_OperatorGetVersion(const TfLiteOperator* op) {
  return oo_bind() && oo_api.get_version ? oo_api.get_version(op) : -1;
}
OO_EXPORT TfLiteBuiltinOperator OpaqueOps_OperatorGetBuiltInCode(const TfLiteOperator* op) {
  return oo_bind() && oo_api.get_code ? oo_api.get_code(op) : kTfLiteBuiltinCustom;
}
OO_EXPORT void* OpaqueOps_OperatorGetUserData(const TfLiteOperator* op) {
  return oo_bind() && oo_api.get_user_data ? oo_api.get_user_data(op) : NULL;
}
OO_EXPORT void OpaqueOps_OperatorSetInit(TfLiteOperator* op, OpaqueOpsInitFn fn) {
  if (oo_bind() && oo_api.set_init) oo_api.set_init(op, fn);
}
OO_EXPORT void OpaqueOps_OperatorSetFree(TfLiteOperator* op, OpaqueOpsFreeFn fn) {
  if (oo_bind() && oo_api.set_free) oo_api.set_free(op, fn);
}
OO_EXPORT void OpaqueOps_OperatorSetPrepare(TfLiteOperator* op, OpaqueOpsStepFn fn) {
  if (oo_bind()) oo_api.set_prepare(op, fn);
}
OO_EXPORT void OpaqueOps_OperatorSetInvoke(TfLiteOperator* op, OpaqueOpsStepFn fn) {
  if (oo_bind()) oo_api.set_invoke(op, fn);
}
OO_EXPORT void OpaqueOps_OperatorSetInplaceOperator(TfLiteOperator* op, uint64_t inplace) {
  if (oo_bind() && oo_api.set_inplace) oo_api.set_inplace(op, inplace);
}

/* ------------------------------------------------------------- op list -- */

/* Constructors push in load order; the list is read back to front, which is
 * fine: the loader sorts by name. */
static OpaqueOpsOpDef* oo_defs;
static int oo_num_defs;

OO_HIDDEN void OpaqueOps_RegisterOpDef(OpaqueOpsOpDef* def) {
  def->next = oo_defs;
  oo_defs = def;
  oo_num_defs++;
}

static OpaqueOpsOpDef* oo_def_at(int index) {
  OpaqueOpsOpDef* d = oo_defs;
  if (index < 0 || index >= oo_num_defs) return NULL;
  while (index-- > 0) d = d->next;
  return d;
}

OO_EXPORT int OpaqueOps_NumOps(void) { return oo_num_defs; }

OO_EXPORT const char* OpaqueOps_OpName(int index) {
  OpaqueOpsOpDef* d = oo_def_at(index);
  return d ? d->name : NULL;
}

OO_EXPORT int OpaqueOps_OpVersion(int index) {
  OpaqueOpsOpDef* d = oo_def_at(index);
  return d ? d->version : -1;
}

OO_EXPORT TfLiteOperator* OpaqueOps_MakeOperator(int index) {
  OpaqueOpsOpDef* d = oo_def_at(index);
  TfLiteOperator* op;
  oo_last_error[0] = 0;
  if (!d) {
    oo_set_error("no op at this index", NULL);
    return NULL;
  }
  if (!oo_bind()) return NULL;
  if (d->factory) {
    oo_name_override = d->name;
    op = d->factory();
    oo_name_override = NULL;
    if (!op) oo_set_error("the factory function returned NULL for op ", d->name);
    return op;
  }
  if (!d->invoke) {
    oo_set_error("no .invoke callback given in OPAQUE_OP for op ", d->name);
    return NULL;
  }
  op = OpaqueOps_OperatorCreate(kTfLiteBuiltinCustom, d->name, d->version, NULL);
  if (!op) {
    oo_set_error("the runtime could not create an operator for op ", d->name);
    return NULL;
  }
  if (d->init) OpaqueOps_OperatorSetInit(op, d->init);
  if (d->free) OpaqueOps_OperatorSetFree(op, d->free);
  if (d->prepare) OpaqueOps_OperatorSetPrepare(op, d->prepare);
  OpaqueOps_OperatorSetInvoke(op, d->invoke);
  return op;
}
