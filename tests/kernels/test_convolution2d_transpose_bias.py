"""Convolution2DTransposeBias v1 (c/kernels/convolution2d_transpose_bias.c).

The numpy reference is written from the op's definition (MediaPipe's
mediapipe/util/tflite/operations/transpose_conv_bias.cc): every output starts at its bias and products
are added in MediaPipe's order.  For one output element that order is input y
ascending, input x ascending, input channel ascending; since ky = oy + pad -
iy*stride falls as iy rises, it is "ky descending, kx descending, channel
ascending".  Each (ky, kx, channel) step touches distinct outputs, so it can be
vectorised over the image while keeping every element's order, and float32
numpy arithmetic then rounds exactly as the C loop does (no FMA).  The kernel
must match it bit for bit.

Most interpreters here pass use_xnnpack=False, so TFLite's own kernels run the
DEQUANTIZE nodes too.  XNNPACK implements this op itself; a registered kernel
still runs the node with XNNPACK on (the XNNPACK section below, and
tests/interpreter/test_xnnpack.py).
"""

import random
import textwrap

import numpy as np
import pytest

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder
from tests.helpers.hostile_options import run_isolated
from tests.helpers.transpose_conv import (  # noqa: F401 (the names the tests below use)
    COUNTING_SOURCE,
    SAME,
    VALID,
    CountingKernel,
    one_op_model,
    options,
    out_geometry,
    reference,
    run,
)


@pytest.fixture(scope="module")
def counting():
    return CountingKernel()


# ---------------------------------------------------------------- reference


def test_reference_worked_example():
    # 1x2x2x1 input, 2x2 kernel of ones, stride 2, VALID: each input pixel is
    # spread over its own 2x2 block, plus bias 0.5.
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    w = np.ones((1, 2, 2, 1), np.float32)
    out = reference(x, w, [0.5], VALID, 2, 2)
    expect = np.array([[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]], np.float32) + 0.5
    np.testing.assert_array_equal(out[0, :, :, 0], expect)
    # Stride 1, 2x2 kernel, VALID: overlapping sums.
    out = reference(x, w, [0.0], VALID, 1, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[1, 3, 2], [4, 10, 6], [3, 7, 4]])
    # SAME with stride 1 crops the total pad k-1 = 1, the front half of it being 0.
    out = reference(x, w, [0.0], SAME, 1, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[1, 3], [4, 10]])


def test_reference_matches_naive_loop():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 4, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 2)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    for padding, sw, sh in [(SAME, 2, 1), (VALID, 1, 3), (SAME, 3, 2)]:
        got = reference(x, w, bias, padding, sw, sh)
        oh, pt = out_geometry(3, 3, sh, padding)
        ow, pl = out_geometry(4, 2, sw, padding)
        naive = np.empty((1, oh, ow, 3), np.float32)
        naive[...] = bias
        for iy in range(3):
            for ix in range(4):
                for c in range(2):
                    for ky in range(3):
                        for kx in range(2):
                            oy, ox = iy * sh - pt + ky, ix * sw - pl + kx
                            if 0 <= oy < oh and 0 <= ox < ow:
                                for o in range(3):
                                    naive[0, oy, ox, o] = np.float32(
                                        naive[0, oy, ox, o] + np.float32(x[0, iy, ix, c] * w[o, ky, kx, c])
                                    )
        np.testing.assert_array_equal(got, naive)


# ------------------------------------------------------------------- kernel


def test_worked_example_through_kernel():
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    w = np.ones((1, 2, 2, 1), np.float32)
    out = run(one_op_model(x.shape, w, [0.5], options(VALID, 2, 2)), x)
    assert out.shape == (1, 4, 4, 1)
    np.testing.assert_array_equal(out, reference(x, w, [0.5], VALID, 2, 2))


