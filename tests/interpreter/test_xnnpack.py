"""XNNPACK for the builtins and the registered kernels for the custom ops, together.

XNNPACK's delegate implements three MediaPipe ops itself and takes any node
whose registration carries one of their names (``strcmp`` on
``registration->custom_name`` in upstream
tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc).  opaque_ops hides
those nodes from it (opaque_ops/interpreter/xnnpack.py).  What is proven here, on the
real runtime with real compiled kernels:

- which implementation ran a custom node: a counting kernel (C) whose invoke
  increments a counter read through ctypes and writes a sentinel value that
  no real implementation would produce;
- that XNNPACK did delegate the builtins, without timing: the number of
  nodes TFLite reports to the kernel (``TfLiteOpaqueContextGetNumNodes``)
  grows by one delegate kernel per partition XNNPACK takes (only a delegate
  adds nodes), and stays equal to the model's operator count with XNNPACK
  off;
- the options: the default (``None``), ``True`` and ``False``;
- XNNPACK's MaxUnpooling2D, which kills the process on MediaPipe's float
  argmax indices, never runs on the default path (checked in a child process);
- the model's real op name in every message.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import textwrap

import numpy as np
import pytest

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.interpreter import xnnpack as _xnnpack
from opaque_ops.model import ModelBuilder, read_model
from tests.helpers.hostile_options import run_isolated

HERE = os.path.dirname(os.path.abspath(__file__))

CONV, POOL, UNPOOL = "Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D"
OPS = [CONV, POOL, UNPOOL]

# A counting kernel for each of the three ops.  Prepare records how many
# nodes the subgraph has (delegate kernels included); Invoke counts and fills
# every output with 1000*(op number + 1) + invoke count.  Setting
# oo_test_fail makes Prepare fail, to check the messages.
COUNTING_SOURCE = textwrap.dedent(r"""
    #include "opaque_ops.h"
    int oo_test_prepares[3], oo_test_invokes[3], oo_test_nodes[3], oo_test_fail;
    static TfLiteStatus Prep(int k, TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      (void)n;
      oo_test_prepares[k]++;
      oo_test_nodes[k] = (int)TfLiteOpaqueContextGetNumNodes(c);
      if (oo_test_fail) {
        TfLiteOpaqueContextReportError(c, "counting kernel %d refused on purpose", k);
        return kTfLiteError;
      }
      return kTfLiteOk;
    }
    static TfLiteStatus Inv(int k, TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      oo_test_invokes[k]++;
      for (int i = 0; i < TfLiteOpaqueNodeNumberOfOutputs(n); i++) {
        TfLiteOpaqueTensor* t = TfLiteOpaqueNodeGetOutput(c, n, i);
        float* d = (float*)TfLiteOpaqueTensorData(t);
        size_t m = TfLiteOpaqueTensorByteSize(t) / sizeof(float);
        for (size_t j = 0; j < m; j++) d[j] = 1000.0f * (float)(k + 1) + (float)oo_test_invokes[k];
      }
      return kTfLiteOk;
    }
    #define COUNTING(K) \
      static TfLiteStatus Prep##K(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return Prep(K, c, n); } \
      static TfLiteStatus Inv##K(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return Inv(K, c, n); }
    COUNTING(0)
    COUNTING(1)
    COUNTING(2)
    OPAQUE_OP("Convolution2DTransposeBias", 1, .prepare = Prep0, .invoke = Inv0);
    OPAQUE_OP("MaxPoolingWithArgmax2D", 1, .prepare = Prep1, .invoke = Inv1);
    OPAQUE_OP("MaxUnpooling2D", 1, .prepare = Prep2, .invoke = Inv2);
