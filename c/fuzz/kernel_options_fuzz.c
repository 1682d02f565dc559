/*
 * libFuzzer target: the custom-options parsers of every bundled kernel.
 *
 * Custom options come from model files, which are untrusted.  Every kernel
 * parses them in its Init callback (raw int32 structs through rawopts.h,
 * flexbuffer maps through flex.h) and releases the result in Free.  This
 * target hands the fuzz bytes to the Init of every op linked into the binary
 * and frees what it returns, under ASan + UBSan.
 *
 * This file includes the runtime glue (c/src/opaque_ops_runtime.c) so that
 * the library's static op list, oo_defs, is reachable: each kernel's
 * OPAQUE_OP line registers its definition there from a constructor, exactly
 * as in a real kernel library.  The kernels themselves are compiled as
 * separate objects, unchanged.  No kernel's Init uses its context argument
 * (each starts with `(void)context`), so NULL is passed, as the op list has
 * no context to give before a model is loaded.
 *
 * Build and run (tools/fuzz_kernel_options.py does all of this):
 *   for k in c/kernels/*.c; do
 *     clang -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
 *       -fno-sanitize-recover=all -Ic/include -c $k -o $(basename $k .c).o
 *   done
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -Ic/include -Ic/src c/fuzz/kernel_options_fuzz.c *.o \
 *     -L$TFLITE_DIR -l:libtensorflowlite_c.so -Wl,-rpath,$TFLITE_DIR -ldl -lm \
 *     -o kernel_options_fuzz
 *   ./kernel_options_fuzz -runs=1000000 CORPUS_DIR
 *
 * The real libtensorflowlite_c is linked only because the kernels' Prepare
 * and Invoke reference TfLite* functions; Init and Free never call them.
 *
 * Environment:
 *   OO_FUZZ_OPS=Name1,Name2   fuzz only these ops (default: every op with an
 *                             Init).  Unknown names are an error.
 */
#include "opaque_ops_runtime.c"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OO_KFUZZ_MAX_OPS 64

static OpaqueOpsOpDef* oo_kfuzz_ops[OO_KFUZZ_MAX_OPS];
static int oo_kfuzz_nops;

/* Is `name` one of the comma-separated entries of `list`? */
static int oo_kfuzz_listed(const char* list, const char* name) {
  size_t n = strlen(name);
  const char* p = list;
  while (*p) {
    const char* end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const char* only = getenv("OO_FUZZ_OPS");
  OpaqueOpsOpDef* d;
  int listed = 0;
  (void)argc;
  (void)argv;
  for (d = oo_defs; d != NULL; d = d->next) {
    if (only && *only && !oo_kfuzz_listed(only, d->name)) continue;
    if (only && *only) listed++;
    if (d->init == NULL) continue; /* nothing parses options for this op */
    if (oo_kfuzz_nops == OO_KFUZZ_MAX_OPS) {
      fprintf(stderr, "kernel_options_fuzz: more than %d ops\n", OO_KFUZZ_MAX_OPS);
      abort();
    }
    oo_kfuzz_ops[oo_kfuzz_nops++] = d;
  }
  fprintf(stderr, "kernel_options_fuzz: %d ops linked, fuzzing the Init/Free of %d:", oo_num_defs,
          oo_kfuzz_nops);
  for (int i = 0; i < oo_kfuzz_nops; i++)
    fprintf(stderr, " %s/v%d", oo_kfuzz_ops[i]->name, oo_kfuzz_ops[i]->version);
  fprintf(stderr, "\n");
  /* A typo in OO_FUZZ_OPS, or a build that linked no kernel, would otherwise
   * "pass" by fuzzing nothing. */
  if (oo_kfuzz_nops == 0 || (only && *only && listed == 0)) {
    fprintf(stderr, "kernel_options_fuzz: no op with an Init to fuzz (OO_FUZZ_OPS=%s)\n",
            only ? only : "");
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int i = 0; i < oo_kfuzz_nops; i++) {
    OpaqueOpsOpDef* d = oo_kfuzz_ops[i];
    void* state = d->init(NULL, (const char*)data, size);
    if (d->free) d->free(NULL, state);
    if (size == 0) {
      /* TFLite passes (NULL, 0) for an op without options. */
      state = d->init(NULL, NULL, 0);
      if (d->free) d->free(NULL, state);
    }
  }
  return 0;
}
