"""MediaPipe's selfie-segmentation models end to end, with our Convolution2DTransposeBias.

The models come from the installed mediapipe 0.10.14 wheel (found with
importlib.util.find_spec; mediapipe itself is never imported).  Checked:

(a) the op inside the real model: a one-op model built from the model's own
    float16 weights and bias (read with read_model, fed through DEQUANTIZE as
    in the model) and an input of the real shape matches the numpy reference
    bit for bit;
(b) the full model segments a synthetic person: a skin-coloured head and a
    dark torso on a flat background, preprocessed as MediaPipe does (RGB
    stretched to the model's size, float32 img/255 in [0, 1]).  On this input
    the model gives a mask near 0.9 on the figure and near 0 on the background,
    and near 0 everywhere on the background alone;
(c) which implementation ran: with a kernel registered our kernel's counter
    moves on every invoke, whatever use_xnnpack says (by default XNNPACK runs
    the ~240 builtin layers around it); with use_xnnpack=True and no kernel,
    XNNPACK executes Convolution2DTransposeBias itself.
"""

import os

import numpy as np
import pytest

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder, read_model
from tests.helpers.mediapipe_models import model_file
from tests.helpers.synthetic_images import synthetic_person
from tests.helpers.transpose_conv import CountingKernel, reference

OP = "Convolution2DTransposeBias"


def _model_dir():
    # The installed mediapipe 0.10.14, or its wheel's files where it has no wheel (Python 3.13).
    d = model_file("modules", "selfie_segmentation")
    return str(d) if d.is_dir() else None


MODEL_DIR = _model_dir()
pytestmark = pytest.mark.skipif(
    MODEL_DIR is None, reason="mediapipe==0.10.14 is not installed (pip install --no-deps mediapipe==0.10.14)"
)
MODELS = ["selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"]


@pytest.fixture(scope="module")
def counting():
    return CountingKernel()


def run_model(path, image, lib, use_xnnpack):
    it = oo.Interpreter(model_path=path, custom_ops=[lib] if lib else [], use_xnnpack=use_xnnpack)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], image[None])
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])[0, :, :, 0]


def conv_node(path):
    """The op's node, its input shape, float16 weights and bias, and raw options."""
    m = read_model(path)
    sg = m.subgraphs[0]
    (node,) = [op for op in sg.operators if op.op_name == OP]
    producers = {o: op for op in sg.operators for o in op.outputs}
    consts = []
    for t in node.inputs[1:]:
        deq = producers[t]
        assert deq.op_name == "DEQUANTIZE"
        src = sg.tensors[deq.inputs[0]]
        assert src.type_name == "FLOAT16"
        consts.append(src.array())
    w16, b16 = consts
    in_shape = sg.tensors[node.inputs[0]].shape
    out_shape = sg.tensors[node.outputs[0]].shape
    return node, in_shape, out_shape, w16, b16


@pytest.mark.parametrize("name", MODELS)
def test_model_uses_the_op_as_described(name):
    path = os.path.join(MODEL_DIR, name)
    assert read_model(path).custom_ops() == [(OP, 1)]
    node, in_shape, out_shape, w16, b16 = conv_node(path)
    assert node.custom_options == (1).to_bytes(4, "little") + (2).to_bytes(4, "little") * 2  # SAME, 2, 2
    assert w16.shape == (1, 2, 2, 16) and b16.shape == (1,)
    assert out_shape[1:3] == (2 * in_shape[1], 2 * in_shape[2])


