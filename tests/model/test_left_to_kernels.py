"""type_rules.LEFT_TO_KERNELS, checked against the kernels: a builtin listed as "its Prepare checks the
types itself" must refuse an output of the wrong type, never run with it.

Each op is built twice: with the output type its kernel writes (it must run, and match a numpy
reference written from the op's definition) and with a narrower one (it must be refused with an
OpaqueOpsError, by the kernel's Prepare or by a rule of ours).  Everything runs in one child process:
a reason that is wrong means a kernel that writes past its output, which may crash.

This check found five listed wrongly.  EMBEDDING_LOOKUP checks only its lookup's type: float32 rows
were copied into a declared int8 output, 4 times too small, and the run "succeeded".  BITWISE_XOR,
RIGHT_SHIFT, BUCKETIZE and FAKE_QUANT give their output a type of their own choosing in Prepare
(the inputs'; int32) whatever the file declares, as WHERE does, so consumers planned on the
declared type would misread it.  They have type rules now, and stay
here as the proof.
"""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops.model import ModelBuilder
from opaque_ops.model.checks.type_rules import LEFT_TO_KERNELS, TYPE_RULES
from tests.helpers.both_ways import run_both_ways

_SELF_CHECKING = (
    "its Prepare checks the input and output types itself (TF_LITE_ENSURE_TYPES_EQ or a switch that refuses)"
)

# Listed as self-checking but not built here, and why: their models need recurrent state, sparse or
# hashed inputs, or a newer schema than the ModelBuilder writes.
NOT_BUILT = {
    "HASHTABLE_LOOKUP LSH_PROJECTION LSTM RNN SVDF CONCAT_EMBEDDINGS SKIP_GRAM EMBEDDING_LOOKUP_SPARSE "
    "UNIDIRECTIONAL_SEQUENCE_RNN UNIDIRECTIONAL_SEQUENCE_LSTM BIDIRECTIONAL_SEQUENCE_RNN "
    "BIDIRECTIONAL_SEQUENCE_LSTM SPARSE_TO_DENSE CONV_3D_TRANSPOSE MULTINOMIAL REDUCE_WINDOW DILATE": (
        "recurrent state, sparse/hashed inputs, or ops whose registration differs between the runtimes"
    ),
}


def _with_options(data: bytes, table: str, **fields) -> bytes:
    """Operator 0 of ``data`` with a ``table`` options table (written through TFLite's own generated
    schema: the ModelBuilder has no writer for these tables)."""
    import ai_edge_litert.schema_py_generated as S

    from tools.fuzz_structured import pack, unpack

    m = unpack(data)
    opts = getattr(S, table + "T")()
    for k, v in fields.items():
        setattr(opts, k, v)
    op = m.subgraphs[0].operators[0]
    op.builtinOptionsType = getattr(S.BuiltinOptions, table)
    op.builtinOptions = opts
    return pack(m)


def _model(op, inputs, consts, out_shape, out_dtype):
    """One ``op``: graph inputs ``inputs`` ([(shape, dtype)]), constants ``consts``, one output."""
    b = ModelBuilder()
    ins = [b.add_tensor(f"x{i}", list(s), d) for i, (s, d) in enumerate(inputs)]
    cs = [b.add_constant(f"c{i}", c) for i, c in enumerate(consts)]
    y = b.add_tensor("y", list(out_shape), out_dtype)
    b.add_op(op, ins + cs, [y])
    b.set_inputs(ins)
    b.set_outputs([y])
    return b.build()


_C64 = (np.arange(4) + 1j * np.array([1, -2, 0, 3])).astype(np.complex64)
_I32 = np.array([1, 6, 12, 40], np.int32)
_F32 = np.array([-0.75, 0.1, 0.6, 2.0], np.float32)
_TABLE = np.arange(12, dtype=np.float32).reshape(3, 4)
_VOLUME = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2, 1)


