/* oo_run.c -- run a .tflite model with opaque_ops kernel libraries, no Python.
 *
 *   oo_run LIBTFLITE MODEL.tflite KERNELS.so [MORE.so ...]
 *          --in input0.bin [--in input1.bin ...] [--out-prefix out]
 *
 * Each --in file holds the raw bytes of one model input (in order); its size
 * must equal the tensor's.  Each output i is written raw to <prefix><i>.bin
 * and summarised on stdout.  Any failure: a message on stderr, exit status 1.
 *
 * Build (native, or with aarch64-linux-gnu-gcc for a cross build):
 *   cc -std=gnu11 -O2 -Wall -I c/include c/tools/oo_run.c -o oo_run -ldl
 *
 * The TFLite library is dlopened with RTLD_GLOBAL before any kernel library,
 * which is what lets the kernels' undefined TfLiteOpaque* symbols resolve
 * (they are linked to no runtime path).  Only the few C API functions used
 * here are looked up, with this file's own prototypes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opaque_ops.h" /* TfLiteStatus, TfLiteType, TfLiteOperator, ABI version */

#define OO_MAX_LIBS 64
#define OO_MAX_OPS 1024
#define OO_MAX_INPUTS 64
#define OO_SHOW_VALUES 8

typedef struct TfLiteModel TfLiteModel;
typedef struct TfLiteInterpreterOptions TfLiteInterpreterOptions;
typedef struct TfLiteInterpreter TfLiteInterpreter;
typedef struct TfLiteTensor TfLiteTensor;

/* The runtime's functions, looked up by name. */
static struct {
  const char* (*version)(void);
  TfLiteModel* (*model_create)(const void*, size_t);
  void (*model_delete)(TfLiteModel*);
  TfLiteInterpreterOptions* (*options_create)(void);
  void (*options_delete)(TfLiteInterpreterOptions*);
  void (*options_add_operator)(TfLiteInterpreterOptions*, TfLiteOperator*);
  void (*options_set_reporter)(TfLiteInterpreterOptions*,
                               void (*)(void*, const char*, va_list), void*);
  TfLiteInterpreter* (*interp_create)(const TfLiteModel*, const TfLiteInterpreterOptions*);
  void (*interp_delete)(TfLiteInterpreter*);
  TfLiteStatus (*allocate)(TfLiteInterpreter*);
  TfLiteStatus (*invoke)(TfLiteInterpreter*);
  int32_t (*input_count)(const TfLiteInterpreter*);
  TfLiteTensor* (*input_tensor)(const TfLiteInterpreter*, int32_t);
  int32_t (*output_count)(const TfLiteInterpreter*);
  const TfLiteTensor* (*output_tensor)(const TfLiteInterpreter*, int32_t);
  TfLiteType (*tensor_type)(const TfLiteTensor*);
  int32_t (*tensor_num_dims)(const TfLiteTensor*);
  int32_t (*tensor_dim)(const TfLiteTensor*, int32_t);
  size_t (*tensor_byte_size)(const TfLiteTensor*);
  void* (*tensor_data)(const TfLiteTensor*);
  const char* (*tensor_name)(const TfLiteTensor*);
  TfLiteStatus (*tensor_copy_from)(TfLiteTensor*, const void*, size_t);
} rt;

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("oo_run: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void* need(void* lib, const char* path, const char* name) {
  void* p = dlsym(lib, name);
  if (!p) die("%s does not export %s; is it a TFLite C library (libtensorflowlite_c)?", path, name);
  return p;
}

