"""ExtractImagePatches v1 (c/kernels/extract_image_patches.c) against a numpy reference.

The reference below is written from the op's definition (TensorFlow's
``tf.image.extract_patches`` / tensorflow/core/kernels/extract_image_patches_op.cc), one patch cell at a time, independently of the C code.
Every model is a one-op model built with ModelBuilder; the kernel library is
compiled once and reused.
"""

import random
import textwrap

import numpy as np
import pytest
from flatbuffers import flexbuffers as fx

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder
from tests.helpers.hostile_options import run_isolated

# TFLite schema TensorType codes, as the converter writes `T`.
TENSOR_TYPE = {np.float32: 0, np.int32: 2, np.uint8: 3, np.int64: 4, np.int8: 9}
DTYPES = [np.float32, np.int8, np.uint8, np.int32, np.int64]


# ------------------------------------------------------------------ reference


def axis_geometry(size, k, s, r, padding):
    """Output length and leading pad along one axis, from the op's definition."""
    k_eff = k + (k - 1) * (r - 1)
    if padding == "VALID":
        return (size - k_eff + s) // s, 0
    out = -(-size // s)
    pad_needed = max(0, (out - 1) * s + k_eff - size)
    return out, pad_needed // 2


def reference_patches(x, ksizes, strides, rates, padding, pad_value=0):
    """out[b,i,j,(p*kc+q)*C+d] = x[b, i*sr - pad_top + p*rr, j*sc - pad_left + q*rc, d]."""
    B, H, W, C = x.shape
    (kr, kc), (sr, sc), (rr, rc) = ksizes, strides, rates
    oh, pad_top = axis_geometry(H, kr, sr, rr, padding)
    ow, pad_left = axis_geometry(W, kc, sc, rc, padding)
    out = np.full((B, oh, ow, kr * kc * C), pad_value, dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            for p in range(kr):
                y = i * sr - pad_top + p * rr
                if not 0 <= y < H:
                    continue
                for q in range(kc):
                    xx = j * sc - pad_left + q * rc
                    if 0 <= xx < W:
                        cell = (p * kc + q) * C
                        out[:, i, j, cell : cell + C] = x[:, y, xx, :]
    return out


# ------------------------------------------------------------------ helpers


def window(v):
    return [1, int(v[0]), int(v[1]), 1]


def options_dict(k, s, r, padding, dtype=None):
    opts = {"ksizes": window(k), "strides": window(s), "rates": window(r), "padding": padding}
    if dtype is not None:
        opts["T"] = TENSOR_TYPE[dtype]
    return opts


def build_model(in_shape, dtype, options, out_shape=None, quant=None, out_quant="same", out_dtype=None):
    """One ExtractImagePatches op; the output shape stored in the model is a guess the kernel fixes."""
    b = ModelBuilder(description="ExtractImagePatches test")
    x = b.add_tensor("x", in_shape, dtype, quantization=quant)
    oq = quant if out_quant == "same" else out_quant
    y = b.add_tensor("y", out_shape or [1, 1, 1, 1], out_dtype or dtype, quantization=oq)
    b.add_custom_op("ExtractImagePatches", inputs=[x], outputs=[y], options=options, version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def run(model, x):
    it = oo.Interpreter(model_content=model, custom_ops=[K.extract_image_patches()])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def random_input(rng, shape, dtype):
    if dtype == np.float32:
        return rng.standard_normal(shape).astype(np.float32) * 100
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def prepare_error(model, x_shape, dtype):
    it = oo.Interpreter(model_content=model, custom_ops=[K.extract_image_patches()])
    with pytest.raises(oo.KernelError) as exc:
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], np.zeros(x_shape, dtype))
        it.invoke()
    return str(exc.value)


# ------------------------------------------------------------------ tests


def test_reference_matches_worked_example():
    # Guards the reference itself with values computed by hand: on a 10x10 image of 1..100,
    # the SAME-padded 3x3 patch at (0, 0) has one padding row and column above and left.
    x = np.arange(1, 101, dtype=np.float32).reshape(1, 10, 10, 1)
    ref = reference_patches(x, (3, 3), (1, 1), (1, 1), "SAME")
    assert ref[0, 0, 0].tolist() == [0, 0, 0, 0, 1, 2, 0, 11, 12]
    assert ref[0, 5, 5].tolist() == [45, 46, 47, 55, 56, 57, 65, 66, 67]


def test_worked_example():
    x = np.arange(1, 101, dtype=np.float32).reshape(1, 10, 10, 1)
    model = build_model([1, 10, 10, 1], np.float32, options_dict((3, 3), (1, 1), (1, 1), "SAME", np.float32))
    out = run(model, x)
    assert out.shape == (1, 10, 10, 9)
    np.testing.assert_array_equal(out[0, 0, 0], [0, 0, 0, 0, 1, 2, 0, 11, 12])
    np.testing.assert_array_equal(out, reference_patches(x, (3, 3), (1, 1), (1, 1), "SAME"))


def _random_configs(n, seed):
    rng = random.Random(seed)
    for idx in range(n):
        yield dict(
            B=rng.randint(1, 2),
            H=rng.randint(1, 12),
            W=rng.randint(1, 12),
            C=rng.randint(1, 4),
            k=(rng.randint(1, 4), rng.randint(1, 4)),
            s=(rng.randint(1, 3), rng.randint(1, 3)),
            r=(rng.randint(1, 3), rng.randint(1, 3)),
            padding=rng.choice(["SAME", "VALID"]),
            dtype=DTYPES[idx % len(DTYPES)],
            with_t=rng.random() < 0.5,
            quantized=rng.random() < 0.5,
        )


def test_random_configurations():
    rng = np.random.default_rng(1234)
    checked = too_small = 0
    for cfg in _random_configs(250, seed=99):
        B, H, W, C, dtype = cfg["B"], cfg["H"], cfg["W"], cfg["C"], cfg["dtype"]
        k, s, r, padding = cfg["k"], cfg["s"], cfg["r"], cfg["padding"]
        quant, pad_value = None, 0
        if dtype in (np.int8, np.uint8) and cfg["quantized"]:
            info = np.iinfo(dtype)
            zp = int(rng.integers(info.min, info.max, endpoint=True))
            quant = {"scale": [0.25], "zero_point": [zp]}
            pad_value = zp  # padding is the real value 0
        model = build_model(
            [B, H, W, C], dtype, options_dict(k, s, r, padding, dtype if cfg["with_t"] else None), quant=quant
        )
        x = random_input(rng, (B, H, W, C), dtype)
        oh, _ = axis_geometry(H, k[0], s[0], r[0], padding)
        ow, _ = axis_geometry(W, k[1], s[1], r[1], padding)
        if oh < 1 or ow < 1:
            msg = prepare_error(model, x.shape, dtype)
            assert "VALID padding leaves no patch" in msg, (cfg, msg)
            too_small += 1
            continue
        out = run(model, x)
        ref = reference_patches(x, k, s, r, padding, pad_value)
        assert out.dtype == ref.dtype, cfg
        assert out.shape == ref.shape, cfg
        np.testing.assert_array_equal(out, ref, err_msg=str(cfg))
        checked += 1
    # The seed must exercise both outcomes substantially.
    assert checked >= 150 and too_small >= 5, (checked, too_small)


def test_quantized_output_keeps_quantization_and_pads_with_zero_point():
    x = np.arange(1, 17, dtype=np.uint8).reshape(1, 4, 4, 1)
    q = {"scale": [0.5], "zero_point": [128]}
    model = build_model([1, 4, 4, 1], np.uint8, options_dict((2, 2), (1, 1), (1, 1), "SAME"), quant=q)
    it = oo.Interpreter(model_content=model, custom_ops=[K.extract_image_patches()])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    out_detail = it.get_output_details()[0]
    scale, zp = out_detail["quantization"]
    assert scale == pytest.approx(0.5) and zp == 128
    out = it.get_tensor(out_detail["index"])
    np.testing.assert_array_equal(out, reference_patches(x, (2, 2), (1, 1), (1, 1), "SAME", 128))
    assert out[0, 3, 3].tolist() == [16, 128, 128, 128]


def test_unquantized_int8_pads_with_zero():
    x = np.full((1, 3, 3, 2), -7, np.int8)
    model = build_model([1, 3, 3, 2], np.int8, options_dict((3, 3), (2, 2), (1, 1), "SAME", np.int8))
    out = run(model, x)
    np.testing.assert_array_equal(out, reference_patches(x, (3, 3), (2, 2), (1, 1), "SAME", 0))
    assert (out == 0).any() and (out == -7).any()


# -- option encodings ---------------------------------------------------------


def _encode(opts, style):
    """Flexbuffer map of `opts` with int vectors written in one of several legal layouts."""
    width = fx.BitWidth.W64 if style == "w64" else fx.BitWidth.W8
    fbb = fx.Builder(force_min_bit_width=width)
    with fbb.Map():
        for key in sorted(opts):
            value = opts[key]
            fbb.Key(key)
            if isinstance(value, str):
                fbb.String(value)
            elif isinstance(value, int):
                if style == "indirect":
                    fbb.IndirectInt(value)
                elif style == "uint":
                    fbb.UInt(value)
                else:
                    fbb.Int(value)
            elif style in ("typed", "w64"):
                fbb.TypedVectorFromElements(value, fx.Type.INT)
            elif style == "uint":
                fbb.TypedVectorFromElements(value, fx.Type.UINT)
            elif style == "fixed":
                fbb.FixedTypedVectorFromElements(value, fx.Type.INT)
            else:  # untyped vectors, with inline or indirect ints
                with fbb.Vector():
                    for v in value:
                        if style == "indirect":
                            fbb.IndirectInt(v)
                        else:
                            fbb.Int(v)
    return bytes(fbb.Finish())


@pytest.mark.parametrize("style", ["typed", "w64", "uint", "fixed", "untyped", "indirect"])
@pytest.mark.parametrize("with_t", [False, True])
def test_option_encodings(style, with_t):
    opts = options_dict((2, 3), (2, 1), (1, 2), "SAME", np.int32 if with_t else None)
    raw = _encode(opts, style)
    if style == "w64":
        # Every int in the buffer is 8 bytes wide: [1,2,3,1] alone is 32 bytes.
        assert bytes([1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]) in raw
    rng = np.random.default_rng(5)
    x = random_input(rng, (2, 7, 6, 3), np.int32)
    out = run(build_model([2, 7, 6, 3], np.int32, raw), x)
    np.testing.assert_array_equal(out, reference_patches(x, (2, 3), (2, 1), (1, 2), "SAME"))


def test_unknown_keys_are_ignored():
    opts = options_dict((2, 2), (1, 1), (1, 1), "VALID", np.float32)
    opts.update({"Tin": 7, "name": "patches", "zzz": [1.5, 2.5]})
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 3, 4, 2)
    out = run(build_model([1, 3, 4, 2], np.float32, opts), x)
    np.testing.assert_array_equal(out, reference_patches(x, (2, 2), (1, 1), (1, 1), "VALID"))


