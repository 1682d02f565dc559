"""One-op models for every vectorized bundled kernel, with fixed inputs.

Shared by test_simd_clones.py: the same cases run on every SIMD clone of this
machine (in child processes, each with its own ``OPAQUE_OPS_SIMD`` cap) and
on the aarch64 build under qemu, and all must give the same bits.  Sizes are
odd on purpose, so that every vector loop also runs its remainder.

Plain module (this folder is no package); no pytest imports, so that a child
process can import it.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from opaque_ops.model import ModelBuilder

# kernel file -> op name
KERNELS = {
    "atan": "Atan",
    "clamp": "Clamp",
    "extract_image_patches": "ExtractImagePatches",
    "convolution2d_transpose_bias": "Convolution2DTransposeBias",
    "transform_tensor_bilinear": "TransformTensorBilinear",
    "max_pooling_with_argmax": "MaxPoolingWithArgmax2D",
}


def _model(op, inputs, n_out, options=None, version=1, consts=()):
    """``op`` on model inputs ``inputs`` (arrays), then constant inputs ``consts``."""
    b = ModelBuilder(description=f"simd case {op}")
    ins = [b.add_tensor(f"in{i}", list(a.shape), a.dtype) for i, a in enumerate(inputs)]
    cs = [b.add_constant(f"c{i}", np.asarray(a)) for i, a in enumerate(consts)]
    outs = [b.add_tensor(f"out{i}", [1], inputs[0].dtype) for i in range(n_out)]
    b.add_custom_op(op, ins + cs, outs, options=options, version=version)
    b.set_inputs(ins)
    b.set_outputs(outs)
    return b.build()


def _hard_floats(rng, n):
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), (rng.standard_normal(n) * 3).astype(np.float32)])


def _affine(rng, in_hw, out_hw):
    """A 4x4 matrix mapping the output grid onto the input, rotated and scaled a little."""
    a = rng.uniform(-0.4, 0.4)
    s = rng.uniform(0.7, 1.3) * in_hw / out_hw
    m = np.eye(4, dtype=np.float32)
    m[0, :2] = [s * np.cos(a), -s * np.sin(a)]
    m[1, :2] = [s * np.sin(a), s * np.cos(a)]
    m[0, 3], m[1, 3] = rng.uniform(-2, 6), rng.uniform(-2, 6)
    return m[None]


def cases():
    """``[(label, model bytes, [input arrays])]``, the same on every call."""
    rng = np.random.default_rng(20)
    out = []
    x = _hard_floats(rng, 50_003)
    out.append(("Atan", _model("Atan", [x], 1), [x]))
    out.append(("Clamp", _model("Clamp", [x], 1), [x]))

    img = rng.standard_normal((2, 37, 29, 3)).astype(np.float32)
    for k, s, r, pad in [(3, 1, 1, "SAME"), (4, 2, 1, "VALID"), (3, 2, 2, "SAME"), (1, 1, 1, "VALID")]:
        opts = {"ksizes": [1, k, k, 1], "strides": [1, s, s, 1], "rates": [1, r, r, 1], "padding": pad}
        out.append((f"ExtractImagePatches k{k}s{s}r{r}{pad}", _model("ExtractImagePatches", [img], 1, opts), [img]))
    q = rng.integers(-128, 128, size=(1, 19, 23, 5)).astype(np.int8)
    opts = {"ksizes": [1, 5, 3, 1], "strides": [1, 1, 2, 1], "rates": [1, 1, 1, 1], "padding": "SAME"}
    out.append(("ExtractImagePatches int8", _model("ExtractImagePatches", [q], 1, opts), [q]))

    # Both versions of the transposed convolution: lanes over pixels (few
    # output channels) and over a pixel's outputs (kh*kw*oc >= 64).
    for h, w, ic, oc, k, s, pad in [
        (13, 37, 16, 1, 2, 2, 1),
        (9, 21, 5, 3, 3, 1, 2),
        (7, 11, 6, 8, 3, 2, 1),
        (6, 19, 7, 17, 2, 2, 2),
        (5, 9, 3, 20, 4, 3, 1),
    ]:
        xin = rng.standard_normal((2, h, w, ic)).astype(np.float32)
        wt = rng.standard_normal((oc, k, k, ic)).astype(np.float32)
        bias = rng.standard_normal(oc).astype(np.float32)
        out.append(
            (
                f"Convolution2DTransposeBias {h}x{w}x{ic}->{oc} k{k}s{s}",
                _model("Convolution2DTransposeBias", [xin], 1, struct.pack("<3i", pad, s, s), consts=(wt, bias)),
                [xin],
            )
        )

    for c, size in [(32, 16), (5, 7)]:
        src = rng.standard_normal((1, 24, 26, c)).astype(np.float32)
        m = _affine(rng, 24, size)
        out.append(
            (
                f"TransformTensorBilinear c{c}",
                _model(
                    "TransformTensorBilinear", [src, m], 1, {"output_height": size, "output_width": size}, version=2
                ),
                [src, m],
            )
        )

    x4 = rng.standard_normal((1, 33, 31, 19)).astype(np.float32)
    x4[0, :4, :4, :] = x4[0, 0, 0, :]  # ties: the first maximum must win everywhere
    for padding, f, act in [(1, 2, 0), (2, 3, 1)]:
        pool = struct.pack("<6i", padding, f, f, f, f, act) + bytes(8)
        out.append(
            (f"MaxPoolingWithArgmax2D p{padding}f{f}a{act}", _model("MaxPoolingWithArgmax2D", [x4], 2, pool), [x4])
        )
    return out


def run_cases(custom_ops, labels=None) -> dict[str, str]:
    """``{label: sha256 of every output's bytes}`` with the given kernels (all cases, or ``labels``)."""
    import opaque_ops as oo

    digests = {}
    for label, model, inputs in cases():
        if labels is not None and label not in labels:
            continue
        it = oo.Interpreter(model_content=model, custom_ops=custom_ops)
        it.allocate_tensors()
        for d, a in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], a)
        it.invoke()
        h = hashlib.sha256()
        for d in it.get_output_details():
            h.update(np.ascontiguousarray(it.get_tensor(d["index"])).tobytes())
        digests[label] = h.hexdigest()
    return digests