/* TFLite passes printf-style messages with a va_list; format them here. */
static void report(void* user_data, const char* format, va_list args) {
  (void)user_data;
  fputs("tflite: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
}

#if defined(__x86_64__)
#define OO_HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define OO_HOST_MACHINE EM_AARCH64
#elif defined(__arm__)
#define OO_HOST_MACHINE EM_ARM
#endif

static const char* machine_name(unsigned m) {
  switch (m) {
    case EM_X86_64: return "x86_64";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_386: return "x86";
    default: return "another architecture";
  }
}

/* glibc reports a library for another machine as "No such file", so look at
 * the ELF header first and say what is wrong. */
static void check_machine(const char* path) {
#ifdef OO_HOST_MACHINE
  unsigned char head[20];
  unsigned m;
  FILE* f = fopen(path, "rb");
  if (!f) die("cannot open %s", path);
  if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, ELFMAG, SELFMAG) != 0) {
    fclose(f);
    die("%s is not an ELF shared library", path);
  }
  fclose(f);
  m = head[EI_DATA] == ELFDATA2MSB ? (unsigned)(head[18] << 8 | head[19])
                                   : (unsigned)(head[19] << 8 | head[18]);
  if (m != OO_HOST_MACHINE)
    die("%s is built for %s, but this oo_run runs on %s; rebuild it with "
        "`python build.py SOURCE --target %s`",
        path, machine_name(m), machine_name(OO_HOST_MACHINE), machine_name(OO_HOST_MACHINE));
#else
  (void)path;
#endif
}

/* dlopen searches the library path for a bare name; a file name given on the
 * command line means the file, as for any other argument. */
static void* open_file(const char* path, int flags) {
  char buf[4096];
  check_machine(path);
  if (strchr(path, '/')) return dlopen(path, flags);
  if (snprintf(buf, sizeof buf, "./%s", path) >= (int)sizeof buf) return NULL;
  return dlopen(buf, flags);
}

static void load_runtime(const char* path) {
  void* lib = open_file(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) die("cannot load the TFLite library %s: %s", path, dlerror());
  *(void**)&rt.version = need(lib, path, "TfLiteVersion");
  *(void**)&rt.model_create = need(lib, path, "TfLiteModelCreate");
  *(void**)&rt.model_delete = need(lib, path, "TfLiteModelDelete");
  *(void**)&rt.options_create = need(lib, path, "TfLiteInterpreterOptionsCreate");
  *(void**)&rt.options_delete = need(lib, path, "TfLiteInterpreterOptionsDelete");
  *(void**)&rt.options_set_reporter = need(lib, path, "TfLiteInterpreterOptionsSetErrorReporter");
  /* 2.17+ exports the new name only, older releases the old one only. */
  *(void**)&rt.options_add_operator = dlsym(lib, "TfLiteInterpreterOptionsAddOperator");
  if (!rt.options_add_operator)
    *(void**)&rt.options_add_operator = dlsym(lib, "TfLiteInterpreterOptionsAddRegistrationExternal");
  if (!rt.options_add_operator)
    die("%s exports neither TfLiteInterpreterOptionsAddOperator nor "
        "TfLiteInterpreterOptionsAddRegistrationExternal; it cannot run custom ops", path);
  *(void**)&rt.interp_create = need(lib, path, "TfLiteInterpreterCreate");
  *(void**)&rt.interp_delete = need(lib, path, "TfLiteInterpreterDelete");
  *(void**)&rt.allocate = need(lib, path, "TfLiteInterpreterAllocateTensors");
  *(void**)&rt.invoke = need(lib, path, "TfLiteInterpreterInvoke");
  *(void**)&rt.input_count = need(lib, path, "TfLiteInterpreterGetInputTensorCount");
  *(void**)&rt.input_tensor = need(lib, path, "TfLiteInterpreterGetInputTensor");
  *(void**)&rt.output_count = need(lib, path, "TfLiteInterpreterGetOutputTensorCount");
  *(void**)&rt.output_tensor = need(lib, path, "TfLiteInterpreterGetOutputTensor");
  *(void**)&rt.tensor_type = need(lib, path, "TfLiteTensorType");
  *(void**)&rt.tensor_num_dims = need(lib, path, "TfLiteTensorNumDims");
  *(void**)&rt.tensor_dim = need(lib, path, "TfLiteTensorDim");
  *(void**)&rt.tensor_byte_size = need(lib, path, "TfLiteTensorByteSize");
  *(void**)&rt.tensor_data = need(lib, path, "TfLiteTensorData");
  *(void**)&rt.tensor_name = need(lib, path, "TfLiteTensorName");
  *(void**)&rt.tensor_copy_from = need(lib, path, "TfLiteTensorCopyFromBuffer");
}