# -- invalid options and tensors ------------------------------------------------


def _opts(**changes):
    opts = options_dict((3, 3), (1, 1), (1, 1), "SAME", np.float32)
    for key, value in changes.items():
        if value is None:
            opts.pop(key)
        else:
            opts[key] = value
    return opts


INVALID_OPTIONS = [
    ("ksizes_len3", _opts(ksizes=[1, 3, 3]), "'ksizes' must have 4 elements"),
    ("strides_len5", _opts(strides=[1, 1, 1, 1, 1]), "'strides' must have 4 elements"),
    ("rates_len0", _opts(rates=[]), "'rates' must have 4 elements"),
    ("ksizes_batch", _opts(ksizes=[2, 3, 3, 1]), "'ksizes' must be [1, rows, cols, 1]"),
    ("strides_channel", _opts(strides=[1, 1, 1, 2]), "'strides' must be [1, rows, cols, 1]"),
    ("rates_first", _opts(rates=[0, 1, 1, 1]), "'rates' must be [1, rows, cols, 1]"),
    ("ksizes_zero", _opts(ksizes=[1, 0, 3, 1]), "'ksizes' must hold positive sizes"),
    ("strides_negative", _opts(strides=[1, 1, -2, 1]), "'strides' must hold positive sizes"),
    ("rates_zero", _opts(rates=[1, 1, 0, 1]), "'rates' must hold positive sizes"),
    ("ksizes_huge", _opts(ksizes=[1, 2**40, 1, 1]), "'ksizes' must hold positive sizes"),
    ("ksizes_floats", _opts(ksizes=[1.0, 3.0, 3.0, 1.0]), "'ksizes' must be a vector of ints"),
    ("ksizes_string", _opts(ksizes="3x3"), "'ksizes' must be a vector of ints"),
    ("padding_unknown", _opts(padding="FULL"), "unknown padding 'FULL'"),
    ("padding_lowercase", _opts(padding="same"), "unknown padding 'same'"),
    ("padding_int", _opts(padding=1), "option 'padding' must be the string"),
    ("missing_ksizes", _opts(ksizes=None), "missing option 'ksizes'"),
    ("missing_strides", _opts(strides=None), "missing option 'strides'"),
    ("missing_rates", _opts(rates=None), "missing option 'rates'"),
    ("missing_padding", _opts(padding=None), "missing option 'padding'"),
    ("t_string", _opts(T="float32"), "option 'T' must be an int"),
    ("t_mismatch", _opts(T=TENSOR_TYPE[np.int32]), "T=2 does not match the input type FLOAT32"),
    ("t_unknown", _opts(T=77), "T=77 does not match"),
    ("no_options", None, "has no options"),
    ("garbage", b"\x00\xffnot a flexbuffer at all\x07", "not a flexbuffer map"),
    ("short", b"\x01", "not a flexbuffer map"),
    ("root_vector", fx.Dumps([1, 3, 3, 1]), "not a flexbuffer map"),
    ("root_int", fx.Dumps(5), "not a flexbuffer map"),
]