""")


class Counting:
    """The counting kernels and their counters."""

    def __init__(self):
        self.lib = oo.compile_ops(COUNTING_SOURCE)
        self._dll = ctypes.CDLL(str(self.lib.path))  # the same handle: already loaded

    def _arr(self, name):
        return (ctypes.c_int * 3).in_dll(self._dll, name)

    def invokes(self, op):
        return self._arr("oo_test_invokes")[OPS.index(op)]

    def nodes(self, op):
        return self._arr("oo_test_nodes")[OPS.index(op)]

    def fail(self, on: bool):
        ctypes.c_int.in_dll(self._dll, "oo_test_fail").value = int(on)

    def sentinel(self, op, count):
        return 1000.0 * (OPS.index(op) + 1) + count


@functools.cache
def _counting():
    return Counting()


@pytest.fixture(scope="module")
def counting():
    return _counting()


def pool_opts(stride=2, filt=2, padding=2):
    """Raw TfLitePoolParams: padding, stride_w, stride_h, filter_w, filter_h, activation (+ pad)."""
    return struct.pack("<6i", padding, stride, stride, filt, filt, 0) + b"\0" * 8


# The shape all three test models share: x -> ADD c1 -> MUL c2 -> OP -> ADD
# c3 -> out.  With the custom node left to the kernel, XNNPACK takes two
# partitions, ADD+MUL and the last ADD: TFLite then has 4 + 2 nodes.
X_SHAPE = [1, 4, 4, 2]
MODEL_OPS, XNNPACK_PARTITIONS = 4, 2


def chain_model(op: str):
    """The test model for ``op``; returns (bytes, (input, output) tensor indices)."""
    rng = np.random.default_rng(OPS.index(op))
    b = ModelBuilder()
    x = b.add_tensor("x", X_SHAPE, np.float32)
    c1 = b.add_constant("c1", rng.standard_normal(X_SHAPE).astype(np.float32))
    c2 = b.add_constant("c2", rng.standard_normal(X_SHAPE).astype(np.float32))
    a = b.add_tensor("a", X_SHAPE, np.float32)
    t = b.add_tensor("b", X_SHAPE, np.float32)
    b.add_op("ADD", [x, c1], [a])
    b.add_op("MUL", [a, c2], [t])
    if op == CONV:
        # 2x2 kernel, stride 2, SAME: [1,4,4,2] -> [1,8,8,3] (the shapes XNNPACK accepts).
        w = b.add_constant("w", rng.standard_normal((3, 2, 2, 2)).astype(np.float32))
        bias = b.add_constant("bias", rng.standard_normal(3).astype(np.float32))
        y_shape = [1, 8, 8, 3]
        y = b.add_tensor("y", y_shape, np.float32)
        b.add_custom_op(CONV, [t, w, bias], [y], options=struct.pack("<3i", 1, 2, 2))
    elif op == POOL:
        y_shape = [1, 2, 2, 2]
        y = b.add_tensor("y", y_shape, np.float32)
        idx = b.add_tensor("idx", y_shape, np.float32)
        b.add_custom_op(POOL, [t], [y, idx], options=pool_opts())
    else:
        # Indices from a constant: MediaPipe's float ky*fW + kx + 0.1.
        ind = b.add_constant("ind", np.full(X_SHAPE, 3.1, np.float32))
        y_shape = [1, 8, 8, 2]
        y = b.add_tensor("y", y_shape, np.float32)
        b.add_custom_op(UNPOOL, [t, ind], [y], options=pool_opts())
    c3 = b.add_constant("c3", np.float32(0.5) * np.ones(y_shape, np.float32))
    out = b.add_tensor("out", y_shape, np.float32)
    b.add_op("ADD", [y, c3], [out])
    b.set_inputs([x])
    b.set_outputs([out])
    return b.build(), (x, out)


def run_chain(op, lib, **kw):
    """Build the chain model for ``op`` and run it once; return (interpreter, output)."""
    model, (x_i, out_i) = chain_model(op)
    it = oo.Interpreter(model_content=model, custom_ops=[lib] if lib else [], **kw)
    it.allocate_tensors()
    it.set_tensor(x_i, np.random.default_rng(7).standard_normal(X_SHAPE).astype(np.float32))
    it.invoke()
    return it, it.get_tensor(out_i)


# ------------------------------------------------------------------ routing


def check_kernel_ran_with_xnnpack(op, **kw):
    """The counting kernel ran ``op``'s node and XNNPACK took the builtins around it."""
    counting = _counting()
    i0 = counting.invokes(op)
    it, out = run_chain(op, counting.lib, **kw)
    assert it.xnnpack is True
    # Our kernel ran the custom node (its counter moved, its sentinel reached the output).
    assert counting.invokes(op) == i0 + 1
    np.testing.assert_array_equal(out, counting.sentinel(op, i0 + 1) + np.float32(0.5))
    # XNNPACK delegated the builtins around it: one delegate node per partition.
    assert counting.nodes(op) == MODEL_OPS + XNNPACK_PARTITIONS


def in_child_for_argmax_ops(op, check, *args):
    """Run ``check(op, *args)`` here, or in a child process for the argmax ops.

    Should such a node ever reach XNNPACK, XNNPACK's copy may kill the
    process on these models (2.17.1): the unpooling on MediaPipe's float
    indices, the pooling because nothing reads its index output.  The
    child's death then fails this test only.
    """
    if op == CONV:
        return check(op, *args)
    run_isolated(f"from tests.interpreter import test_xnnpack as t; t.{check.__name__}({op!r}, *{args!r})")