def random_configs(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        yield dict(
            padding=rng.choice([SAME, VALID]),
            stride_w=rng.randint(1, 3),
            stride_h=rng.randint(1, 3),
            kh=rng.randint(1, 4),
            kw=rng.randint(1, 4),
            batch=rng.randint(1, 2),
            h=rng.randint(1, 7),
            w=rng.randint(1, 7),
            ic=rng.randint(1, 5),
            oc=rng.randint(1, 4),
        )


@pytest.mark.parametrize(
    "cfg", list(random_configs(40, 7)), ids=lambda c: "p{padding}s{stride_w}{stride_h}k{kh}{kw}c{ic}{oc}".format(**c)
)
def test_random_configs_bit_exact(cfg):
    rng = np.random.default_rng(abs(hash(tuple(cfg.values()))) % 2**32)
    x = rng.standard_normal((cfg["batch"], cfg["h"], cfg["w"], cfg["ic"])).astype(np.float32)
    w = rng.standard_normal((cfg["oc"], cfg["kh"], cfg["kw"], cfg["ic"])).astype(np.float32)
    bias = rng.standard_normal(cfg["oc"]).astype(np.float32)
    opts = options(cfg["padding"], cfg["stride_w"], cfg["stride_h"])
    got = run(one_op_model(x.shape, w, bias, opts), x)
    want = reference(x, w, bias, cfg["padding"], cfg["stride_w"], cfg["stride_h"])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def wide_configs(n, seed):
    """Sizes beyond a vector's width, for both of the kernel's loop orders (lanes over pixels, and
    over the kh*kw*oc outputs of one pixel when that is 64 or more), remainders included."""
    rng = random.Random(seed)
    for i in range(n):
        k = rng.randint(1, 4)
        yield dict(
            padding=rng.choice([SAME, VALID]),
            stride_w=rng.randint(1, 3),
            stride_h=rng.randint(1, 3),
            kh=k,
            kw=rng.choice([k, rng.randint(1, 4)]),
            batch=rng.randint(1, 2),
            h=rng.randint(3, 12),
            w=rng.randint(17, 45),
            ic=rng.randint(1, 20),
            oc=[1, 2, 5, 16, 17, 24][i % 6],
        )


@pytest.mark.parametrize(
    "cfg",
    list(wide_configs(18, 13)),
    ids=lambda c: "p{padding}s{stride_w}{stride_h}k{kh}{kw}w{w}c{ic}o{oc}".format(**c),
)
def test_wide_configs_bit_exact(cfg):
    test_random_configs_bit_exact(cfg)


def test_wide_configs_cover_both_loop_orders():
    spans = [c["kh"] * c["kw"] * c["oc"] for c in wide_configs(18, 13)]
    overlaps = [c["kh"] > c["stride_h"] or c["kw"] > c["stride_w"] for c in wide_configs(18, 13)]
    assert sum(s >= 64 for s in spans) >= 4 and sum(s < 64 for s in spans) >= 4
    assert 4 <= sum(overlaps) <= 14


@pytest.mark.parametrize(
    "cfg", list(random_configs(8, 11)), ids=lambda c: "p{padding}s{stride_w}{stride_h}k{kh}{kw}".format(**c)
)
def test_dequantize_fed_weights(cfg, counting):
    """float16 constants -> DEQUANTIZE -> op, as in the selfie model: read at Invoke."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, cfg["h"], cfg["w"], cfg["ic"])).astype(np.float32)
    w16 = rng.standard_normal((cfg["oc"], cfg["kh"], cfg["kw"], cfg["ic"])).astype(np.float16)
    b16 = rng.standard_normal(cfg["oc"]).astype(np.float16)
    opts = options(cfg["padding"], cfg["stride_w"], cfg["stride_h"])
    before = counting.invokes
    got = run(one_op_model(x.shape, w16, b16, opts, dequantize=True), x, lib=counting.lib)
    assert counting.invokes == before + 1
    want = reference(
        x, w16.astype(np.float32), b16.astype(np.float32), cfg["padding"], cfg["stride_w"], cfg["stride_h"]
    )
    np.testing.assert_array_equal(got, want)


def test_options_longer_than_12_bytes_are_accepted():
    x = np.ones((1, 2, 2, 1), np.float32)
    w = np.ones((1, 2, 2, 1), np.float32)
    out = run(one_op_model(x.shape, w, [0.0], options(VALID, 2, 2) + b"\xff" * 20), x)
    np.testing.assert_array_equal(out, reference(x, w, [0.0], VALID, 2, 2))


def test_rerun_after_input_change_reads_fresh_data():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, 3, 3, 2)).astype(np.float32)
    bias = np.array([0.25, -1], np.float32)
    it = oo.Interpreter(
        model_content=one_op_model((1, 4, 4, 2), w, bias, options(SAME, 2, 2)),
        custom_ops=[K.kernel("convolution2d_transpose_bias")],
        use_xnnpack=False,
    )
    it.allocate_tensors()
    for _ in range(2):
        x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_array_equal(
            it.get_tensor(it.get_output_details()[0]["index"]), reference(x, w, bias, SAME, 2, 2)
        )


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "opts, message",
    [
        (None, "at least 12 bytes"),
        (b"\x01\x00\x00\x00", "at least 12 bytes"),
        (options(SAME, 2, 2)[:11], "got 11 bytes"),
        (options(0, 2, 2), "padding must be 1 (SAME) or 2 (VALID), got 0"),
        (options(3, 2, 2), "padding must be 1 (SAME) or 2 (VALID), got 3"),
        (options(SAME, 0, 2), "strides must be positive"),
        (options(VALID, 2, -1), "stride_h=-1"),
        (options(VALID, -2147483648, 1), "stride_w=-2147483648"),
    ],
)
def test_bad_options_raise(opts, message):
    x = np.ones((1, 2, 2, 1), np.float32)
    model = one_op_model(x.shape, np.ones((1, 2, 2, 1), np.float32), [0.0], opts)
    it = oo.Interpreter(model_content=model, custom_ops=[K.kernel("convolution2d_transpose_bias")], use_xnnpack=False)
    with pytest.raises(oo.KernelError) as exc:
        it.allocate_tensors()
    assert "Convolution2DTransposeBias" in str(exc.value)
    assert message in str(exc.value)


def _model_with_tensors(x_shape, w_shape, b_shape, x_dtype=np.float32, w_dtype=np.float32, n_inputs=3):
    b = ModelBuilder()
    x = b.add_tensor("x", x_shape, x_dtype)
    w = b.add_constant("w", np.ones(w_shape, w_dtype))
    bb = b.add_constant("b", np.ones(b_shape, np.float32))
    y = b.add_tensor("y", [1, 1, 1, 1], np.float32)
    b.add_custom_op("Convolution2DTransposeBias", [x, w, bb][:n_inputs], [y], options=options(SAME, 2, 2))
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


@pytest.mark.parametrize(
    "args, message",
    [
        (((1, 4, 4, 3), (2, 2, 2, 4), (2,)), "weights have 4 input channels"),
        (((1, 4, 4, 3), (2, 2, 2, 3), (3,)), "bias has 3 elements but weights have 2"),
        (((4, 4, 3), (2, 2, 2, 3), (2,)), "data must have rank 4, got 3"),
        (((1, 4, 4, 3), (2, 2, 3), (2,)), "weights must have rank 4"),
        (((1, 4, 4, 3), (2, 2, 2, 3), (1, 2)), "bias must have rank 1"),
        (((1, 4, 4, 3), (2, 2, 2, 3), (2,), np.int32), "data must be float32, got INT32"),
        (((1, 4, 4, 3), (2, 2, 2, 3), (2,), np.float32, np.float16), "weights must be float32, got FLOAT16"),
        (((1, 4, 4, 3), (2, 2, 2, 3), (2,), np.float32, np.float32, 2), "expected 3 inputs"),
        (((1, 0, 4, 3), (2, 2, 2, 3), (2,)), "must be positive"),
    ],
)
def test_bad_tensors_raise(args, message):
    it = oo.Interpreter(
        model_content=_model_with_tensors(*args),
        custom_ops=[K.kernel("convolution2d_transpose_bias")],
        use_xnnpack=False,
    )
    with pytest.raises(oo.KernelError) as exc:
        it.allocate_tensors()
    assert message in str(exc.value)


def test_huge_stride_is_an_error_not_an_overflow():
    x = np.ones((1, 3, 3, 1), np.float32)
    model = one_op_model(x.shape, np.ones((1, 2, 2, 1), np.float32), [0.0], options(VALID, 2**30, 2**30))
    it = oo.Interpreter(model_content=model, custom_ops=[K.kernel("convolution2d_transpose_bias")], use_xnnpack=False)
    with pytest.raises(oo.KernelError, match="output size is too large"):
        it.allocate_tensors()


HOSTILE_SCRIPT = textwrap.dedent(r"""
    import random, resource, struct
    import numpy as np
    import opaque_ops as oo
    import opaque_ops.kernels as K
    from opaque_ops.model import ModelBuilder
    from tests.helpers.hostile_options import random_bytes

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    lib = K.kernel("convolution2d_transpose_bias")
    rng = random.Random(424242)
    ok = err = 0
    for n in range(200):
        kind = n % 4
        if kind == 0:      # random bytes of random length
            data = random_bytes(rng, 24)
        elif kind == 1:    # plausible fields with wild values
            data = struct.pack("<3i", *(rng.choice([-1, 0, 1, 2, 3, 7, 2**31 - 1, -2**31, rng.randrange(-5, 6)]) for _ in range(3)))
        else:              # a valid struct with some bytes changed
            data = bytearray(struct.pack("<3i", rng.choice([1, 2]), rng.randint(1, 3), rng.randint(1, 3)))
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(12)] = rng.randrange(256)
            data = bytes(data)
        b = ModelBuilder()
        x = b.add_tensor("x", [1, 3, 4, 2], np.float32)
        w = b.add_constant("w", np.ones((2, 3, 2, 2), np.float32))
        bb = b.add_constant("b", np.zeros(2, np.float32))
        y = b.add_tensor("y", [1, 1, 1, 1], np.float32)
        b.add_custom_op("Convolution2DTransposeBias", [x, w, bb], [y], options=data or None)
        b.set_inputs([x]); b.set_outputs([y])
        try:
            it = oo.Interpreter(model_content=b.build(), custom_ops=[lib], use_xnnpack=False)
            it.allocate_tensors()
            # Prepare (shape arithmetic) ran for every case; huge but legal
            # outputs are not computed, to keep the test fast.
            if np.prod(it.get_output_details()[0]["shape"], dtype=np.int64) <= 1 << 20:
                it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 3, 4, 2), np.float32))
                it.invoke()
                it.get_tensor(it.get_output_details()[0]["index"])
            ok += 1
        except oo.KernelError as exc:
            assert "Convolution2DTransposeBias" in str(exc), exc
            err += 1
    print(ok, err)
