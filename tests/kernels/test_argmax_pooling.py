"""Tests for MediaPipe's MaxPoolingWithArgmax2D and MaxUnpooling2D (v1).

References are numpy loops written from the definition (MediaPipe's
mediapipe/util/tflite/operations/max_pool_argmax.cc and max_unpooling.cc): SAME/VALID output sizes, padding
max(0, ((out-1)s + f - in) / 2) before the image, argmax = ky*fW + kx of the
first maximum plus 0.1, unpooling output [N, H*fH, W*fW, C].

XNNPACK, TFLite's default delegate, also implements both ops by name and
takes nodes whose stride equals the filter; it then writes integer argmax
bits, and its unpooling crashes on MediaPipe-style float indices.  When the
Interpreter has ``use_xnnpack=False`` every config is tested; otherwise only
configs XNNPACK declines (stride != filter), and each pooling test asserts
that our kernel ran (argmax values end in .1).
"""

from __future__ import annotations

import inspect
import struct
import textwrap

import numpy as np
import pytest

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder
from tests.helpers.hostile_options import run_isolated

CAN_DISABLE_XNNPACK = "use_xnnpack" in inspect.signature(oo.Interpreter.__init__).parameters


@pytest.fixture(scope="module")
def lib():
    return K.bundle("max_pooling_with_argmax", "max_unpooling")


def interp(data, lib):
    kw = {"use_xnnpack": False} if CAN_DISABLE_XNNPACK else {}
    return oo.Interpreter(model_content=data, custom_ops=[lib], **kw)


def opts(padding, sw, sh, fw, fh, act=0, size=32):
    raw = struct.pack("<6i", padding, sw, sh, fw, fh, act)
    return raw + b"\0" * (size - len(raw))


def pool_model(shape, options):
    b = ModelBuilder()
    x = b.add_tensor("x", shape, np.float32)
    v = b.add_tensor("v", [1, 1, 1, 1], np.float32)
    i = b.add_tensor("i", [1, 1, 1, 1], np.float32)
    b.add_custom_op("MaxPoolingWithArgmax2D", [x], [v, i], options=options)
    b.set_inputs([x])
    b.set_outputs([v, i])
    return b.build()


def unpool_model(shape, options, ishape=None):
    b = ModelBuilder()
    x = b.add_tensor("x", shape, np.float32)
    i = b.add_tensor("i", ishape or shape, np.float32)
    y = b.add_tensor("y", [1, 1, 1, 1], np.float32)
    b.add_custom_op("MaxUnpooling2D", [x, i], [y], options=options)
    b.set_inputs([x, i])
    b.set_outputs([y])
    return b.build()


def run_pool(lib, x, options):
    it = interp(pool_model(list(x.shape), options), lib)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    v, i = (it.get_tensor(d["index"]) for d in it.get_output_details())
    return v, i