def check_default(op):
    check_kernel_ran_with_xnnpack(op)


def check_true(op):
    check_kernel_ran_with_xnnpack(op, use_xnnpack=True)


@pytest.mark.parametrize("op", OPS)
def test_default_runs_the_kernel_and_xnnpack_runs_the_builtins(op):
    in_child_for_argmax_ops(op, check_default)


@pytest.mark.parametrize("op", OPS)
def test_use_xnnpack_true_still_runs_a_registered_kernel(op):
    in_child_for_argmax_ops(op, check_true)


@pytest.mark.parametrize("op", OPS)
def test_use_xnnpack_false_runs_everything_on_tflite(op, counting):
    i0 = counting.invokes(op)
    it, out = run_chain(op, counting.lib, use_xnnpack=False)
    assert it.xnnpack is False
    assert counting.invokes(op) == i0 + 1
    np.testing.assert_array_equal(out, counting.sentinel(op, i0 + 1) + np.float32(0.5))
    assert counting.nodes(op) == MODEL_OPS  # no delegate nodes


def test_use_xnnpack_true_without_a_kernel_runs_xnnpacks_own_deconvolution():
    """True and no kernel: XNNPACK's copy of the op runs (what ai-edge-litert does).

    This is also the control for the tests above: on this very model, XNNPACK
    takes the node when nothing hides it, so a kernel that ran there ran
    because opaque_ops hid the node.
    """
    model, (x_i, out_i) = chain_model(CONV)
    sg = read_model(model).subgraphs[0]
    arr = {t.name: t.array() for t in sg.tensors if t.array() is not None}
    it = oo.Interpreter(model_content=model, use_xnnpack=True)
    it.allocate_tensors()
    x = np.random.default_rng(3).standard_normal(X_SHAPE).astype(np.float32)
    it.set_tensor(x_i, x)
    it.invoke()
    # Reference: transposed convolution from the definition, float64.
    t = ((x + arr["c1"]) * arr["c2"]).astype(np.float64)
    w, bias = arr["w"].astype(np.float64), arr["bias"].astype(np.float64)
    ref = np.zeros((1, 8, 8, 3)) + bias
    for iy in range(4):
        for ix in range(4):
            for ky in range(2):
                for kx in range(2):
                    ref[0, 2 * iy + ky, 2 * ix + kx] += w[:, ky, kx, :] @ t[0, iy, ix]
    np.testing.assert_allclose(it.get_tensor(out_i), ref + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_default_without_a_kernel_is_unresolved_under_the_real_name(op):
    """The default never lets XNNPACK run these ops: a missing kernel is reported, by its own name."""
    model, _ = chain_model(op)
    it = oo.Interpreter(model_content=model)
    assert it.xnnpack is True
    with pytest.raises(oo.UnresolvedOpsError) as info:
        it.allocate_tensors()
    msg = str(info.value)
    assert f"{op} v1" in msg and "kernels.mediapipe()" in msg
    assert _xnnpack.ALIAS_SUFFIX not in msg and not any(_xnnpack.ALIAS_SUFFIX in m for m in info.value.messages)
    assert info.value.missing == [(op, 1)]


def test_messages_name_the_models_op(counting):
    """TFLite's 'Node number N (name) failed to prepare' names the model's op, not the alias."""
    model, _ = chain_model(CONV)
    it = oo.Interpreter(model_content=model, custom_ops=[counting.lib])
    counting.fail(True)
    try:
        with pytest.raises(oo.KernelError) as info:
            it.allocate_tensors()
    finally:
        counting.fail(False)
    msg = str(info.value)
    assert "refused on purpose" in msg
    assert f"({CONV})" in msg, msg
    assert _xnnpack.ALIAS_SUFFIX not in msg


def test_real_kernel_under_xnnpack_matches_tflite_only():
    """The bundled kernel gives the same output with XNNPACK on (default) as with it off.

    ADD and MUL are exact in float32 whichever kernel runs them, and the
    deconvolution is ours in both runs, so the outputs are bit-identical.
    """
    lib = K.kernel("convolution2d_transpose_bias")
    _, out_on = run_chain(CONV, lib)
    _, out_off = run_chain(CONV, lib, use_xnnpack=False)
    np.testing.assert_array_equal(out_on, out_off)


def test_a_python_op_also_wins_over_xnnpack():
    """A python_op under one of XNNPACK's names runs its node too, with XNNPACK on."""
    calls = []

    def invoke(inputs, outputs):
        calls.append(1)
        outputs[0][...] = 7.0

    op = oo.python_op(CONV, invoke, prepare=lambda inputs: [(1, 8, 8, 3)])
    _, out = run_chain(CONV, op)
    assert calls == [1]
    np.testing.assert_array_equal(out, np.float32(7.5))


def test_xnnpack_attribute_reports_the_choice(counting):
    model, _ = chain_model(CONV)
    assert oo.Interpreter(model_content=model, custom_ops=[counting.lib]).xnnpack is True
    assert oo.Interpreter(model_content=model, custom_ops=[counting.lib], use_xnnpack=None).xnnpack is True
    assert oo.Interpreter(model_content=model, custom_ops=[counting.lib], use_xnnpack=True).xnnpack is True
    assert oo.Interpreter(model_content=model, custom_ops=[counting.lib], use_xnnpack=False).xnnpack is False


# ------------------------------------------------------------------ MaxUnpooling2D in XNNPACK

UNPOOL_SCRIPT = textwrap.dedent(r"""
    import struct, sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model import ModelBuilder
    mode, kernel = sys.argv[1], sys.argv[2]
    # VALID: the padding XNNPACK's unpooling accepts in every release (2.23 refuses SAME).
    opts = struct.pack("<6i", 2, 2, 2, 2, 2, 0) + bytes(8)
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8, 8, 4], np.float32)
    if mode == "pool-alone":  # nothing reads the index output
        v = b.add_tensor("v", [1, 4, 4, 4], np.float32)
        i = b.add_tensor("i", [1, 4, 4, 4], np.float32)
        b.add_custom_op("MaxPoolingWithArgmax2D", [x], [v, i], options=opts)
        c = b.add_constant("c", np.ones([1, 4, 4, 4], np.float32))
        y = b.add_tensor("y", [1, 4, 4, 4], np.float32)
        b.add_op("ADD", [v, c], [y])
        inputs = [x]
    elif mode == "input-indices":
        i = b.add_tensor("i", [1, 8, 8, 4], np.float32)
        inputs = [x, i]
    else:  # pool -> unpool, as in MediaPipe's models
        v = b.add_tensor("v", [1, 4, 4, 4], np.float32)
        i = b.add_tensor("i", [1, 4, 4, 4], np.float32)
        b.add_custom_op("MaxPoolingWithArgmax2D", [x], [v, i], options=opts)
        x, inputs = v, [x]
    if mode != "pool-alone":
        shape = [1, 8, 8, 4] if mode == "pair" else [1, 16, 16, 4]
        y = b.add_tensor("y", shape, np.float32)
        b.add_custom_op("MaxUnpooling2D", [x, i], [y], options=opts)
    b.set_inputs(inputs)
    b.set_outputs([y])
    kw = {} if sys.argv[3] == "default" else {"use_xnnpack": sys.argv[3] == "True"}
    ops = [__import__("opaque_ops.kernels").kernels.mediapipe()] if kernel == "kernel" else []
    it = oo.Interpreter(model_content=b.build(), custom_ops=ops, **kw)
    try:
        it.allocate_tensors()
    except oo.UnresolvedOpsError as exc:
        print("UNRESOLVED", exc.missing)
        sys.exit(0)
    rng = np.random.default_rng(0)
    d = it.get_input_details()
    it.set_tensor(d[0]["index"], rng.random(d[0]["shape"]).astype(np.float32))
    if len(d) > 1:
        # MediaPipe's indices: ky*fW + kx + 0.1, as floats.
        it.set_tensor(d[1]["index"], (rng.integers(0, 4, d[1]["shape"]) + 0.1).astype(np.float32))
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"])
    print("RAN", float(out.sum()))
""")


@pytest.mark.parametrize("xnn", ["default", "True"])
def test_xnnpack_unpooling_never_sees_mediapipe_indices(xnn):
    """XNNPACK's unpooling reads float indices as integers and kills the process
    (checked by hand: a child doing exactly this dies with SIGSEGV).  On the
    default path, and with True when the indices do not come from XNNPACK's own
    pooling, the node is hidden from XNNPACK: with no kernel it is unresolved,
    with one our kernel runs."""
    out = run_isolated(UNPOOL_SCRIPT, "input-indices", "none", xnn)
    assert "UNRESOLVED [('MaxUnpooling2D', 1)]" in out, out
    out = run_isolated(UNPOOL_SCRIPT, "input-indices", "kernel", xnn)
    assert "RAN" in out


@pytest.mark.parametrize("xnn", ["default", "True"])
def test_xnnpack_pooling_never_runs_with_an_unread_index_output(xnn):
    """XNNPACK's pooling writes its index output even when nothing reads it
    and TFLite gave it no memory: 2.17.1 dies.  Such a node stays hidden."""
    out = run_isolated(UNPOOL_SCRIPT, "pool-alone", "none", xnn)
    assert "UNRESOLVED [('MaxPoolingWithArgmax2D', 1)]" in out, out
    out = run_isolated(UNPOOL_SCRIPT, "pool-alone", "kernel", xnn)
    assert "RAN" in out


def test_default_pool_unpool_pair_without_kernels_is_unresolved():
    out = run_isolated(UNPOOL_SCRIPT, "pair", "none", "default")
    assert "UNRESOLVED" in out and "MaxPoolingWithArgmax2D" in out


def test_true_gives_xnnpack_a_pool_unpool_pair_it_runs_itself():
    """With True and no kernels, XNNPACK runs pooling and unpooling as a pair
    (integer indices on both sides): it runs, no crash."""
    out = run_isolated(UNPOOL_SCRIPT, "pair", "none", "True")
    assert "RAN" in out, out


# ------------------------------------------------------------------ the private model copy


def test_alias_model_renames_only_the_op_code():
    """A tensor with the op's name keeps it; the op code gets the alias; the model stays valid."""
    b = ModelBuilder()
    x = b.add_tensor(CONV, [1, 2, 2, 1], np.float32)  # a tensor named like the op
    w = b.add_constant("w", np.ones((1, 2, 2, 1), np.float32))
    bias = b.add_constant("bias", np.zeros(1, np.float32))
    y = b.add_tensor("y", [1, 4, 4, 1], np.float32)
    b.add_custom_op(CONV, [x, w, bias], [y], options=struct.pack("<3i", 2, 2, 2))
    z = b.add_tensor("z", [1, 4, 4, 1], np.float32)
    b.add_custom_op("Atan", [y], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    data = b.build()
    aliased = _xnnpack.alias_model(data, {CONV: CONV + _xnnpack.ALIAS_SUFFIX})
    assert aliased[: len(data)] != data or len(aliased) > len(data)
    info = read_model(aliased)
    assert info.custom_ops() == [("Atan", 1), (CONV + _xnnpack.ALIAS_SUFFIX, 1)]
    assert info.subgraphs[0].tensors[x].name == CONV
    # Everything else reads back the same as the original.
    orig = read_model(data)
    assert [t.name for t in info.subgraphs[0].tensors] == [t.name for t in orig.subgraphs[0].tensors]
    assert [op.custom_options for op in info.subgraphs[0].operators] == [
        op.custom_options for op in orig.subgraphs[0].operators
    ]
    assert _xnnpack.alias_model(data, {}) is data
    # Whatever the length of the original, the appended string is 4-byte
    # aligned as flatbuffers requires, and TFLite's verifier accepts the copy.
    for extra in range(4):
        padded = data + bytes(extra)
        aliased = _xnnpack.alias_model(padded, {CONV: CONV + _xnnpack.ALIAS_SUFFIX})
        ((pos, name),) = [f for f in _xnnpack._custom_code_fields(aliased) if f[1] != b"Atan"]
        assert name == (CONV + _xnnpack.ALIAS_SUFFIX).encode()
        assert (pos + struct.unpack_from("<I", aliased, pos)[0]) % 4 == 0
        it = oo.Interpreter(model_content=padded, custom_ops=[K.mediapipe()])
        assert it.xnnpack


def test_hidden_ops_policy():
    """Which ops hide from XNNPACK, per option (the table in the README)."""
    model, _ = chain_model(CONV)
    info = read_model(model)
    alias = {CONV: CONV + _xnnpack.ALIAS_SUFFIX}
    assert _xnnpack.hidden_ops(info, set(), None) == alias
    assert _xnnpack.hidden_ops(info, {CONV}, None) == alias
    assert _xnnpack.hidden_ops(info, {CONV}, True) == alias
    assert _xnnpack.hidden_ops(info, set(), True) == {}
    assert _xnnpack.hidden_ops(info, {CONV}, False) == {}
    # The argmax pair goes to XNNPACK only together, and only when no kernel is registered.
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4, 4, 1], np.float32)
    v = b.add_tensor("v", [1, 2, 2, 1], np.float32)
    i = b.add_tensor("i", [1, 2, 2, 1], np.float32)
    y = b.add_tensor("y", [1, 4, 4, 1], np.float32)
    b.add_custom_op(POOL, [x], [v, i], options=pool_opts())
    b.add_custom_op(UNPOOL, [v, i], [y], options=pool_opts())
    b.set_inputs([x])
    b.set_outputs([y])
    info = read_model(b.build())
    both = {n: n + _xnnpack.ALIAS_SUFFIX for n in (POOL, UNPOOL)}
    assert _xnnpack.hidden_ops(info, set(), True) == {}
    assert _xnnpack.hidden_ops(info, {UNPOOL}, True) == both
    assert _xnnpack.hidden_ops(info, {POOL}, True) == both


