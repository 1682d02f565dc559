"""opaque_ops.testing.run_op: one-op models, output specs, and guard bytes."""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.testing import GUARD_BYTES, GuardError, run_op

# Elementwise y = 2x with a correct kernel and kernels that write one element
# past the end / one before the start of the output; a kernel that returns
# more outputs than declared shapes; options echoed back to test the encoding.
KERNELS = r"""
#include "opaque_ops.h"

static TfLiteStatus TwiceShapePrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  TF_LITE_OPAQUE_ENSURE_EQ(c, TfLiteOpaqueNodeNumberOfInputs(n), 1);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(c, TfLiteOpaqueTensorType(in), kTfLiteFloat32);
  int nd = TfLiteOpaqueTensorNumDims(in);
  TfLiteIntArray* s = TfLiteIntArrayCreate(nd);
  for (int i = 0; i < nd; ++i) s->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s);
}

static TfLiteStatus TwiceRun(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n, int lo, int hi) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(c, n, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  long k = (long)(TfLiteOpaqueTensorByteSize(in) / sizeof(float));
  for (long i = 0; i < k; ++i) y[i] = 2.0f * x[i];
  /* The bugs under test: one element before / after the output. */
  if (lo) y[-1] = 1.0f;
  if (hi) y[k] = 1.0f;
  return kTfLiteOk;
}
static TfLiteStatus TwiceGood(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return TwiceRun(c, n, 0, 0); }
static TfLiteStatus TwicePastEnd(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return TwiceRun(c, n, 0, 1); }
static TfLiteStatus TwiceBeforeStart(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return TwiceRun(c, n, 1, 0); }

/* Output 0 = sum of input 0 (shape [1]); output 1 = input 1 + 1 (int32). */
static TfLiteStatus TwoOutPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  TF_LITE_OPAQUE_ENSURE_EQ(c, TfLiteOpaqueNodeNumberOfOutputs(n), 2);
  TfLiteIntArray* s0 = TfLiteIntArrayCreate(1);
  s0->data[0] = 1;
  if (TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s0) != kTfLiteOk) return kTfLiteError;
  const TfLiteOpaqueTensor* in1 = TfLiteOpaqueNodeGetInput(c, n, 1);
  int nd = TfLiteOpaqueTensorNumDims(in1);
  TfLiteIntArray* s1 = TfLiteIntArrayCreate(nd);
  for (int i = 0; i < nd; ++i) s1->data[i] = TfLiteOpaqueTensorDim(in1, i);
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 1), s1);
}
static TfLiteStatus TwoOutInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const TfLiteOpaqueTensor* in0 = TfLiteOpaqueNodeGetInput(c, n, 0);
  const TfLiteOpaqueTensor* in1 = TfLiteOpaqueNodeGetInput(c, n, 1);
  const float* a = (const float*)TfLiteOpaqueTensorData(in0);
  const int* b = (const int*)TfLiteOpaqueTensorData(in1);
  float* s = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  int* o = (int*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 1));
  float acc = 0.0f;
  for (size_t i = 0; i < TfLiteOpaqueTensorByteSize(in0) / 4; ++i) acc += a[i];
  s[0] = acc;
  for (size_t i = 0; i < TfLiteOpaqueTensorByteSize(in1) / 4; ++i) o[i] = b[i] + 1;
  return kTfLiteOk;
}

/* Options: output = the raw option bytes (uint8), so the test sees exactly what arrived. */
typedef struct { size_t n; unsigned char bytes[256]; } EchoData;
static void* EchoInit(TfLiteOpaqueContext* c, const char* buf, size_t len) {
  EchoData* d = (EchoData*)calloc(1, sizeof(EchoData));
  if (d && buf) { d->n = len < 256 ? len : 256; memcpy(d->bytes, buf, d->n); }
  return d;
}
static void EchoFree(TfLiteOpaqueContext* c, void* p) { free(p); }
static TfLiteStatus EchoPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  EchoData* d = (EchoData*)TfLiteOpaqueNodeGetUserData(n);
  TfLiteIntArray* s = TfLiteIntArrayCreate(1);
  s->data[0] = (int)d->n;
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s);
}
static TfLiteStatus EchoInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  EchoData* d = (EchoData*)TfLiteOpaqueNodeGetUserData(n);
  memcpy(TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0)), d->bytes, d->n);
  return kTfLiteOk;
}

/* Output (float32 [2, 3]) = scale, zero point and constness of each input (uint8 data unused):
   what a quantized kernel reads in Prepare. */
static TfLiteStatus QuantShowPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  TfLiteIntArray* s = TfLiteIntArrayCreate(2);
  s->data[0] = 2;
  s->data[1] = 3;
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s);
}
static TfLiteStatus QuantShowInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  for (int i = 0; i < 2; ++i) {
    const TfLiteOpaqueTensor* t = TfLiteOpaqueNodeGetInput(c, n, i);
    TfLiteQuantizationParams q = TfLiteOpaqueTensorGetQuantizationParams(t);
    y[3 * i] = q.scale;
    y[3 * i + 1] = (float)q.zero_point;
    y[3 * i + 2] = TfLiteOpaqueTensorGetAllocationType(t) == kTfLiteMmapRo;
  }
  return kTfLiteOk;
}

/* Output (float32 [inputs + 1]) = for each input position its first float, or -1 where
   TfLiteOpaqueNodeGetInput gives NULL (an omitted input), then the node's input count. */
static TfLiteStatus PresencePrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  TfLiteIntArray* s = TfLiteIntArrayCreate(1);
  s->data[0] = TfLiteOpaqueNodeNumberOfInputs(n) + 1;
  return TfLiteOpaqueContextResizeTensor(c, TfLiteOpaqueNodeGetOutput(c, n, 0), s);
}
static TfLiteStatus PresenceInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
  int i, k = TfLiteOpaqueNodeNumberOfInputs(n);
  for (i = 0; i < k; ++i) {
    const TfLiteOpaqueTensor* t = TfLiteOpaqueNodeGetInput(c, n, i);
    y[i] = t == NULL ? -1.0f : ((const float*)TfLiteOpaqueTensorData(t))[0];
  }
  y[k] = (float)k;
  return kTfLiteOk;
}

OPAQUE_OP("Twice", 1, .prepare = TwiceShapePrepare, .invoke = TwiceGood);
OPAQUE_OP("Twice", 2, .prepare = TwiceShapePrepare, .invoke = TwiceGood);
OPAQUE_OP("TwicePastEnd", 1, .prepare = TwiceShapePrepare, .invoke = TwicePastEnd);
OPAQUE_OP("TwiceBeforeStart", 1, .prepare = TwiceShapePrepare, .invoke = TwiceBeforeStart);
OPAQUE_OP("TwoOut", 1, .prepare = TwoOutPrepare, .invoke = TwoOutInvoke);
OPAQUE_OP("QuantShow", 1, .prepare = QuantShowPrepare, .invoke = QuantShowInvoke);
OPAQUE_OP("Presence", 1, .prepare = PresencePrepare, .invoke = PresenceInvoke);
OPAQUE_OP("Echo", 1, .init = EchoInit, .free = EchoFree, .prepare = EchoPrepare, .invoke = EchoInvoke);
"""