/* Reads a whole file; the caller frees the result. */
static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  long n;
  void* buf;
  if (!f) die("cannot open %s", path);
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    die("cannot read %s", path);
  }
  buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf) die("out of memory reading %s", path);
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    die("cannot read %s", path);
  }
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* The value of "key=" in a "k=v;k=v;" stamp, copied into out. */
static int stamp_field(const char* stamp, const char* key, char* out, size_t cap) {
  size_t klen = strlen(key);
  const char* p = stamp;
  while (p && *p) {
    if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
      const char* v = p + klen + 1;
      size_t n = strcspn(v, ";");
      if (n >= cap) n = cap - 1;
      memcpy(out, v, n);
      out[n] = 0;
      return 1;
    }
    p = strchr(p, ';');
    if (p) p++;
  }
  return 0;
}

typedef const char* (*stamp_fn)(void);
typedef int (*num_ops_fn)(void);
typedef const char* (*op_name_fn)(int);
typedef int (*op_version_fn)(int);
typedef TfLiteOperator* (*make_op_fn)(int);
typedef const char* (*last_error_fn)(void);

static int add_kernel_library(const char* path, TfLiteOperator** ops, int count) {
  void* lib = open_file(path, RTLD_NOW | RTLD_LOCAL);
  char abi[32], want[32];
  stamp_fn stamp;
  num_ops_fn num_ops;
  op_name_fn op_name;
  op_version_fn op_version;
  make_op_fn make_op;
  last_error_fn last_error;
  int n, i;
  if (!lib) die("cannot load kernel library %s: %s", path, dlerror());
  *(void**)&stamp = dlsym(lib, "OpaqueOps_Stamp");
  if (!stamp)
    die("%s is not an opaque_ops kernel library (no OpaqueOps_Stamp); build it with build.py", path);
  snprintf(want, sizeof want, "%d", OPAQUE_OPS_ABI_VERSION);
  if (!stamp_field(stamp(), "abi", abi, sizeof abi) || strcmp(abi, want) != 0)
    die("%s was built for opaque_ops ABI %s, but this oo_run expects ABI %s; rebuild it",
        path, stamp_field(stamp(), "abi", abi, sizeof abi) ? abi : "?", want);
  *(void**)&num_ops = dlsym(lib, "OpaqueOps_NumOps");
  *(void**)&op_name = dlsym(lib, "OpaqueOps_OpName");
  *(void**)&op_version = dlsym(lib, "OpaqueOps_OpVersion");
  *(void**)&make_op = dlsym(lib, "OpaqueOps_MakeOperator");
  *(void**)&last_error = dlsym(lib, "OpaqueOps_LastError");
  if (!num_ops || !op_name || !op_version || !make_op || !last_error)
    die("%s lacks the opaque_ops entry points; rebuild it with build.py", path);
  n = num_ops();
  if (n <= 0) die("%s declares no ops", path);
  for (i = 0; i < n; i++) {
    TfLiteOperator* op = make_op(i);
    if (!op) die("%s: cannot create op %s: %s", path, op_name(i), last_error());
    if (count >= OO_MAX_OPS) die("too many ops (more than %d)", OO_MAX_OPS);
    ops[count++] = op;
    if (op_version(i) > 0)
      fprintf(stderr, "oo_run: %s provides %s v%d\n", path, op_name(i), op_version(i));
    else
      fprintf(stderr, "oo_run: %s provides %s (from a factory)\n", path, op_name(i));
  }
  /* The library stays loaded: TFLite calls into it until the process ends. */
  return count;
}

static const char* type_name(TfLiteType t) {
  switch (t) {
    case kTfLiteFloat32: return "float32";
    case kTfLiteInt32: return "int32";
    case kTfLiteUInt8: return "uint8";
    case kTfLiteInt64: return "int64";
    case kTfLiteBool: return "bool";
    case kTfLiteInt16: return "int16";
    case kTfLiteInt8: return "int8";
    case kTfLiteFloat16: return "float16";
    case kTfLiteFloat64: return "float64";
    default: return "other";
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: oo_run LIBTFLITE MODEL.tflite KERNELS.so [MORE.so ...] --in INPUT.bin "
          "[--in INPUT.bin ...] [--out-prefix PREFIX]\n");
  exit(1);
}

