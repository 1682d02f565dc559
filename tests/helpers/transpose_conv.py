"""Convolution2DTransposeBias (c/kernels/convolution2d_transpose_bias.c): the numpy reference in
MediaPipe's summation order, one-op models, and a build of the kernel that counts its calls.

Shared by tests/kernels (the kernel and the selfie models), tests/build/test_aarch64.py,
tests/interpreter/test_xnnpack.py and bench/.  Why the reference is bit exact: see
tests/kernels/test_convolution2d_transpose_bias.py.
"""

from __future__ import annotations

import ctypes
import struct
import textwrap

import numpy as np

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.build import paths as _paths
from opaque_ops.model import ModelBuilder

SAME, VALID = 1, 2


# ------------------------------------------------------------------ reference


def out_geometry(size, k, s, padding):
    """Output length and leading pad along one axis."""
    pad = max(0, k - ((size - 1) % s) - 1) if padding == SAME else 0
    return s * (size - 1) + k - pad, pad // 2


def reference(x, w, bias, padding, stride_w, stride_h):
    """out[n,y,x,o] = bias[o] + sum in[n,iy,ix,i] * W[o,ky,kx,i], in MediaPipe's order."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    bias = np.asarray(bias, np.float32)
    n, ih, iw, ic = x.shape
    oc, kh, kw, _ = w.shape
    oh, pt = out_geometry(ih, kh, stride_h, padding)
    ow, pl = out_geometry(iw, kw, stride_w, padding)
    out = np.empty((n, oh, ow, oc), np.float32)
    out[...] = bias
    iys, ixs = np.arange(ih), np.arange(iw)
    for ky in reversed(range(kh)):
        oys = iys * stride_h - pt + ky
        vy = (oys >= 0) & (oys < oh)
        if not vy.any():
            continue
        ry = iys[vy]
        sy = slice(oys[vy][0], oys[vy][-1] + 1, stride_h)
        for kx in reversed(range(kw)):
            oxs = ixs * stride_w - pl + kx
            vx = (oxs >= 0) & (oxs < ow)
            if not vx.any():
                continue
            rx = ixs[vx]
            sx = slice(oxs[vx][0], oxs[vx][-1] + 1, stride_w)
            patch = x[:, ry[0] : ry[-1] + 1, rx[0] : rx[-1] + 1, :]
            for c in range(ic):
                # float32 product, then float32 add: two roundings, like the C loop.
                out[:, sy, sx, :] += patch[..., c, None] * w[None, None, None, :, ky, kx, c]
    return out


def options(padding, stride_w, stride_h):
    return struct.pack("<3i", padding, stride_w, stride_h)


def one_op_model(x_shape, w, bias, opts, dequantize=False, out_shape=(1, 1, 1, 1)):
    """data -> Convolution2DTransposeBias(weights, bias); weights via DEQUANTIZE if asked."""
    b = ModelBuilder()
    x = b.add_tensor("x", list(x_shape), np.float32)
    if dequantize:
        w16 = b.add_constant("w16", np.asarray(w, np.float16))
        b16 = b.add_constant("b16", np.asarray(bias, np.float16))
        wt = b.add_tensor("w", list(np.shape(w)), np.float32)
        bt = b.add_tensor("b", list(np.shape(bias)), np.float32)
        b.add_op("DEQUANTIZE", [w16], [wt])
        b.add_op("DEQUANTIZE", [b16], [bt])
    else:
        wt = b.add_constant("w", np.asarray(w, np.float32))
        bt = b.add_constant("b", np.asarray(bias, np.float32))
    y = b.add_tensor("y", list(out_shape), np.float32)
    b.add_custom_op("Convolution2DTransposeBias", [x, wt, bt], [y], options=opts)
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def run(model, x, lib=None, **kw):
    it = oo.Interpreter(
        model_content=model,
        custom_ops=[lib or K.kernel("convolution2d_transpose_bias")],
        use_xnnpack=kw.pop("use_xnnpack", False),
        **kw,
    )
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


# A test-only build of the same kernel whose Prepare/Invoke count their calls,
# so a test can tell whether the kernel or a delegate ran a node.
COUNTING_SOURCE = textwrap.dedent(r"""
    #include "opaque_ops.h"
    #pragma push_macro("OPAQUE_OP")
    #undef OPAQUE_OP
    #define OPAQUE_OP(...) typedef int ctb_discarded_declaration
    #include "convolution2d_transpose_bias.c"
    #pragma pop_macro("OPAQUE_OP")

    int ctb_test_prepares = 0;
    int ctb_test_invokes = 0;
    static TfLiteStatus CtbCountingPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      ctb_test_prepares++;
      return CtbPrepare(c, n);
    }
    static TfLiteStatus CtbCountingInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      ctb_test_invokes++;
      return CtbInvoke(c, n);
    }
    OPAQUE_OP("Convolution2DTransposeBias", 1, .init = CtbInit, .free = CtbFree,
              .prepare = CtbCountingPrepare, .invoke = CtbCountingInvoke);
""")


class CountingKernel:
    """The real kernel plus call counters read through ctypes."""

    def __init__(self):
        self.lib = oo.compile_ops(COUNTING_SOURCE, include_dirs=[str(_paths.kernels_dir())])
        self._dll = ctypes.CDLL(str(self.lib.path))  # same handle: the library is already loaded

    @property
    def invokes(self):
        return ctypes.c_int.in_dll(self._dll, "ctb_test_invokes").value

    @property
    def prepares(self):
        return ctypes.c_int.in_dll(self._dll, "ctb_test_prepares").value
