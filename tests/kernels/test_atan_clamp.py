"""Atan v1 and Clamp v1 (c/kernels/atan.c, clamp.c) in models, against numpy.

Atan's reference is arctan evaluated in float64 and rounded once to float32
(the correctly rounded result); the kernel is a float32 approximation within
2 ulp of it, which test_atan_accuracy.py checks over every binade.  Here a
result may differ from the rounded reference by one float step.  Clamp's
reference is np.clip to [0, 1], matched bit for bit.
"""

import numpy as np
import pytest

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder


def one_op_model(op, shape, dtype=np.float32, out_dtype=None, signature=None):
    b = ModelBuilder(description=f"{op} test")
    x = b.add_tensor("x", shape, dtype, shape_signature=signature)
    # A wrong output shape in the model: Prepare must set the right one.
    y = b.add_tensor("y", [1], out_dtype or dtype)
    b.add_custom_op(op, inputs=[x], outputs=[y], version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def run(op, lib, x):
    it = oo.Interpreter(model_content=one_op_model(op, list(x.shape)), custom_ops=[lib])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def hard_floats(rng, n):
    """Random float32 of every magnitude, plus the special values."""
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    wide = bits.view(np.float32)  # all exponents, including inf/nan/subnormals
    normal = rng.standard_normal(n).astype(np.float32) * np.float32(3)
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            1e-45,
            -1e-45,
            np.finfo(np.float32).max,
            -np.finfo(np.float32).max,
            np.finfo(np.float32).tiny,
            0.5,
            1.0000001,
            0.99999994,
            16777216.0,
        ],
        dtype=np.float32,
    )
    return np.concatenate([wide, normal, specials]).astype(np.float32)


def assert_same_bits(a, b):
    """Equal including NaN positions and the sign of zero."""
    assert a.shape == b.shape and a.dtype == b.dtype
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(nan_a, nan_b)
    np.testing.assert_array_equal(a[~nan_a].view(np.uint32), b[~nan_b].view(np.uint32))


def test_atan_hard_floats():
    rng = np.random.default_rng(7)
    x = hard_floats(rng, 100_000).reshape(4, -1)
    out = run("Atan", K.atan(), x)
    with np.errstate(invalid="ignore"):
        ref = np.arctan(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(x))
    ok = ~np.isnan(x)
    np.testing.assert_array_max_ulp(out[ok], ref[ok], maxulp=1)
    # Subnormal inputs must survive (atan(x) rounds to x there), whatever the FPU mode.
    sub = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    assert sub.sum() > 100 and (out[sub] == x[sub]).all()
    # Not the identity or a constant: the reference really is being compared.
    assert np.isclose(out[x == 1.0], np.float32(np.pi / 4)).all()


def test_atan_seed_model():
    # The custom-ops guide's values: atan(x + 0.99999905) at these inputs.
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32) + np.float32(0.99999905)
    out = run("Atan", K.atan(), x)
    np.testing.assert_array_max_ulp(out, np.arctan(x.astype(np.float64)).astype(np.float32), maxulp=1)
    np.testing.assert_allclose(out, [1.1071484, 1.2490457, 1.3258177, 1.3734007, 1.4056476], rtol=1e-6)


def test_clamp_matches_clip():
    rng = np.random.default_rng(8)
    x = hard_floats(rng, 50_000)
    x = np.concatenate([x, rng.uniform(-0.5, 1.5, 49_984).astype(np.float32)]).reshape(2, 5, -1)
    out = run("Clamp", K.clamp(), x)
    ref = np.clip(x, np.float32(0), np.float32(1))
    assert_same_bits(out, ref)
    assert np.isnan(out[np.isnan(x)]).all()
    inside = (x > 0) & (x < 1)
    assert inside.sum() > 10_000
    np.testing.assert_array_equal(out[inside], x[inside])


@pytest.mark.parametrize("op,lib", [("Atan", "atan"), ("Clamp", "clamp")])
def test_dynamic_shape(op, lib):
    model = one_op_model(op, [1, 3], signature=[-1, 3])
    it = oo.Interpreter(model_content=model, custom_ops=[K.kernel(lib)])
    it.resize_tensor_input(0, [7, 3])
    it.allocate_tensors()
    x = np.linspace(-3, 3, 21, dtype=np.float32).reshape(7, 3)
    it.set_tensor(0, x)
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"])
    if op == "Atan":
        np.testing.assert_array_max_ulp(out, np.arctan(x.astype(np.float64)).astype(np.float32), maxulp=1)
    else:
        np.testing.assert_array_equal(out, np.clip(x, 0, 1))


def test_empty_tensor():
    it = oo.Interpreter(model_content=one_op_model("Clamp", [0, 4]), custom_ops=[K.clamp()])
    it.allocate_tensors()
    it.invoke()
    assert tuple(it.get_output_details()[0]["shape"]) == (0, 4)


@pytest.mark.parametrize("op,lib", [("Atan", "atan"), ("Clamp", "clamp")])
@pytest.mark.parametrize("in_dtype,out_dtype", [(np.int32, np.int32), (np.float32, np.int32), (np.float16, np.float32)])
def test_type_check(op, lib, in_dtype, out_dtype):
    model = one_op_model(op, [4], in_dtype, out_dtype)
    it = oo.Interpreter(model_content=model, custom_ops=[K.kernel(lib)])
    with pytest.raises(oo.KernelError, match=f"{op}: only FLOAT32 is supported"):
        it.allocate_tensors()