int main(int argc, char** argv) {
  const char* positional[2 + OO_MAX_LIBS];
  const char* inputs[OO_MAX_INPUTS];
  const char* prefix = "out";
  int npos = 0, nin = 0, nops = 0, i;
  static TfLiteOperator* ops[OO_MAX_OPS];
  void* model_bytes;
  size_t model_size;
  TfLiteModel* model;
  TfLiteInterpreterOptions* options;
  TfLiteInterpreter* interp;
  TfLiteStatus status;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--in") == 0) {
      if (++i >= argc) usage();
      if (nin >= OO_MAX_INPUTS) die("too many --in files");
      inputs[nin++] = argv[i];
    } else if (strcmp(argv[i], "--out-prefix") == 0) {
      if (++i >= argc) usage();
      prefix = argv[i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
    } else {
      if (npos >= 2 + OO_MAX_LIBS) die("too many kernel libraries");
      positional[npos++] = argv[i];
    }
  }
  if (npos < 2) usage();

  load_runtime(positional[0]);
  fprintf(stderr, "oo_run: TFLite %s from %s\n", rt.version(), positional[0]);
  for (i = 2; i < npos; i++) nops = add_kernel_library(positional[i], ops, nops);

  /* TFLite does not copy the model bytes: they live until exit. */
  model_bytes = read_file(positional[1], &model_size);
  model = rt.model_create(model_bytes, model_size);
  if (!model) die("%s is not a valid TFLite model", positional[1]);
  options = rt.options_create();
  rt.options_set_reporter(options, report, NULL);
  for (i = 0; i < nops; i++) rt.options_add_operator(options, ops[i]);
  interp = rt.interp_create(model, options);
  if (!interp) die("cannot create an interpreter for %s", positional[1]);
  status = rt.allocate(interp);
  if (status != kTfLiteOk)
    die("allocating tensors failed (status %d)%s", (int)status,
        status == kTfLiteUnresolvedOps ? ": the model uses a custom op no kernel library provides"
                                       : "");

  if (nin != rt.input_count(interp))
    die("the model has %d inputs but %d --in files were given", (int)rt.input_count(interp), nin);
  for (i = 0; i < nin; i++) {
    TfLiteTensor* t = rt.input_tensor(interp, i);
    size_t size;
    void* data = read_file(inputs[i], &size);
    if (size != rt.tensor_byte_size(t))
      die("input %d (%s) takes %zu bytes but %s has %zu", i, rt.tensor_name(t),
          rt.tensor_byte_size(t), inputs[i], size);
    if (rt.tensor_copy_from(t, data, size) != kTfLiteOk) die("cannot set input %d", i);
    free(data);
  }

  status = rt.invoke(interp);
  if (status != kTfLiteOk) die("invoke failed (status %d)", (int)status);

  for (i = 0; i < rt.output_count(interp); i++) {
    const TfLiteTensor* t = rt.output_tensor(interp, i);
    size_t size = rt.tensor_byte_size(t);
    const void* data = rt.tensor_data(t);
    char path[4096];
    FILE* f;
    int d, nd = rt.tensor_num_dims(t);
    if (snprintf(path, sizeof path, "%s%d.bin", prefix, i) >= (int)sizeof path)
      die("--out-prefix is too long");
    f = fopen(path, "wb");
    if (!f) die("cannot write %s", path);
    if (size && (!data || fwrite(data, 1, size, f) != size)) {
      fclose(f);
      die("cannot write %s", path);
    }
    if (fclose(f) != 0) die("cannot write %s", path);
    printf("output %d %s %s [", i, rt.tensor_name(t), type_name(rt.tensor_type(t)));
    for (d = 0; d < nd; d++) printf(d ? ",%d" : "%d", (int)rt.tensor_dim(t, d));
    printf("] -> %s", path);
    if (rt.tensor_type(t) == kTfLiteFloat32 && data) {
      size_t k, n = size / sizeof(float);
      printf(":");
      for (k = 0; k < n && k < OO_SHOW_VALUES; k++) printf(" %.9g", (double)((const float*)data)[k]);
      if (n > OO_SHOW_VALUES) printf(" ...");
    }
    printf("\n");
  }
  /* Interpreter before options and model; the kernel libraries stay loaded. */
  rt.interp_delete(interp);
  rt.options_delete(options);
  rt.model_delete(model);
  free(model_bytes);
  return 0;
}
