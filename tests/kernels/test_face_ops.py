"""Tests for MediaPipe's face-mesh custom ops (v2): TransformTensorBilinear,
Landmarks2TransformMatrix and TransformLandmarks.

Each kernel is compared with a numpy reference written from the op's
definition (MediaPipe's mediapipe/util/tflite/operations/:
transform_tensor_bilinear.cc, landmarks_to_transform_matrix.cc and
transform_landmarks.cc), computed in float64, on one-op models built with ModelBuilder whose options are flexbuffers forced to 8, 16,
32 and 64-bit widths.  The real ``face_landmark_with_attention.tflite`` from
the mediapipe 0.10.14 wheel runs end to end, and every custom node inside it
is checked against the same references (see ``test_face_model_nodes``).
"""

from __future__ import annotations

import textwrap

import flatbuffers
import numpy as np
import pytest
from flatbuffers import flexbuffers

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder, read_model
from tests.helpers.hostile_options import run_isolated
from tests.helpers.mediapipe_models import model_file

WIDTHS = {
    8: flexbuffers.BitWidth.W8,
    16: flexbuffers.BitWidth.W16,
    32: flexbuffers.BitWidth.W32,
    64: flexbuffers.BitWidth.W64,
}
FACE_OPS = ("transform_tensor_bilinear", "landmarks_to_transform_matrix", "transform_landmarks")


def face_model_path() -> str | None:
    # The installed mediapipe 0.10.14, or its wheel's files where it has no wheel (Python 3.13).
    p = model_file("modules", "face_landmark", "face_landmark_with_attention.tflite")
    return str(p) if p.is_file() else None


@pytest.fixture(scope="module")
def lib():
    return K.bundle(*FACE_OPS)


def flex(options: dict, width: int = 8) -> bytes:
    """Flexbuffer map with every scalar and vector at least `width` bits wide."""
    b = flexbuffers.Builder(force_min_bit_width=WIDTHS[width])
    with b.Map():
        for k in sorted(options):
            v = options[k]
            b.Key(k)
            if isinstance(v, (list, tuple)):
                b.TypedVectorFromElements([int(e) for e in v], flexbuffers.Type.INT)
            elif isinstance(v, float):
                b.Float(v)
            else:
                b.Int(int(v))
    return bytes(b.Finish())


def run_one(lib, name, version, inputs, out_shapes, options):
    """Build and run a one-op model; returns the outputs (inputs fed at run time)."""
    b = ModelBuilder()
    ins = [b.add_tensor(f"in{i}", a.shape, np.float32) for i, a in enumerate(inputs)]
    outs = [b.add_tensor(f"out{i}", s, np.float32) for i, s in enumerate(out_shapes)]
    b.add_custom_op(name, ins, outs, options=options, version=version)
    b.set_inputs(ins)
    b.set_outputs(outs)
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    it.allocate_tensors()
    for det, a in zip(it.get_input_details(), inputs):
        it.set_tensor(det["index"], a)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


# ------------------------------------------------------------ references --


def ttb_ref(img, m, out_h, out_w):
    """TransformTensorBilinear v2 in float64; also returns the sample points."""
    m = np.asarray(m, np.float64).reshape(-1)[:8]
    _, h, w, c = img.shape
    ys, xs = np.mgrid[0:out_h, 0:out_w].astype(np.float64)
    sx = m[0] * (xs + 0.5) + m[1] * (ys + 0.5) + m[3] - 0.5
    sy = m[4] * (xs + 0.5) + m[5] * (ys + 0.5) + m[7] - 0.5
    inside = (sx >= 0) & (sx <= w - 1) & (sy >= 0) & (sy <= h - 1)
    x0 = np.floor(np.where(inside, sx, 0)).astype(int)
    y0 = np.floor(np.where(inside, sy, 0)).astype(int)
    rx = (np.where(inside, sx, 0) - x0)[..., None]
    ry = (np.where(inside, sy, 0) - y0)[..., None]
    pad = np.zeros((h + 1, w + 1, c))
    pad[:h, :w] = img[0]
    out = (1 - ry) * ((1 - rx) * pad[y0, x0] + rx * pad[y0, x0 + 1]) + ry * (
        (1 - rx) * pad[y0 + 1, x0] + rx * pad[y0 + 1, x0 + 1]
    )
    out[~inside] = 0
    return out[None], sx, sy