@pytest.mark.parametrize("options,message", [c[1:] for c in INVALID_OPTIONS], ids=[c[0] for c in INVALID_OPTIONS])
def test_invalid_options(options, message):
    msg = prepare_error(build_model([1, 5, 5, 1], np.float32, options), (1, 5, 5, 1), np.float32)
    assert "ExtractImagePatches" in msg and message in msg, msg


def test_unprintable_padding_is_sanitised():
    msg = prepare_error(
        build_model([1, 5, 5, 1], np.float32, _opts(padding="S\x1b[31mAME" + "x" * 100)), (1, 5, 5, 1), np.float32
    )
    assert "unknown padding 'S?[31mAME" in msg and "\x1b" not in msg
    assert "..." in msg


def test_valid_window_larger_than_image():
    opts = _opts(ksizes=[1, 3, 3, 1], rates=[1, 3, 1, 1], padding="VALID")  # effective 7x3
    msg = prepare_error(build_model([1, 6, 9, 1], np.float32, opts), (1, 6, 9, 1), np.float32)
    assert "VALID padding leaves no patch" in msg and "7x3" in msg and "6x9" in msg


def test_absurd_output_is_refused():
    opts = _opts(ksizes=[1, 40000, 40000, 1])  # SAME: depth 1.6e9 per pixel
    msg = prepare_error(build_model([1, 4, 4, 1], np.float32, opts), (1, 4, 4, 1), np.float32)
    assert "elements" in msg