def run_unpool(lib, v, i, options):
    it = interp(unpool_model(list(v.shape), options, list(i.shape)), lib)
    it.allocate_tensors()
    d = it.get_input_details()
    it.set_tensor(d[0]["index"], v)
    it.set_tensor(d[1]["index"], i)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def out_size(same, n, f, s):
    return -(-n // s) if same else (n - f + s) // s


def pad_of(out, n, f, s):
    return max(0, ((out - 1) * s + f - n) // 2)


def pool_ref(x, padding, sw, sh, fw, fh, act=0):
    n, h, w, c = x.shape
    same = padding == 1
    oh, ow = out_size(same, h, fh, sh), out_size(same, w, fw, sw)
    ph, pw = pad_of(oh, h, fh, sh), pad_of(ow, w, fw, sw)
    val = np.zeros((n, oh, ow, c), np.float32)
    idx = np.zeros((n, oh, ow, c), np.float32)
    for oy in range(oh):
        for ox in range(ow):
            best = np.full((n, c), -np.inf)
            arg = np.zeros((n, c), int)
            for ky in range(fh):
                for kx in range(fw):
                    y, xx = oy * sh - ph + ky, ox * sw - pw + kx
                    if 0 <= y < h and 0 <= xx < w:
                        cand = x[:, y, xx, :]
                        better = cand > best  # strict: the first maximum wins
                        best = np.where(better, cand, best)
                        arg = np.where(better, ky * fw + kx, arg)
            val[:, oy, ox] = best
            idx[:, oy, ox] = arg + np.float32(0.1)
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[act]
    return np.clip(val, lo, hi), idx


def unpool_ref(v, idx, sw, sh, fw, fh):
    n, h, w, c = v.shape
    oh, ow = h * fh, w * fw
    ph, pw = pad_of(h, oh, fh, sh), pad_of(w, ow, fw, sw)
    out = np.zeros((n, oh, ow, c), np.float32)
    k = idx.astype(int)
    for b in range(n):
        for y in range(h):
            for x in range(w):
                for ch in range(c):
                    ty = y * sh - ph + k[b, y, x, ch] // fw
                    tx = x * sw - pw + k[b, y, x, ch] % fw
                    if 0 <= ty < oh and 0 <= tx < ow:
                        out[b, ty, tx, ch] = v[b, y, x, ch]
    return out


def random_config(rng):
    while True:
        padding = int(rng.integers(1, 3))
        fw, fh = (int(v) for v in rng.integers(1, 4, 2))
        sw, sh = (int(v) for v in rng.integers(1, 4, 2))
        if not CAN_DISABLE_XNNPACK and (sw == fw or sh == fh):
            continue  # XNNPACK would take the node (see module docstring)
        return padding, sw, sh, fw, fh


@pytest.mark.parametrize("size", [32, 40])
@pytest.mark.parametrize("seed", range(8))
def test_pool_random(lib, seed, size):
    rng = np.random.default_rng(seed)
    cfg = random_config(rng)
    act = int(rng.integers(0, 4))
    shape = (int(rng.integers(1, 3)), int(rng.integers(3, 12)), int(rng.integers(3, 12)), int(rng.integers(1, 5)))
    # Few distinct values, so ties happen and the first-maximum rule is tested.
    x = rng.integers(-4, 5, shape).astype(np.float32) * 0.75
    v, i = run_pool(lib, x, opts(*cfg, act=act, size=size))
    rv, ri = pool_ref(x, *cfg, act=act)
    assert v.shape == rv.shape and i.shape == ri.shape
    np.testing.assert_array_equal(v, rv)
    np.testing.assert_array_equal(i, ri)
    assert np.allclose(i - np.floor(i), 0.1, atol=1e-5)  # our kernel, not XNNPACK


@pytest.mark.parametrize("seed", range(6))
def test_unpool_random(lib, seed):
    rng = np.random.default_rng(50 + seed)
    cfg = random_config(rng)
    shape = (1, int(rng.integers(3, 10)), int(rng.integers(3, 10)), int(rng.integers(1, 4)))
    x = rng.normal(size=shape).astype(np.float32)
    v, i = run_pool(lib, x, opts(*cfg))
    _, sw, sh, fw, fh = cfg
    got = run_unpool(lib, v, i, opts(*cfg))
    assert got.shape == (1, v.shape[1] * fh, v.shape[2] * fw, shape[3])
    np.testing.assert_array_equal(got, unpool_ref(v, i, sw, sh, fw, fh))
    # Every value written is one of the pooled maxima.
    assert set(got[got != 0].tolist()) <= set(v.ravel().tolist())


@pytest.mark.skipif(not CAN_DISABLE_XNNPACK, reason="XNNPACK takes stride == filter nodes")
def test_unpool_of_pool_non_overlapping(lib):
    # 2x2/2 VALID on 6x8: unpool(pool(x)) keeps each window's first maximum.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 6, 8, 3)).astype(np.float32)
    o = opts(2, 2, 2, 2, 2)
    v, i = run_pool(lib, x, o)
    y = run_unpool(lib, v, i, o)
    assert y.shape == (2, 6, 8, 3)
    win = x.reshape(2, 3, 2, 4, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(2, 3, 4, 3, 4)
    keep = np.zeros_like(win, bool)
    np.put_along_axis(keep, win.argmax(-1)[..., None], True, -1)
    expect = np.where(keep, win, 0).reshape(2, 3, 4, 3, 2, 2).transpose(0, 1, 4, 2, 5, 3)
    np.testing.assert_array_equal(y, expect.reshape(2, 6, 8, 3))


def test_pool_worked_example(lib):
    # 1x3x3x1, 2x2 window stride 1 VALID, stride != filter so our kernel runs.
    x = np.array([[1, 5, 2], [7, 3, 9], [4, 8, 6]], np.float32).reshape(1, 3, 3, 1)
    v, i = run_pool(lib, x, opts(2, 1, 1, 2, 2))
    np.testing.assert_array_equal(v[0, :, :, 0], [[7, 9], [8, 9]])
    np.testing.assert_allclose(i[0, :, :, 0], [[2.1, 3.1], [3.1, 1.1]], atol=1e-6)


@pytest.mark.parametrize(
    "bad", [np.float32(4.0), np.float32(-0.5), np.float32(np.nan), np.float32(1e9), np.float32(-np.inf)]
)
def test_unpool_index_out_of_range(lib, bad):
    o = opts(1, 1, 1, 2, 2)  # stride != filter: never XNNPACK's
    v = np.ones((1, 3, 3, 2), np.float32)
    i = np.full((1, 3, 3, 2), 0.1, np.float32)
    i[0, 1, 2, 1] = bad
    with pytest.raises(oo.KernelError, match="MaxUnpooling2D: argmax index"):
        run_unpool(lib, v, i, o)


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b"", "at least 24 bytes"),
        (struct.pack("<5i", 1, 1, 1, 2, 2), "at least 24 bytes"),
        (opts(0, 1, 1, 2, 2), "padding"),
        (opts(3, 1, 1, 2, 2), "padding"),
        (opts(1, 0, 1, 2, 2), "strides and filter"),
        (opts(1, 1, -1, 2, 2), "strides and filter"),
        (opts(1, 1, 1, 0, 2), "strides and filter"),
        (opts(1, 1, 1, 2, 2, act=6), "activation"),
    ],
)
def test_pool_bad_options(lib, raw, needle):
    it = interp(pool_model([1, 4, 4, 1], raw or None), lib)
    with pytest.raises(oo.KernelError, match=f"MaxPoolingWithArgmax2D: .*{needle}"):
        it.allocate_tensors()


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b"", "at least 24 bytes"),
        (b"\x01" * 23, "at least 24 bytes"),
        (opts(1, 1, 1, 2, 0), "strides and filter"),
        (opts(1, 1, 1, 70000, 2), "strides and filter"),
    ],
)
def test_unpool_bad_options(lib, raw, needle):
    it = interp(unpool_model([1, 4, 4, 1], raw or None), lib)
    with pytest.raises(oo.KernelError, match=f"MaxUnpooling2D: .*{needle}"):
        it.allocate_tensors()