def ttb_ambiguous(sx, sy, w, h, eps=1e-3):
    """Pixels whose sample point is within eps of the image edge: float32
    rounding may legitimately put them on either side of the in/out test."""

    def near(v, lo, hi):
        return (np.abs(v - lo) < eps) | (np.abs(v - hi) < eps)

    return near(sx, 0, w - 1) | near(sy, 0, h - 1)


def rot(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s], [s, c]])


def l2tm_ref(lm, subset, left, right, target, out_h, out_w, sx, sy):
    """Landmarks2TransformMatrix v2 in float64, from the definition."""
    p = np.asarray(lm, np.float64)[0, :, :2]
    idx = list(subset) + ([subset[-1]] if len(subset) % 2 else [])
    r = target - np.arctan2(p[right, 1] - p[left, 1], p[right, 0] - p[left, 0])
    q = p[idx] @ rot(r).T
    lo, hi = q.min(0), q.max(0)
    w, h = hi - lo
    cx, cy = rot(-r) @ ((lo + hi) / 2)

    def T(tx, ty):
        m = np.eye(4)
        m[0, 3], m[1, 3] = tx, ty
        return m

    R = np.eye(4)
    R[:2, :2] = rot(-r)
    S = np.diag([sx * w / out_w, sy * h / out_h, 1.0, 1.0])
    return T(cx, cy) @ R @ S @ T(-out_w / 2, -out_h / 2)


def tl_ref(lm, m):
    m = np.asarray(m, np.float64).reshape(4, 4)
    out = np.asarray(lm, np.float64).copy()
    x, y = out[..., 0].copy(), out[..., 1].copy()
    out[..., 0] = m[0, 0] * x + m[0, 1] * y + m[0, 3]
    out[..., 1] = m[1, 0] * x + m[1, 1] * y + m[1, 3]
    return out


def random_affine(rng, in_h, in_w, out_h, out_w):
    """A 4x4 mapping the output grid roughly onto the input (with some spill)."""
    a = rng.uniform(-np.pi, np.pi)
    scale = rng.uniform(0.3, 1.5) * np.array([in_w / out_w, in_h / out_h])
    m = np.eye(4)
    m[:2, :2] = rot(a) @ np.diag(scale)
    centre = np.array([in_w, in_h]) / 2 + rng.normal(0, 0.2, 2) * [in_w, in_h]
    m[:2, 3] = centre - m[:2, :2] @ np.array([out_w / 2, out_h / 2])
    return m.astype(np.float32)[None]


# --------------------------------------------------- TransformTensorBilinear


@pytest.mark.parametrize("width", [8, 16, 32, 64])
@pytest.mark.parametrize("seed", range(4))
def test_ttb_random(lib, seed, width):
    rng = np.random.default_rng(seed)
    h, w, c = rng.integers(3, 40, 2).tolist() + [int(rng.integers(1, 9))]
    # 300 needs a 16-bit int even without forcing the width.
    oh, ow = (300, 7) if seed == 3 else tuple(rng.integers(1, 30, 2).tolist())
    img = rng.normal(size=(1, h, w, c)).astype(np.float32)
    m = random_affine(rng, h, w, oh, ow)
    (got,) = run_one(
        lib,
        "TransformTensorBilinear",
        2,
        [img, m],
        [[1, 1, 1, c]],
        flex({"output_height": oh, "output_width": ow}, width),
    )
    ref, sx, sy = ttb_ref(img, m, oh, ow)
    assert got.shape == (1, oh, ow, c)
    ok = ~ttb_ambiguous(sx, sy, w, h)
    assert ok.mean() > 0.9
    np.testing.assert_allclose(got[0][ok], ref[0][ok], rtol=1e-4, atol=2e-4)
    # The test can fail: some pixels are inside, some (usually) outside.
    assert np.any(ref != 0)


def test_ttb_identity_is_exact(lib):
    rng = np.random.default_rng(7)
    img = rng.normal(size=(1, 9, 11, 3)).astype(np.float32)
    m = np.eye(4, dtype=np.float32)[None]
    (got,) = run_one(
        lib, "TransformTensorBilinear", 2, [img, m], [[1, 9, 11, 3]], flex({"output_height": 9, "output_width": 11})
    )
    np.testing.assert_array_equal(got, img)