@pytest.mark.parametrize("name", MODELS)
def test_op_with_real_weights_is_bit_exact(name, counting):
    path = os.path.join(MODEL_DIR, name)
    node, in_shape, out_shape, w16, b16 = conv_node(path)
    b = ModelBuilder()
    x = b.add_tensor("x", list(in_shape), np.float32)
    wq = b.add_constant("w16", w16)
    bq = b.add_constant("b16", b16)
    wt = b.add_tensor("w", list(w16.shape), np.float32)
    bt = b.add_tensor("b", list(b16.shape), np.float32)
    b.add_op("DEQUANTIZE", [wq], [wt])
    b.add_op("DEQUANTIZE", [bq], [bt])
    y = b.add_tensor("y", list(out_shape), np.float32)
    b.add_custom_op(OP, [x, wt, bt], [y], options=node.custom_options)
    b.set_inputs([x])
    b.set_outputs([y])
    model = b.build()
    # Activations of the size and spread the real layer sees (it follows an ADD of ReLU'd features).
    data = np.abs(np.random.default_rng(0).standard_normal(in_shape)).astype(np.float32) * 2
    want = reference(data, w16.astype(np.float32), b16.astype(np.float32), 1, 2, 2)

    i0 = counting.invokes
    it = oo.Interpreter(model_content=model, custom_ops=[counting.lib], use_xnnpack=False)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], data)
    it.invoke()
    assert counting.invokes == i0 + 1
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)

    # XNNPACK forced on: the kernel keeps the node, bit for bit.
    i0 = counting.invokes
    it = oo.Interpreter(model_content=model, custom_ops=[counting.lib], use_xnnpack=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], data)
    it.invoke()
    assert counting.invokes == i0 + 1
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)

    # Forced on with no kernel: XNNPACK's own deconvolution, equal up to rounding.
    it = oo.Interpreter(model_content=model, use_xnnpack=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], data)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_full_model_segments_a_synthetic_person(name, counting):
    path = os.path.join(MODEL_DIR, name)
    h, w = read_model(path).subgraphs[0].tensors[read_model(path).subgraphs[0].inputs[0]].shape[1:3]
    image, fg = synthetic_person(h, w)

    i0 = counting.invokes
    mask = run_model(path, image, counting.lib, use_xnnpack=False)
    assert counting.invokes == i0 + 1, "our kernel must run the node when XNNPACK is off"
    assert mask.shape == (h, w) and np.all((mask >= 0) & (mask <= 1))
    assert mask[fg].mean() > 0.6, mask[fg].mean()
    assert mask[~fg].mean() < 0.05, mask[~fg].mean()
    assert (mask > 0.5)[fg].mean() > 0.7  # most of the figure is labelled person

    # Control: the background alone is not a person.
    empty = np.empty_like(image)
    empty[:] = image[0, 0]
    assert run_model(path, empty, counting.lib, use_xnnpack=False).max() < 0.2

    # The default: XNNPACK runs all ~240 builtin layers with its own kernels
    # and our kernel the deconvolution, so the masks differ by rounding
    # accumulated over the network (~2e-3 seen).
    i0 = counting.invokes
    mask_d = run_model(path, image, counting.lib, use_xnnpack=None)
    assert counting.invokes == i0 + 1, "our kernel must run the node with XNNPACK on"
    np.testing.assert_allclose(mask_d, mask, atol=1e-2)

    # Forced on with no kernel: XNNPACK runs the node too.
    i0 = counting.invokes
    mask_x = run_model(path, image, None, use_xnnpack=True)
    assert counting.invokes == i0
    np.testing.assert_allclose(mask_x, mask, atol=1e-2)


def test_runs_through_the_mediapipe_bundle():
    """kernels.mediapipe() is what users pass; with XNNPACK off it must resolve the op."""
    path = os.path.join(MODEL_DIR, MODELS[0])
    image, fg = synthetic_person(256, 256)
    mask = run_model(path, image, K.mediapipe(), use_xnnpack=False)
    assert mask[fg].mean() > 0.6 and mask[~fg].mean() < 0.05


def test_xnnpack_off_without_kernel_is_unresolved():
    """Without XNNPACK nothing else implements the op: a clear UnresolvedOpsError."""
    path = os.path.join(MODEL_DIR, MODELS[0])
    it = oo.Interpreter(model_path=path, use_xnnpack=False)
    with pytest.raises(oo.UnresolvedOpsError, match=OP):
        it.allocate_tensors()


def test_default_runs_our_kernel_and_the_bare_model_is_unresolved():
    """By default XNNPACK is on and our kernel runs the op; without a kernel the
    model is reported as unresolved (not silently run by XNNPACK)."""
    path = os.path.join(MODEL_DIR, MODELS[0])
    it = oo.Interpreter(model_path=path, custom_ops=[K.mediapipe()])
    assert it.xnnpack is True
    bare = oo.Interpreter(model_path=path)
    with pytest.raises(oo.UnresolvedOpsError, match=OP):
        bare.allocate_tensors()