""")


def test_hostile_option_bytes_never_crash():
    ok, err = map(int, run_isolated(HOSTILE_SCRIPT).split()[-2:])
    assert ok + err == 200
    assert ok >= 20 and err >= 50, (ok, err)


# ------------------------------------------------------------------ XNNPACK


def xnnpack_case(seed):
    """Random data, float16 weights and bias behind DEQUANTIZE, and the model.

    The model declares its true output shape: XNNPACK only claims a node
    whose shapes are consistent.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 6, 6, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 4)).astype(np.float16)
    bias = rng.standard_normal(3).astype(np.float16)
    model = one_op_model(x.shape, w, bias, options(SAME, 2, 2), dequantize=True, out_shape=(1, 12, 12, 3))
    return x, w, bias, model


def test_use_xnnpack_false_runs_the_kernel(counting):
    x, w, bias, model = xnnpack_case(9)
    p0, i0 = counting.prepares, counting.invokes
    got = run(model, x, lib=counting.lib, use_xnnpack=False)
    assert counting.prepares > p0 and counting.invokes == i0 + 1
    np.testing.assert_array_equal(got, reference(x, w.astype(np.float32), bias.astype(np.float32), SAME, 2, 2))


def test_registered_kernel_wins_when_xnnpack_is_forced_on(counting):
    """use_xnnpack=True: XNNPACK takes the builtins, the registered kernel keeps the node."""
    x, w, bias, model = xnnpack_case(10)
    i0 = counting.invokes
    got = run(model, x, lib=counting.lib, use_xnnpack=True)
    assert counting.invokes == i0 + 1
    np.testing.assert_array_equal(got, reference(x, w.astype(np.float32), bias.astype(np.float32), SAME, 2, 2))


def test_xnnpacks_own_copy_runs_without_a_kernel_when_forced_on():
    """use_xnnpack=True and no kernel: XNNPACK's deconvolution, equal to the reference up to rounding."""
    x, w, bias, model = xnnpack_case(12)
    it = oo.Interpreter(model_content=model, use_xnnpack=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_allclose(
        it.get_tensor(it.get_output_details()[0]["index"]),
        reference(x, w.astype(np.float32), bias.astype(np.float32), SAME, 2, 2),
        rtol=1e-5,
        atol=1e-5,
    )


def test_default_runs_the_kernel_with_xnnpack_on(counting):
    """The default (use_xnnpack=None) applies XNNPACK and the kernel still runs the node."""
    x, w, bias, model = xnnpack_case(11)
    i0 = counting.invokes
    it = oo.Interpreter(model_content=model, custom_ops=[counting.lib])
    assert it.xnnpack
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    assert counting.invokes == i0 + 1
