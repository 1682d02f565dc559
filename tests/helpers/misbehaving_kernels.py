"""Kernels that crash, hang or exit on purpose, and the small models that run them (the isolation tests).

The fixtures built on them, ``bad_ops`` and ``no_leaks``, are in tests/isolate/conftest.py.
"""

from __future__ import annotations

import numpy as np

from opaque_ops.testing import build_op_model

# Kernels that misbehave on purpose.  Their functions are not static, so the
# dynamic symbol table names them in the C backtrace (backtrace_symbols);
# StaticNull checks the addr2line path for static functions.
KERNELS = r"""
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "opaque_ops.h"

static TfLiteStatus SamePrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  int nd = TfLiteOpaqueTensorNumDims(in);
  TfLiteIntArray* s = TfLiteIntArrayCreate(nd);
  for (int i = 0; i < nd; ++i) s->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s);
}

/* y = 2x + 1: the well-behaved op the others are compared with. */
TfLiteStatus TwiceInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  size_t k = TfLiteOpaqueTensorByteSize(in) / sizeof(float);
  for (size_t i = 0; i < k; ++i) y[i] = 2.0f * x[i] + 1.0f;
  return kTfLiteOk;
}

TfLiteStatus CrashNullInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  volatile int* p = NULL;
  *p = 42;
  return kTfLiteOk;
}

static TfLiteStatus StaticNullInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  volatile int* p = NULL;
  *p = 7;
  return kTfLiteOk;
}

TfLiteStatus CrashAbortInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  abort();
  return kTfLiteOk;
}

TfLiteStatus CrashPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  volatile int* p = NULL;
  *p = 1;
  return kTfLiteOk;
}

void* CrashInit(TfLiteOpaqueContext* c, const char* buffer, size_t length) {
  volatile int* p = NULL;
  *p = 2;
  return NULL;
}

TfLiteStatus SpinInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  volatile unsigned long k = 0;
  for (;;) ++k;
  return kTfLiteOk;
}

/* 20 ms per node: a long model that TfLiteInterpreterCancel can stop between nodes. */
TfLiteStatus SlowInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  usleep(20000);
  return TwiceInvoke(c, n);
}

/* Reads its input only after 200 ms. */
TfLiteStatus LateReadInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  usleep(200000);
  return TwiceInvoke(c, n);
}

/* Sleeps x[0] seconds, then copies x: a chain of these runs as long as its input says
 * (tests/helpers/slow_model.wait_model). */
TfLiteStatus WaitInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  if (x[0] > 0) {
    struct timespec t = {(time_t)x[0], (long)((x[0] - (time_t)x[0]) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
  }
  size_t k = TfLiteOpaqueTensorByteSize(in) / sizeof(float);
  for (size_t i = 0; i < k; ++i) y[i] = x[i];
  return kTfLiteOk;
}

TfLiteStatus ExitInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  _exit(3);
  return kTfLiteOk;
}

OPAQUE_OP("Twice", 1, .prepare = SamePrepare, .invoke = TwiceInvoke);
OPAQUE_OP("CrashNull", 1, .prepare = SamePrepare, .invoke = CrashNullInvoke);
OPAQUE_OP("StaticNull", 1, .prepare = SamePrepare, .invoke = StaticNullInvoke);
OPAQUE_OP("CrashAbort", 1, .prepare = SamePrepare, .invoke = CrashAbortInvoke);
OPAQUE_OP("CrashPrepare", 1, .prepare = CrashPrepare, .invoke = TwiceInvoke);
OPAQUE_OP("CrashInit", 1, .init = CrashInit, .prepare = SamePrepare, .invoke = TwiceInvoke);
OPAQUE_OP("Spin", 1, .prepare = SamePrepare, .invoke = SpinInvoke);
OPAQUE_OP("Slow", 1, .prepare = SamePrepare, .invoke = SlowInvoke);
OPAQUE_OP("LateRead", 1, .prepare = SamePrepare, .invoke = LateReadInvoke);
OPAQUE_OP("Exit", 1, .prepare = SamePrepare, .invoke = ExitInvoke);
OPAQUE_OP("Wait", 1, .prepare = SamePrepare, .invoke = WaitInvoke);
"""


def one_op(op: str, n: int = 4) -> bytes:
    """A model of one custom op on a float32 [n] input."""
    return build_op_model(op, [np.zeros(n, np.float32)], [([n], np.float32)])


def chain(op: str, nodes: int, n: int = 4) -> bytes:
    """A model of ``nodes`` custom ops in a row."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    t = [b.add_tensor(f"t{i}", [n], np.float32) for i in range(nodes + 1)]
    for i in range(nodes):
        b.add_custom_op(op, [t[i]], [t[i + 1]])
    b.set_inputs([t[0]])
    b.set_outputs([t[-1]])
    return b.build()


def twice(x):
    """The numpy reference of the Twice op, y = 2x + 1, in float32."""
    return (np.float32(2) * np.asarray(x, np.float32) + np.float32(1)).astype(np.float32)