def _cases():
    """op -> (build(out_dtype) -> bytes, inputs, reference output or None, written dtype, narrower dtype)."""
    return {
        "IMAG": (lambda d: _model("IMAG", [((4,), np.complex64)], [], (4,), d), [_C64], _C64.imag, np.float32, np.int8),
        "REAL": (lambda d: _model("REAL", [((4,), np.complex64)], [], (4,), d), [_C64], _C64.real, np.float32, np.int8),
        "COMPLEX_ABS": (
            lambda d: _model("COMPLEX_ABS", [((4,), np.complex64)], [], (4,), d),
            [_C64],
            np.abs(_C64).astype(np.float32),
            np.float32,
            np.int8,
        ),
        "BITWISE_XOR": (
            lambda d: _model("BITWISE_XOR", [((4,), np.int32), ((4,), np.int32)], [], (4,), d),
            [_I32, _I32[::-1].copy()],
            _I32 ^ _I32[::-1],
            np.int32,
            np.int8,
        ),
        "RIGHT_SHIFT": (
            lambda d: _model("RIGHT_SHIFT", [((4,), np.int32), ((4,), np.int32)], [], (4,), d),
            [_I32, np.array([0, 1, 2, 3], np.int32)],
            _I32 >> np.array([0, 1, 2, 3]),
            np.int32,
            np.int8,
        ),
        "EMBEDDING_LOOKUP": (
            lambda d: _model("EMBEDDING_LOOKUP", [((2,), np.int32)], [_TABLE], (2, 4), d),
            [np.array([2, 0], np.int32)],
            _TABLE[[2, 0]],
            np.float32,
            np.int8,
        ),
        # Bucket index = number of boundaries <= x (tf.raw_ops.Bucketize).
        "BUCKETIZE": (
            lambda d: _with_options(
                _model("BUCKETIZE", [((4,), np.float32)], [], (4,), d), "BucketizeOptions", boundaries=[0.0, 0.5]
            ),
            [_F32],
            np.searchsorted(np.array([0.0, 0.5]), _F32, side="right").astype(np.int32),
            np.int32,
            np.int8,
        ),
        "FAKE_QUANT": (
            lambda d: _with_options(
                _model("FAKE_QUANT", [((4,), np.float32)], [], (4,), d),
                "FakeQuantOptions",
                min=-1.0,
                max=1.0,
                numBits=8,
            ),
            [_F32],
            None,  # values: the kernel's nudged grid; only the type rule is the point here
            np.float32,
            np.int8,
        ),
        # A 1x1x1 filter of ones: the identity.
        "CONV_3D": (
            lambda d: _with_options(
                _model(
                    "CONV_3D", [((1, 2, 2, 2, 1), np.float32)], [np.ones((1, 1, 1, 1, 1), np.float32)], _VOLUME.shape, d
                ),
                "Conv3DOptions",
                padding=1,  # VALID
                strideD=1,
                strideH=1,
                strideW=1,
                dilationDFactor=1,
                dilationHFactor=1,
                dilationWFactor=1,
            ),
            [_VOLUME],
            _VOLUME,
            np.float32,
            np.int8,
        ),
        **{
            op: (
                lambda d, op=op: _with_options(
                    _model(op, [], [np.array([2, 3], np.int32)], (2, 3), d), "RandomOptions", seed=1, seed2=2
                ),
                [],
                None,  # random: checked for shape, finiteness and (uniform) range below
                np.float32,
                np.int8,
            )
            for op in ("RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL")
        },
    }


def test_every_self_checking_op_is_built_here_or_says_why_not():
    listed = {op for op, why in LEFT_TO_KERNELS.items() if why == _SELF_CHECKING}
    not_built = {op for ops in NOT_BUILT for op in ops.split()}
    built = set(_cases()) - set(TYPE_RULES)  # the ops with a rule now are built here as the proof
    assert listed == built | not_built, sorted(listed ^ (built | not_built))


def test_the_kernels_refuse_what_left_to_kernels_leaves_them(tmp_path):
    cases = _cases()
    models, feeds = {}, {}
    for op, (build, inputs, _ref, good, bad) in cases.items():
        for dt in (good, bad):
            models[f"{op}|{np.dtype(dt).name}"] = build(dt)
            feeds[f"{op}|{np.dtype(dt).name}"] = inputs
    got = run_both_ways(models, tmp_path, feeds)
    for op, (_build, _feeds, ref, good, bad) in cases.items():
        for xnn in (False, True):
            ran = got[f"{op}|{np.dtype(good).name}|{xnn}"]
            assert ran[0] == "ran", (op, xnn, ran)
            y = np.frombuffer(bytes.fromhex(ran[2]), np.dtype(ran[1])).reshape(ran[3])
            assert y.dtype == np.dtype(good), (op, y.dtype)
            if ref is not None:
                np.testing.assert_allclose(y, ref, rtol=1e-6, err_msg=op)
            elif op.startswith("RANDOM_"):
                assert y.shape == (2, 3) and np.isfinite(y).all() and len(set(y.ravel().tolist())) == 6, y
                if op == "RANDOM_UNIFORM":
                    assert (y >= 0).all() and (y < 1).all(), y
            refused = got[f"{op}|{np.dtype(bad).name}|{xnn}"]
            assert refused[0] in ("KernelError", "ModelError"), (op, xnn, refused)
            assert "INT8" in refused[1] or "int8" in refused[1].lower(), (op, refused[1])


@pytest.mark.parametrize("values", [np.int8, np.uint8])
def test_embedding_lookup_dequantizes_quantized_rows_into_float32(values):
    """The widening the EMBEDDING_LOOKUP rule allows: int8/uint8 rows with a scale into a float32
    output (the kernel's hybrid path), checked against ai-edge-litert."""
    import opaque_ops as oo

    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")
    b = ModelBuilder()
    ids = b.add_tensor("ids", [2], np.int32)
    table = b.add_constant("table", np.arange(12).reshape(3, 4).astype(values), {"scale": 0.5, "zero_point": 0})
    y = b.add_tensor("y", [2, 4], np.float32)
    b.add_op("EMBEDDING_LOOKUP", [ids, table], [y])
    b.set_inputs([ids])
    b.set_outputs([y])
    data = b.build()
    x = np.array([2, 0], np.int32)
    results = []
    for it in (oo.Interpreter(model_content=data), litert.Interpreter(model_content=data)):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        results.append(it.get_tensor(it.get_output_details()[0]["index"]))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], np.arange(12).reshape(3, 4)[[2, 0]] * 0.5)