@pytest.mark.parametrize("case", ["int16", "out_dtype", "rank3", "quant_scale", "quant_zp"])
def test_invalid_tensors(case):
    opts = options_dict((2, 2), (1, 1), (1, 1), "SAME")
    shape, dtype, kw, expect = [1, 4, 4, 1], np.float32, {}, None
    if case == "int16":
        dtype, expect = np.int16, "unsupported input type INT16"
    elif case == "out_dtype":
        kw, expect = {"out_dtype": np.int32}, "output type INT32 differs from input type FLOAT32"
    elif case == "rank3":
        shape, expect = [4, 4, 1], "must be 4-D"
    elif case == "quant_scale":
        dtype = np.int8
        kw = {"quant": {"scale": [0.5], "zero_point": [0]}, "out_quant": {"scale": [0.25], "zero_point": [0]}}
        expect = "output quantization"
    else:
        dtype = np.uint8
        kw = {"quant": {"scale": [0.5], "zero_point": [10]}, "out_quant": {"scale": [0.5], "zero_point": [11]}}
        expect = "zero_point 11) differs from the input's (scale 0.5, zero_point 10)"
    msg = prepare_error(build_model(shape, dtype, opts, **kw), shape, dtype)
    assert expect in msg, msg


def test_input_resize_reruns_prepare():
    model = build_model([1, 4, 4, 1], np.float32, options_dict((2, 2), (2, 2), (1, 1), "VALID"))
    it = oo.Interpreter(model_content=model, custom_ops=[K.extract_image_patches()])
    it.resize_tensor_input(0, [2, 6, 8, 3])
    it.allocate_tensors()
    x = np.random.default_rng(0).standard_normal((2, 6, 8, 3)).astype(np.float32)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(
        it.get_tensor(it.get_output_details()[0]["index"]), reference_patches(x, (2, 2), (2, 2), (1, 1), "VALID")
    )