def test_ttb_half_pixel_shift(lib):
    # Translating by +0.5 pixel averages horizontal neighbours; the last
    # column samples at W-0.5 > W-1 and is therefore all zero.
    img = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    m = np.eye(4, dtype=np.float32)[None].copy()
    m[0, 0, 3] = 0.5
    (got,) = run_one(
        lib, "TransformTensorBilinear", 2, [img, m], [[1, 3, 4, 1]], flex({"output_height": 3, "output_width": 4})
    )
    expect = np.array([[0.5, 1.5, 2.5, 0], [4.5, 5.5, 6.5, 0], [8.5, 9.5, 10.5, 0]], np.float32)
    np.testing.assert_allclose(got[0, :, :, 0], expect, atol=1e-6)


def test_ttb_nan_matrix_gives_zeros(lib):
    img = np.ones((1, 4, 4, 2), np.float32)
    m = np.full((1, 4, 4), np.nan, np.float32)
    (got,) = run_one(
        lib, "TransformTensorBilinear", 2, [img, m], [[1, 4, 4, 2]], flex({"output_height": 4, "output_width": 4})
    )
    assert np.all(got == 0)


# ------------------------------------------------- Landmarks2TransformMatrix


def l2tm_case(rng, n=40, odd=False):
    subset = rng.integers(0, n, 11 if odd else 12).tolist()
    left, right = (int(v) for v in rng.choice(n, 2, replace=False))
    return dict(
        subset_idxs=subset,
        left_rotation_idx=left,
        right_rotation_idx=right,
        output_height=int(rng.integers(1, 300)),
        output_width=int(rng.integers(1, 300)),
        target_rotation_radians=float(rng.uniform(-3, 3)),
        scale_x=float(rng.uniform(0.5, 2)),
        scale_y=float(rng.uniform(0.5, 2)),
    )


@pytest.mark.parametrize("width", [8, 16, 32, 64])
@pytest.mark.parametrize("seed", range(4))
def test_l2tm_random(lib, seed, width):
    rng = np.random.default_rng(100 + seed)
    o = l2tm_case(rng, odd=seed % 2 == 1)
    lm = (rng.normal(size=(1, 40, 3)) * 50 + 100).astype(np.float32)
    (got,) = run_one(lib, "Landmarks2TransformMatrix", 2, [lm], [[1, 1, 1]], flex(o, width))
    ref = l2tm_ref(
        lm,
        o["subset_idxs"],
        o["left_rotation_idx"],
        o["right_rotation_idx"],
        o["target_rotation_radians"],
        o["output_height"],
        o["output_width"],
        o["scale_x"],
        o["scale_y"],
    )
    assert got.shape == (1, 4, 4)
    np.testing.assert_allclose(got[0], ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[0, 2:], np.eye(4)[2:])
    # The centre of the output crop maps to the centre of the landmark box.
    centre = got[0].astype(np.float64) @ [o["output_width"] / 2, o["output_height"] / 2, 0, 1]
    np.testing.assert_allclose(centre, ref @ [o["output_width"] / 2, o["output_height"] / 2, 0, 1], atol=1e-3)


def test_l2tm_worked_example(lib):
    # Square of side 10 centred at (20, 30), eyes horizontal, target 0:
    # r = 0, w = h = 10, c = (20, 30); with out 5x5 and scale 1 the matrix is
    # [[2, 0, 0, 20 - 5], [0, 2, 0, 30 - 5], ...].
    lm = np.array([[[15, 25, 0], [25, 25, 0], [25, 35, 0], [15, 35, 0]]], np.float32)
    o = dict(
        subset_idxs=[0, 1, 2, 3],
        left_rotation_idx=0,
        right_rotation_idx=1,
        output_height=5,
        output_width=5,
        target_rotation_radians=0.0,
        scale_x=1.0,
        scale_y=1.0,
    )
    (got,) = run_one(lib, "Landmarks2TransformMatrix", 2, [lm], [[1, 4, 4]], flex(o))
    expect = np.array([[2, 0, 0, 15], [0, 2, 0, 25], [0, 0, 1, 0], [0, 0, 0, 1]], np.float32)
    np.testing.assert_allclose(got[0], expect, atol=1e-5)


# ------------------------------------------------------- TransformLandmarks


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_tl_random(lib, seed, d):
    rng = np.random.default_rng(200 + seed)
    lm = rng.normal(size=(1, int(rng.integers(1, 500)), d)).astype(np.float32)
    m = rng.normal(size=(1, 4, 4)).astype(np.float32)
    (got,) = run_one(lib, "TransformLandmarks", 2, [lm, m], [[1, 1, d]], None)
    assert got.shape == lm.shape
    np.testing.assert_allclose(got, tl_ref(lm, m), rtol=1e-5, atol=1e-5)
    if d == 3:
        np.testing.assert_array_equal(got[..., 2], lm[..., 2])


