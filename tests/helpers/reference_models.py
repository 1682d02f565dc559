"""Models and references shared by the tests of opaque_ops.model."""

from __future__ import annotations

import glob
import importlib.util
import os

import numpy as np
import pytest

from opaque_ops.model import ModelBuilder

Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter


def run(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    for det, arr in zip(it.get_input_details(), inputs):
        it.set_tensor(det["index"], arr)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def add_mul_model(with_signature: bool = False) -> tuple[bytes, np.ndarray, np.ndarray]:
    offset = np.array([0.5, -1.0, 2.0, 3.25, -4.0], np.float32)
    scale = np.array([2.0, 0.5, -1.0, 3.0, 1.5], np.float32)
    b = ModelBuilder(description="y = (x + offset) * scale")
    x = b.add_tensor("x", [1, 5], np.float32)
    c = b.add_constant("offset", offset)
    y = b.add_tensor("y", [1, 5], np.float32)
    s = b.add_constant("scale", scale)
    z = b.add_tensor("z", [1, 5], np.float32)
    b.add_op("ADD", inputs=[x, c], outputs=[y], options={"fused_activation_function": "NONE"})
    b.add_op("MUL", inputs=[y, s], outputs=[z])
    b.set_inputs([x])
    b.set_outputs([z])
    if with_signature:
        b.add_signature("serving_default", inputs={"input_x": x}, outputs={"output_z": z})
    return b.build(), offset, scale


def conv_ref(x, w, bias, padding, stride, dilation=1):
    # x NHWC, w OHWI; TFLite SAME padding puts the extra pixel at the end.
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    ekh, ekw = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-wd // stride)
        ph = max((oh - 1) * stride + ekh - h, 0)
        pw = max((ow - 1) * stride + ekw - wd, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - ekh) // stride + 1, (wd - ekw) // stride + 1
    out = np.zeros((n, oh, ow, o), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride : i * stride + ekh : dilation, j * stride : j * stride + ekw : dilation, :]
            out[:, i, j, :] = np.einsum("nhwc,ohwc->no", patch, w)
    return out + bias


ALL_DTYPES = [
    np.float32,
    np.float16,
    np.float64,
    np.int8,
    np.uint8,
    np.int16,
    np.int32,
    np.int64,
    np.uint32,
    np.uint64,
    np.bool_,
]


CUSTOM_OPTS = {
    "i8": -5,
    "i16": 1000,
    "i32": -70000,
    "i64": 2**40 + 3,
    "f": 0.25,
    "f64": 0.1,
    "flag": True,
    "off": False,
    "name": "hello",
    "ints": [1, -2, 300, 2**33],
    "floats": [0.5, -1.5],
    "strs": ["a", "bc"],
}


def round_trip_model() -> tuple[ModelBuilder, bytes, dict]:
    b = ModelBuilder(description="round trip")
    consts = {}
    for dt in ALL_DTYPES:
        arr = (np.arange(6).reshape(2, 3) % 2).astype(dt)
        consts[np.dtype(dt).name] = (b.add_constant(f"c_{np.dtype(dt).name}", arr), arr)
    x = b.add_tensor("x", [1, 5], np.float32, shape_signature=[-1, 5])
    q = b.add_tensor("q", [1, 5], np.int8, quantization=dict(scale=[0.1], zero_point=[3], quantized_dimension=0))
    qc = b.add_constant(
        "qc", np.ones((2, 2), np.int8), quantization=dict(scale=[0.5, 0.25], zero_point=[0, 0], quantized_dimension=1)
    )
    y = b.add_tensor("y", [1, 5], np.float32)
    z = b.add_tensor("z", [1, 5], np.float32)
    w = b.add_tensor("w", [1, 5], np.float32)
    b.add_op("QUANTIZE", [x], [q])
    b.add_custom_op("Atan", inputs=[x], outputs=[y], options=CUSTOM_OPTS, version=2)
    b.add_custom_op("RawOpts", inputs=[y, -1], outputs=[z], options=b"\x01\x02\x03")
    b.add_custom_op("Atan", inputs=[z], outputs=[w], version=1)
    b.add_op("SUB", [w, qc], [w], options={"fused_activation_function": "RELU"})
    b.set_inputs([x])
    b.set_outputs([w, q])
    data = b.build()
    return b, data, dict(consts=consts, x=x, q=q, qc=qc, y=y, z=z, w=w)


def wheel_models() -> list[str]:
    found = []
    for pkg, pattern in (("pyopen_wakeword", "melspectrogram.tflite"), ("pymicro_wakeword", "*.tflite")):
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            found += sorted(glob.glob(os.path.join(loc, "models", pattern)))
    # Both wheels are test dependencies (pyproject.toml's "test" extra).
    assert found, "pyopen-wakeword / pymicro-wakeword models not found: pip install -e '.[test]'"
    return found


def reverse_sequence_reference(x, lengths, seq_dim, batch_dim):
    """tf.reverse_sequence by its definition: along batch i, the first lengths[i] steps of the sequence
    dimension in reverse order, the rest as they are (a length of 0 or less reverses nothing)."""
    out = x.copy()
    for i, n in enumerate(lengths):
        n = max(int(n), 0)
        head, back = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        head[batch_dim] = back[batch_dim] = i
        head[seq_dim], back[seq_dim] = slice(0, n), slice(n - 1, None, -1) if n else slice(0, 0)
        out[tuple(head)] = x[tuple(back)]
    return out