def test_bad_shapes(lib):
    it = interp(pool_model([4, 4, 1], opts(1, 1, 1, 2, 2)), lib)
    with pytest.raises(oo.KernelError, match="MaxPoolingWithArgmax2D: input must be"):
        it.allocate_tensors()
    it = interp(pool_model([1, 2, 2, 1], opts(2, 1, 1, 3, 3)), lib)
    with pytest.raises(oo.KernelError, match="does not fit"):
        it.allocate_tensors()
    it = interp(unpool_model([1, 4, 4, 1], opts(1, 1, 1, 2, 2), [1, 4, 3, 1]), lib)
    with pytest.raises(oo.KernelError, match="indices shape differs"):
        it.allocate_tensors()


HOSTILE = textwrap.dedent(r"""
    import random, struct, sys
    import numpy as np
    import opaque_ops as oo, opaque_ops.kernels as K
    from tests.helpers.hostile_options import float_op_model, random_bytes

    no_xnn = sys.argv[1] == "1"
    lib = K.bundle("max_pooling_with_argmax", "max_unpooling")
    rng = random.Random(99)
    counts = {}
    def field(lo, hi):
        # Mostly plausible values, sometimes anything.
        r = rng.random()
        return rng.randrange(lo, hi) if r < 0.85 else rng.choice([rng.randrange(-3, 6), rng.randrange(-2**31, 2**31)])
    for name in ("MaxPoolingWithArgmax2D", "MaxUnpooling2D"):
        for trial in range(200):
            if trial % 2:
                opts = random_bytes(rng, 48)
            else:
                opts = struct.pack("<6i", field(1, 3), *[field(1, 4) for _ in range(4)], field(0, 4)) + bytes(rng.choice([0, 8, 16]))
            if name == "MaxPoolingWithArgmax2D":
                model = float_op_model(name, [[1, 5, 5, 2]], [[1, 1, 1, 1], [1, 1, 1, 1]], opts)
            else:
                model = float_op_model(name, [[1, 5, 5, 2], [1, 5, 5, 2]], [[1, 1, 1, 1]], opts)
            try:
                kw = {"use_xnnpack": False} if no_xnn else {}
                it = oo.Interpreter(model_content=model, custom_ops=[lib], **kw)
                it.allocate_tensors()
                d = it.get_input_details()
                it.set_tensor(d[0]["index"], np.random.rand(1, 5, 5, 2).astype(np.float32))
                if len(d) > 1:
                    # Random indices; all-zero when XNNPACK cannot be disabled,
                    # since XNNPACK's own unpooling trusts its index bits.
                    idx = np.random.rand(1, 5, 5, 2) * (12 if trial % 4 >= 2 else 1) if no_xnn else np.zeros((1, 5, 5, 2))
                    it.set_tensor(d[1]["index"], idx.astype(np.float32))
                it.invoke()
                counts[(name, "ok")] = counts.get((name, "ok"), 0) + 1
            except oo.OpaqueOpsError:
                counts[(name, "err")] = counts.get((name, "err"), 0) + 1
    print(sorted(counts.items()))
""")


def test_hostile_options_do_not_crash():
    out = run_isolated(HOSTILE, "1" if CAN_DISABLE_XNNPACK else "0", timeout=240)
    for name in ("MaxPoolingWithArgmax2D", "MaxUnpooling2D"):
        assert f"('{name}', 'err')" in out
        assert f"('{name}', 'ok')" in out