# ------------------------------------------------------------ bad inputs --

TTB_OK = {"output_height": 4, "output_width": 4}
L2TM_OK = dict(
    subset_idxs=[0, 1, 2],
    left_rotation_idx=0,
    right_rotation_idx=1,
    output_height=4,
    output_width=4,
    target_rotation_radians=0.0,
    scale_x=1.0,
    scale_y=1.0,
)


@pytest.mark.parametrize(
    "options, needle",
    [
        (None, "missing custom options"),
        (flex({"output_width": 4}), "output_height"),
        (flex({"output_height": 0, "output_width": 4}), "output_height"),
        (flex({"output_height": 4, "output_width": -3}), "output_width"),
        (flex({"output_height": 4.0, "output_width": 4}), "output_height"),
        (b"\x00\x01", "output_height"),
    ],
)
def test_ttb_bad_options(lib, options, needle):
    img = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(oo.KernelError, match=f"TransformTensorBilinear.*{needle}"):
        run_one(lib, "TransformTensorBilinear", 2, [img, np.eye(4, dtype=np.float32)[None]], [[1, 4, 4, 1]], options)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"subset_idxs": None}, "subset_idxs"),
        ({"subset_idxs": []}, "subset_idxs"),
        ({"subset_idxs": [0, -1]}, "subset_idxs"),
        ({"subset_idxs": [0, 99]}, "out of range"),
        ({"left_rotation_idx": 50}, "out of range"),
        ({"right_rotation_idx": -2}, "right_rotation_idx"),
        ({"output_height": 0}, "output_height"),
        ({"output_width": None}, "output_width"),
        ({"scale_x": 0.0}, "scale_x"),
        ({"scale_y": -1.0}, "scale_y"),
        ({"target_rotation_radians": None}, "target_rotation_radians"),
    ],
)
def test_l2tm_bad_options(lib, change, needle):
    o = dict(L2TM_OK)
    for k, v in change.items():
        if v is None:
            del o[k]
        else:
            o[k] = v
    lm = np.zeros((1, 10, 3), np.float32)
    with pytest.raises(oo.KernelError, match=f"Landmarks2TransformMatrix.*{needle}"):
        run_one(lib, "Landmarks2TransformMatrix", 2, [lm], [[1, 4, 4]], flex(o))


def test_bad_input_shapes(lib):
    eye = np.eye(4, dtype=np.float32)[None]
    with pytest.raises(oo.KernelError, match="TransformTensorBilinear: input must have shape"):
        run_one(lib, "TransformTensorBilinear", 2, [np.zeros((4, 4, 1), np.float32), eye], [[1, 4, 4, 1]], flex(TTB_OK))
    with pytest.raises(oo.KernelError, match="TransformTensorBilinear: matrix"):
        run_one(
            lib,
            "TransformTensorBilinear",
            2,
            [np.zeros((1, 4, 4, 1), np.float32), np.zeros((1, 3, 3), np.float32)],
            [[1, 4, 4, 1]],
            flex(TTB_OK),
        )
    with pytest.raises(oo.KernelError, match=r"Landmarks2TransformMatrix: input must have shape"):
        run_one(lib, "Landmarks2TransformMatrix", 2, [np.zeros((1, 10, 2), np.float32)], [[1, 4, 4]], flex(L2TM_OK))
    with pytest.raises(oo.KernelError, match="TransformLandmarks: landmark size D"):
        run_one(lib, "TransformLandmarks", 2, [np.zeros((1, 10, 4), np.float32), eye], [[1, 10, 4]], None)
    with pytest.raises(oo.KernelError, match="TransformLandmarks: matrix"):
        run_one(
            lib,
            "TransformLandmarks",
            2,
            [np.zeros((1, 10, 2), np.float32), np.zeros((8,), np.float32)],
            [[1, 10, 2]],
            None,
        )


def test_wrong_input_type(lib):
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 10, 3], np.int32)
    y = b.add_tensor("y", [1, 4, 4], np.float32)
    b.add_custom_op("Landmarks2TransformMatrix", [x], [y], options=flex(L2TM_OK), version=2)
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    with pytest.raises(oo.KernelError, match="float32"):
        it.allocate_tensors()