# ------------------------------------------------------------------ MediaPipe's selfie model


def selfie_model():
    from tests.helpers.locations import package_file

    return str(package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite"))


def test_selfie_default_is_xnnpack_plus_our_kernel(counting):
    """On the real model (246 operators): the counting kernel runs its one
    Convolution2DTransposeBias node and XNNPACK inserted delegate nodes."""
    path = selfie_model()
    n_ops = len(read_model(path).subgraphs[0].operators)
    i0 = counting.invokes(CONV)
    it = oo.Interpreter(model_path=path, custom_ops=[counting.lib])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 256, 256, 3), np.float32))
    it.invoke()
    assert it.xnnpack and counting.invokes(CONV) == i0 + 1
    assert counting.nodes(CONV) > n_ops
    it = oo.Interpreter(model_path=path, custom_ops=[counting.lib], use_xnnpack=False)
    it.allocate_tensors()
    assert counting.nodes(CONV) == n_ops


def test_selfie_default_matches_ai_edge_litert():
    """Our default (XNNPACK + the bundled kernel) against ai-edge-litert, which
    runs XNNPACK's own copy of the op: the same mask up to float rounding."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from tests.helpers.synthetic_images import synthetic_person

    path = selfie_model()
    image, fg = synthetic_person(256, 256)
    masks = []
    for it in (oo.Interpreter(model_path=path, custom_ops=[K.mediapipe()]), LiteRT(model_path=path)):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], image[None])
        it.invoke()
        masks.append(it.get_tensor(it.get_output_details()[0]["index"])[0, :, :, 0])
    ours, peer = masks
    assert peer[fg].mean() > 0.6 and peer[~fg].mean() < 0.05  # the reference itself segments the figure
    np.testing.assert_allclose(ours, peer, atol=5e-3)


def _where_then(consumer: bool) -> bytes:
    """x [3, 3] -> WHERE -> int64 coordinates [N, 2] (-> CAST to float32 when ``consumer``)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [3, 3], np.bool_)
    coords = b.add_tensor("coords", [9, 2], np.int64, shape_signature=[-1, 2])
    b.add_op("WHERE", [x], [coords])
    out = coords
    if consumer:
        out = b.add_tensor("coords_f", [9, 2], np.float32, shape_signature=[-1, 2])
        b.add_op("CAST", [coords], [out])
    b.set_inputs([x])
    b.set_outputs([out])
    return b.build()


def test_a_value_dependent_output_that_feeds_an_operator_keeps_xnnpack_out():
    """XNNPACK plans the operators after a WHERE at creation, for a shape known only at invoke
    (tests/corpus/fuzz_where_into_xnnpack_convolution.tflite crashed it).  By default such a model
    runs without XNNPACK (and gives what ai-edge-litert gives and numpy's nonzero); use_xnnpack=True
    is refused, naming both operators; a WHERE whose result goes straight out keeps XNNPACK."""
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")
    x = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0]], np.bool_)
    data = _where_then(consumer=True)
    it = oo.Interpreter(model_content=data)
    assert it.xnnpack is False
    outs = []
    for interp in (it, litert.Interpreter(model_content=data)):
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        outs.append(interp.get_tensor(interp.get_output_details()[0]["index"]))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], np.argwhere(x).astype(np.float32))
    with pytest.raises(oo.ModelError, match=r"operator 0 \(WHERE\) computes the shape .* operator 1 \(CAST\) takes"):
        oo.Interpreter(model_content=data, use_xnnpack=True)
    assert oo.Interpreter(model_content=data, use_xnnpack=False).xnnpack is False
    assert oo.Interpreter(model_content=_where_then(consumer=False)).xnnpack is True