# -- hostile option bytes (in a subprocess: a crash must fail the test, not pytest) --

HOSTILE_SCRIPT = textwrap.dedent(r"""
    import random, resource, sys
    import numpy as np
    import opaque_ops as oo
    import opaque_ops.kernels as K
    from opaque_ops.model import flex_options
    from tests.helpers.hostile_options import float_op_model, random_bytes

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    lib = K.extract_image_patches()
    rng = random.Random(20240601)
    seeds = [
        flex_options({"T": 0, "ksizes": [1, 3, 3, 1], "padding": "SAME", "rates": [1, 1, 1, 1], "strides": [1, 1, 1, 1]}),
        flex_options({"ksizes": [1, 2, 3, 1], "padding": "VALID", "rates": [1, 2, 1, 1], "strides": [1, 2, 1, 1]}),
    ]
    ok = err = 0
    for n in range(300):
        kind = n % 6
        if kind == 5:
            data = random_bytes(rng, 120)
        else:
            data = bytearray(rng.choice(seeds))
            if kind == 4:  # truncate or insert: shifts the root and the offsets
                if rng.random() < 0.5:
                    del data[rng.randrange(len(data)):]
                else:
                    data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
            else:  # in-place byte changes keep the layout, so some still parse
                for _ in range(1 if kind < 3 else rng.randint(2, 4)):
                    i = rng.randrange(len(data))
                    if rng.random() < 0.5:
                        data[i] ^= 1 << rng.randrange(8)
                    else:
                        data[i] = rng.randrange(256)
            data = bytes(data)
        model = float_op_model("ExtractImagePatches", [[1, 6, 5, 2]], [[1, 1, 1, 1]], data)
        try:
            it = oo.Interpreter(model_content=model, custom_ops=[lib])
            it.allocate_tensors()
            it.set_tensor(0, np.ones((1, 6, 5, 2), np.float32))
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
            # Whatever options were accepted, the copy only ever writes 0s and 1s.
            assert out.ndim == 4 and set(np.unique(out)) <= {0.0, 1.0}, data.hex()
            ok += 1
        except oo.KernelError as e:
            assert "ExtractImagePatches" in str(e), str(e)
            err += 1
    print(ok, err)
""")


def test_hostile_option_bytes_never_crash():
    ok, err = map(int, run_isolated(HOSTILE_SCRIPT).split()[-2:])
    assert ok + err == 300
    # Both paths must actually be exercised by the mutations.
    assert ok >= 5 and err >= 100, (ok, err)