# -------------------------------------------------------- the real model --


def patch_outputs(data: bytes, indices: list[int]) -> bytes:
    """Overwrite the first len(indices) entries of subgraph 0's outputs vector.

    Tensors listed as model outputs are never reused by the arena planner, so
    their values can be read after invoke.  Only the vector's contents change;
    the flatbuffer layout (and every operator) stays as in the real model.
    """
    buf = bytearray(data)
    root = flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0)
    model = flatbuffers.table.Table(buf, root)
    sgs = model.Offset(8)  # Model.subgraphs
    sg0 = model.Indirect(model.Vector(sgs))
    sg = flatbuffers.table.Table(buf, sg0)
    o = sg.Offset(8)  # SubGraph.outputs
    n = sg.VectorLen(o)
    assert len(indices) <= n
    start = sg.Vector(o)
    for k in range(n):
        v = indices[k] if k < len(indices) else indices[-1]
        buf[start + 4 * k : start + 4 * k + 4] = int(v).to_bytes(4, "little")
    return bytes(buf)


def face_input():
    """A face-sized synthetic input: smooth colour blobs in [0, 1]."""
    yy, xx = np.mgrid[0:192, 0:192] / 192.0
    face = np.exp(-((xx - 0.5) ** 2 / 0.08 + (yy - 0.5) ** 2 / 0.12))
    eyes = sum(np.exp(-((xx - cx) ** 2 + (yy - 0.42) ** 2) / 0.002) for cx in (0.37, 0.63))
    img = np.stack([0.8 * face, 0.6 * face - 0.4 * eyes, 0.5 * face + 0.1 * xx], -1)
    return np.clip(img, 0, 1).astype(np.float32)[None]


def run_model(data, lib):
    it = oo.Interpreter(model_content=data, custom_ops=[lib])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], face_input())
    it.invoke()
    return it


@pytest.fixture(scope="module")
def face_model():
    p = face_model_path()
    if p is None:
        pytest.skip("mediapipe 0.10.14 wheel with face_landmark_with_attention.tflite not installed")
    with open(p, "rb") as f:
        return f.read()


def test_face_model_end_to_end(face_model, lib):
    it = run_model(face_model, lib)
    expect = {
        "output_mesh_identity": (1, 1, 1, 1404),
        "output_lips": (1, 1, 1, 160),
        "output_left_eye": (1, 1, 1, 142),
        "output_right_eye": (1, 1, 1, 142),
        "output_left_iris": (1, 1, 1, 10),
        "output_right_iris": (1, 1, 1, 10),
        "conv_faceflag": (1, 1, 1, 1),
    }
    got = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    assert {k: v.shape for k, v in got.items()} == expect
    for k, v in got.items():
        assert np.all(np.isfinite(v)), k
    # Landmarks come out in input-pixel coordinates, so they land near the image.
    mesh = got["output_mesh_identity"].reshape(468, 3)
    assert np.all(np.abs(mesh[:, :2] - 96) < 400)