@pytest.fixture(scope="module")
def lib():
    return oo.compile_ops("#include <stdlib.h>\n#include <string.h>\n" + KERNELS)


@pytest.mark.parametrize("shape", [(1,), (10,), (3, 4, 5), (2, 17)])
def test_correct_kernel_passes(lib, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = run_op(lib, "Twice", inputs=[x])
    np.testing.assert_array_equal(y, 2 * x)
    assert y.dtype == np.float32 and y.shape == shape


def test_write_past_end_is_caught(lib):
    x = np.arange(10, dtype=np.float32)
    with pytest.raises(
        GuardError,
        match=r"kernel 'TwicePastEnd' wrote past the end of output 0 "
        r"\(bytes 0\.\.3 after the 40-byte buffer changed\)",
    ):
        run_op(lib, "TwicePastEnd", inputs=[x])


def test_write_before_start_is_caught(lib):
    with pytest.raises(GuardError, match="before the start of output 0"):
        run_op(lib, "TwiceBeforeStart", inputs=[np.ones(6, np.float32)])


def test_guard_error_is_an_opaque_ops_error(lib):
    # Code that catches the library's errors catches a guard failure too, raised by a real overrun.
    with pytest.raises(oo.OpaqueOpsError) as err:
        run_op(lib, "TwicePastEnd", inputs=[np.arange(10, dtype=np.float32)])
    assert type(err.value) is GuardError and "wrote past the end of output 0" in str(err.value)
    assert GUARD_BYTES >= 8


def test_without_guard_the_overrun_goes_unnoticed(lib):
    # Shows what the guard buys: TFLite's arena silently absorbs the bad write.
    x = np.arange(10, dtype=np.float32)
    (y,) = run_op(lib, "TwicePastEnd", inputs=[x], guard=False)
    np.testing.assert_array_equal(y, 2 * x)


def test_output_specs_and_two_outputs(lib):
    a = np.array([1.5, 2.5, 3.0], np.float32)
    b = np.array([[1, 2], [3, 4]], np.int32)
    s, o = run_op(lib, "TwoOut", inputs=[a, b], num_outputs=[([1], np.float32), {"shape": [2, 2], "dtype": "int32"}])
    np.testing.assert_array_equal(s, [7.0])
    np.testing.assert_array_equal(o, b + 1)
    assert o.dtype == np.int32


def test_count_outputs_take_shape_from_prepare(lib):
    # Declared shape defaults to input 0's; Prepare resizes output 1 to b's shape.
    s, o = run_op(
        lib,
        "TwoOut",
        inputs=[np.ones(4, np.float32), np.zeros((3, 1), np.int32)],
        num_outputs=[{"dtype": np.float32}, {"dtype": np.int32}],
    )
    assert s.shape == (1,) and o.shape == (3, 1)


def test_constant_inputs(lib):
    a = np.array([1.0, 2.0], np.float32)
    b = np.array([5, 6, 7], np.int32)
    s, o = run_op(lib, "TwoOut", inputs=[a, b], num_outputs=[([1], np.float32), ([3], np.int32)], constant_inputs=[1])
    np.testing.assert_array_equal(o, [6, 7, 8])
    assert s[0] == 3.0


def test_quantization_and_constness_reach_the_kernel(lib):
    # What the scaffolded tests rely on to reproduce a model's node: the
    # kernel sees each input's scale and zero point, and which one is constant.
    a, b = np.zeros(4, np.int8), np.arange(3, dtype=np.uint8)
    (y,) = run_op(
        lib,
        "QuantShow",
        inputs=[a, b],
        constant_inputs=[1],
        input_quantization=[{"scale": 0.5, "zero_point": 3}, {"scale": 0.25, "zero_point": 7}],
        num_outputs=[([2, 3], np.float32)],
    )
    np.testing.assert_array_equal(y, [[0.5, 3, 0], [0.25, 7, 1]])
    # A shorter list leaves the rest unquantized (scale 0, zero point 0).
    (y,) = run_op(
        lib,
        "QuantShow",
        inputs=[a, b],
        input_quantization=[{"scale": 2.0, "zero_point": 1}],
        output_quantization=[None],
        num_outputs=[([2, 3], np.float32)],
    )
    np.testing.assert_array_equal(y, [[2.0, 1, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="input_quantization has 3 entries for 2 tensors"):
        run_op(lib, "QuantShow", inputs=[a, b], input_quantization=[None] * 3)
    # One mapping for a list of them: its keys were taken as positions (a review's report).
    with pytest.raises(ValueError, match="one entry per tensor position .* got one mapping"):
        run_op(lib, "QuantShow", inputs=[a, b], input_quantization={"scale": 0.5, "zero_point": 3})


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_none_omits_an_input_as_a_model_does(lib, isolate):
    # A converter writes -1 for an optional input a node leaves out; a kernel
    # sees it counted in the node's inputs and gets NULL for it.  None in
    # inputs builds that node, so a test can run the kernel as the model does.
    a, c = np.array([2.5], np.float32), np.array([7.0, 8.0], np.float32)
    (y,) = run_op(lib, "Presence", inputs=[a, None, c], num_outputs=[([4], np.float32)], isolate=isolate)
    np.testing.assert_array_equal(y, [2.5, -1.0, 7.0, 3.0])
    # With a quantized and a constant input around it, and the omitted one first.
    (y,) = run_op(
        lib,
        "Presence",
        inputs=[None, a, c],
        constant_inputs=[2],
        input_quantization=[None, {"scale": 0.5, "zero_point": 0}],
        num_outputs=[([4], np.float32)],
        isolate=isolate,
    )
    np.testing.assert_array_equal(y, [-1.0, 2.5, 7.0, 3.0])


def test_an_omitted_input_cannot_be_constant_or_quantized(lib):
    a = np.ones(1, np.float32)
    with pytest.raises(ValueError, match=r"constant_inputs \[1\] names input\(s\) given as None .* drop those"):
        run_op(lib, "Presence", inputs=[a, None], constant_inputs=[1])
    with pytest.raises(
        ValueError, match=r"input_quantization gives input\(s\) \[0\] a quantization, but they are None"
    ):
        run_op(lib, "Presence", inputs=[None, a], input_quantization=[{"scale": 0.5, "zero_point": 1}])


@pytest.mark.parametrize(
    "options,expected",
    [
        (b"\x01\x00\x00\x00\x02\x00\x00\x00", b"\x01\x00\x00\x00\x02\x00\x00\x00"),
        (None, b""),
    ],
)
def test_options_bytes_reach_init(lib, options, expected):
    (y,) = run_op(lib, "Echo", inputs=[np.zeros(1, np.float32)], options=options, num_outputs=[([1], np.uint8)])
    assert y.tobytes() == expected


def test_options_dict_is_flexbuffer(lib):
    from opaque_ops.model import decode_flex_options

    (y,) = run_op(
        lib, "Echo", inputs=[np.zeros(1, np.float32)], options={"k": 3, "name": "x"}, num_outputs=[([1], np.uint8)]
    )
    assert decode_flex_options(y.tobytes()) == {"k": 3, "name": "x"}


@pytest.mark.parametrize("isolate", [False, True])
def test_options_key_the_kernel_could_not_look_up_is_named(lib, isolate):
    """run_op (and so build_op_model) encodes a dict through flex_options: a
    non-ASCII key is refused by name, also when the worker process encodes it."""
    with pytest.raises(oo.InvalidArgumentError, match=r"flexbuffer map key 'größe' in options has non-ASCII"):
        run_op(
            lib,
            "Echo",
            inputs=[np.zeros(1, np.float32)],
            options={"k": 3, "größe": 1},
            num_outputs=[([1], np.uint8)],
            isolate=isolate,
        )


def test_version_must_match(lib):
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(run_op(lib, "Twice", inputs=[x], version=2)[0], 2 * x)
    with pytest.raises(oo.UnresolvedOpsError):
        run_op(lib, "Twice", inputs=[x], version=3)


def test_kernel_error_propagates(lib):
    with pytest.raises(oo.KernelError, match="kTfLiteFloat32|FLOAT32|Float32|!="):
        run_op(lib, "Twice", inputs=[np.ones(3, np.int32)])


def test_bad_specs():
    with pytest.raises(ValueError):
        run_op([], "X", inputs=[np.ones(1, np.float32)], num_outputs=0)
    with pytest.raises(ValueError, match="shape"):
        run_op([], "X", inputs=[np.ones(1, np.float32)], num_outputs=[{"shap": [1]}])
    with pytest.raises(ValueError, match="constant_inputs"):
        run_op([], "X", inputs=[np.ones(1, np.float32)], constant_inputs=[4])


def test_python_op_is_guarded_too():
    # A Python op cannot overrun a numpy view, so it passes; the output
    # really lives in the guarded buffer (checked inside run_op).
    op = oo.python_op("PyNeg", invoke=lambda i, o: -i[0])
    (y,) = run_op(op, "PyNeg", inputs=[np.arange(5, dtype=np.float64)])
    np.testing.assert_array_equal(y, -np.arange(5.0))


def test_guarded_buffers_go_through_the_one_path_that_moves_memory():
    # run_op attaches its guarded outputs with Interpreter._reshape(redirect=...):
    # the same lock, views check and model checks as allocate_tensors.
    from opaque_ops.interpreter.core import Interpreter
    from opaque_ops.testing import build_op_model

    op = oo.python_op("Half", invoke=lambda i, o: np.multiply(i[0], 0.5, out=o[0]))
    x = np.arange(4, dtype=np.float32)
    it = Interpreter(model_content=build_op_model("Half", [x], [([4], np.float32)]), custom_ops=[op])
    it.allocate_tensors()
    out = it.get_output_details()[0]["index"]
    view = it.tensor(out)()
    attached = []
    with pytest.raises(oo.LiveViewsError, match="cannot run_op"):
        it._reshape("run_op: guarded outputs", allocate=True, redirect=attached.append)
    assert attached == []  # refused before any buffer moved
    del view
    buf = np.zeros(64 + 16, np.uint8)
    start = (-buf.ctypes.data) % 64
    it._reshape(
        "run_op: guarded outputs",
        allocate=True,
        redirect=lambda native: attached.append(native.set_custom_allocation(out, buf[start : start + 16])),
    )
    assert attached == [0]
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(buf[start : start + 16].view(np.float32), x * 0.5)
    it.close()


@pytest.mark.parametrize(
    "given",
    [np.ones(3, np.float32), np.ones((2, 3), np.float32), np.float32(1.0), 3.0],
    ids=["vector", "matrix", "numpy-scalar", "float"],
)
def test_a_bare_array_for_inputs_is_refused(lib, given):
    # Taken as the list, a vector's scalars (a matrix's rows) would become
    # the op's inputs, and the op would run on the wrong data.
    with pytest.raises(TypeError, match=r"one array per op input.*inputs=\[x\]"):
        run_op(lib, "Twice", inputs=given)
    with pytest.raises(TypeError, match=r"one array per op input"):
        run_op(lib, "Twice", inputs=given, isolate=True)


def test_inputs_may_be_any_iterable_of_arrays(lib):
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_op(lib, "Twice", inputs=(a for a in [x]))[0], 2 * x)