def test_face_model_nodes(face_model, lib):
    """Every custom node of the real model matches its numpy reference.

    Method: the real model file is run unchanged except that its list of
    output tensors is rewritten (``patch_outputs``) to name the custom node's
    input and output tensors.  Model outputs are never reused by TFLite's
    arena planner, so after ``invoke`` their values are exactly what the node
    read and wrote while the whole model ran with our kernels.  The node's
    output is then compared with the float64 reference applied to the
    captured inputs.  A few nodes are captured per run (the outputs vector
    has 7 slots); runs are deterministic, so each capture is self-consistent.
    """
    m = read_model(face_model)
    sg = m.subgraphs[0]
    nodes = [op for op in sg.operators if op.is_custom]
    assert sorted({(op.op_name, op.version) for op in nodes}) == [
        ("Landmarks2TransformMatrix", 2),
        ("TransformLandmarks", 2),
        ("TransformTensorBilinear", 2),
    ]
    groups, cur_ops, cur = [], [], set()
    for op in nodes:
        t = set(op.inputs) | set(op.outputs)
        if cur_ops and len(cur | t) > 7:
            groups.append(cur_ops)
            cur_ops, cur = [], set()
        cur_ops.append(op)
        cur |= t
    groups.append(cur_ops)
    checked = {}
    for ops in groups:
        idx = sorted({t for op in ops for t in list(op.inputs) + list(op.outputs)})
        it = run_model(patch_outputs(face_model, idx), lib)
        assert {d["index"] for d in it.get_output_details()} == set(idx)
        val = {t: it.get_tensor(t).astype(np.float32) for t in idx}
        for op in ops:
            ins = [val[t] for t in op.inputs]
            out = val[op.outputs[0]]
            assert np.all(np.isfinite(out)), op.op_name
            if op.op_name == "TransformTensorBilinear":
                o = oo.model.decode_flex_options(op.custom_options)
                ref, sx, sy = ttb_ref(ins[0], ins[1], o["output_height"], o["output_width"])
                ok = ~ttb_ambiguous(sx, sy, ins[0].shape[2], ins[0].shape[1])
                assert out.shape == ref.shape and ok.mean() > 0.9
                np.testing.assert_allclose(out[0][ok], ref[0][ok], rtol=1e-4, atol=1e-4)
                assert np.any(out != 0)
            elif op.op_name == "Landmarks2TransformMatrix":
                o = oo.model.decode_flex_options(op.custom_options)
                ref = l2tm_ref(
                    ins[0],
                    o["subset_idxs"],
                    o["left_rotation_idx"],
                    o["right_rotation_idx"],
                    o["target_rotation_radians"],
                    o["output_height"],
                    o["output_width"],
                    o["scale_x"],
                    o["scale_y"],
                )
                np.testing.assert_allclose(out[0], ref, rtol=1e-4, atol=1e-4)
            else:
                np.testing.assert_allclose(out, tl_ref(ins[0], ins[1]), rtol=1e-5, atol=1e-4)
            checked[op.index] = op.op_name
    assert len(checked) == len(nodes) == 11


# ------------------------------------------------------ hostile options --

HOSTILE = textwrap.dedent(r"""
    import random, sys
    import numpy as np
    import opaque_ops as oo, opaque_ops.kernels as K
    from tests.helpers.hostile_options import float_op_model, random_bytes

    lib = K.bundle("transform_tensor_bilinear", "landmarks_to_transform_matrix", "transform_landmarks")
    valid = {"TransformTensorBilinear": bytes.fromhex(sys.argv[1]),
             "Landmarks2TransformMatrix": bytes.fromhex(sys.argv[2]),
             "TransformLandmarks": b""}
    specs = {"TransformTensorBilinear": ([[1, 6, 6, 2], [1, 4, 4]], [[1, 4, 4, 2]]),
             "Landmarks2TransformMatrix": ([[1, 10, 3]], [[1, 4, 4]]),
             "TransformLandmarks": ([[1, 10, 3], [1, 4, 4]], [[1, 10, 3]])}
    rng = random.Random(1234)
    counts = {}
    for name, (ins, outs) in specs.items():
        for trial in range(200):
            base = valid[name]
            kind = trial % 4
            if kind == 0 or not base:
                opts = random_bytes(rng, 64)
            elif kind == 1:
                opts = base[:rng.randrange(len(base))]
            elif kind == 2:
                b = bytearray(base)
                for _ in range(rng.randrange(1, 5)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                opts = bytes(b)
            else:
                b = bytearray(base)
                b[-1 - rng.randrange(min(6, len(b)))] = rng.randrange(256)
                opts = bytes(b)
            model = float_op_model(name, ins, outs, opts, version=2)
            try:
                it = oo.Interpreter(model_content=model, custom_ops=[lib])
                it.allocate_tensors()
                for d in it.get_input_details():
                    it.set_tensor(d["index"], np.random.rand(*d["shape"]).astype(np.float32))
                it.invoke()
                for d in it.get_output_details():
                    it.get_tensor(d["index"])
                counts[(name, "ok")] = counts.get((name, "ok"), 0) + 1
            except oo.OpaqueOpsError:
                counts[(name, "err")] = counts.get((name, "err"), 0) + 1
    print(sorted(counts.items()))
""")


def test_hostile_options_do_not_crash():
    l2tm = flex(dict(L2TM_OK, subset_idxs=[0, 1, 2, 3, 9]))
    out = run_isolated(HOSTILE, flex(TTB_OK).hex(), l2tm.hex(), timeout=240)
    # Both outcomes must occur, or the fuzz exercised nothing.
    assert "('TransformTensorBilinear', 'err')" in out
    assert "('Landmarks2TransformMatrix', 'err')" in out
    assert "('TransformLandmarks', 'ok'), 200" in out
