"""Structure-aware fuzzing of the models fed to opaque_ops.Interpreter.

    python tools/fuzz_structured.py --n 100000 [--seed 1] [--workers 2] [--json out.json]
    python tools/fuzz_structured.py --save SEED:INDEX out.tflite   # write one case, to replay it
    python tools/fuzz_structured.py --replay SEED:INDEX            # run one case here, verbosely
    python tools/fuzz_structured.py --triage out.json              # replay a run's deaths outside the caps

Where ``tools/fuzz_models.py`` flips bytes (and most of its inputs die in the
flatbuffer verifier), this fuzzer edits the *parsed* model and serializes it
again, so every case is a well-formed flatbuffer that reaches the model checks,
TFLite's Prepare and the kernels.  The parsing and serializing is the object API
of TFLite's own generated schema (``ai_edge_litert.schema_py_generated``, a test
dependency), which covers every table of ``schema.fbs``: a second, independent
implementation next to opaque_ops' reader.

Mutations (one to three per case): tensor shapes and shape signatures, tensor
types, buffer indices and buffer sizes, operator inputs and outputs (including
optional -1, out of range and swapped), opcodes (builtin code swapped, versions,
custom names of the runtime's and MediaPipe's ops), fields of builtin options,
options-type confusion (a table of one type under the tag of another),
quantization parameters, sparsity parameters, signature defs, subgraph
inputs/outputs, WHILE/IF/CALL_ONCE subgraph indices, custom options, variable
flags, and deleting, duplicating or reordering operators.

Each case also draws a configuration: XNNPACK on or off, the bundled kernels
(MediaPipe's ops, Atan, ExtractImagePatches) registered or not, an input resize
(to the signature, to a nearby or hostile shape) or none, and the signature
runner instead of ``invoke``.

Entry points for reuse (the isolate tests drive cases through isolate=True):

- :func:`cases` ``(seed, start, stop)`` yields :class:`Case` objects, each a pure
  function of ``(seed, index)``;
- :func:`run_case` ``(case)`` runs one in this process and returns the outcome
  (``"ok"`` or ``"refused: <reason>"``); anything but an ``OpaqueOpsError`` is
  raised as a finding;
- :func:`run` runs a range in child processes (a crash or hang kills only the
  child; it is reported with its case, saved, and the run goes on).

A child's death is one of three kinds (:func:`death_kind`), all kept in
``crashes`` and counted apart in ``deaths``: ``out_of_memory`` (the runtime
threw ``std::bad_alloc`` under the child's 8 GB address-space cap: a legal
model at a huge resize, or a kernel's scratch memory), ``hang`` (one case ran
past its 20 s: a WHILE told to loop billions of times) and ``crash`` (any
other signal or abort: a defect).  ``--triage`` replays the first two kinds
without the cap and with a longer time, and says for each whether the case
then ends cleanly (it needed memory or time, nothing else) or still dies.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools.* must import like in the children
    sys.path.insert(0, str(ROOT))
from tools._fuzz_pool import MEM_LIMIT, add_stats, keep_case, run_child, run_ranges  # noqa: E402 - the fuzzers' one pool

# ----------------------------------------------------------------- the seeds


def _package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    return p if p.is_file() else None


def _one_op_models() -> dict[str, bytes]:
    """Small models built here: one interesting op each, valid as built."""
    from opaque_ops.model import ModelBuilder

    out = {}
    f32 = np.float32
    rng = np.random.default_rng(0)

    def finish(b, ins, outs, name):
        b.set_inputs(ins)
        b.set_outputs(outs)
        b.add_signature(
            "serving_default", {f"in{k}": t for k, t in enumerate(ins)}, {f"out{k}": t for k, t in enumerate(outs)}
        )
        out[name] = b.build()

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8, 8, 3], f32, shape_signature=[-1, 8, 8, 3])
    w = b.add_constant("w", rng.standard_normal((4, 3, 3, 3)).astype(f32))
    bias = b.add_constant("b", np.zeros(4, f32))
    y = b.add_tensor("y", [1, 3, 3, 4], f32)
    b.add_op("CONV_2D", [x, w, bias], [y], {"padding": "VALID", "stride_w": 2, "stride_h": 2})
    p = b.add_tensor("p", [1, 1, 1, 4], f32)
    b.add_op(
        "AVERAGE_POOL_2D",
        [y],
        [p],
        {"padding": "VALID", "stride_w": 2, "stride_h": 2, "filter_width": 3, "filter_height": 3},
    )
    finish(b, [x], [p], "conv_pool")

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 6, 6, 2], f32)
    w = b.add_constant("w", rng.standard_normal((1, 3, 3, 4)).astype(f32))
    bias = b.add_constant("b", np.zeros(4, f32))
    y = b.add_tensor("y", [1, 6, 6, 4], f32)
    b.add_op(
        "DEPTHWISE_CONV_2D", [x, w, bias], [y], {"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 2}
    )
    m = b.add_tensor("m", [1, 3, 3, 4], f32)
    b.add_op(
        "MAX_POOL_2D",
        [y],
        [m],
        {"padding": "SAME", "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2},
    )
    finish(b, [x], [m], "depthwise_maxpool")

    b = ModelBuilder()
    x = b.add_tensor("x", [2, 6], f32)
    w = b.add_constant("w", rng.standard_normal((3, 6)).astype(f32))
    y = b.add_tensor("y", [2, 3], f32)
    b.add_op("FULLY_CONNECTED", [x, w, -1], [y])
    s = b.add_tensor("s", [2, 3], f32)
    b.add_op("SOFTMAX", [y], [s], {"beta": 1.0})
    r = b.add_tensor("r", [3, 2], f32)
    shape = b.add_constant("shape", np.array([3, 2], np.int32))
    b.add_op("RESHAPE", [s, shape], [r], {"new_shape": [3, 2]})
    finish(b, [x], [r], "fc_softmax_reshape")

    b = ModelBuilder()
    x = b.add_tensor("x", [4, 6], f32)
    begin = b.add_constant("begin", np.array([1, 0], np.int32))
    end = b.add_constant("end", np.array([3, 6], np.int32))
    strides = b.add_constant("strides", np.array([1, 2], np.int32))
    y = b.add_tensor("y", [2, 3], f32)
    b.add_op("STRIDED_SLICE", [x, begin, end, strides], [y], {"begin_mask": 0, "end_mask": 0})
    c = b.add_tensor("c", [2, 6], f32)
    b.add_op("CONCATENATION", [y, y], [c], {"axis": 1})
    axis = b.add_constant("axis", np.array(1, np.int32))
    h0 = b.add_tensor("h0", [2, 3], f32)
    h1 = b.add_tensor("h1", [2, 3], f32)
    b.add_op("SPLIT", [axis, c], [h0, h1], {"num_splits": 2})
    finish(b, [x], [h0, h1], "slice_concat_split")

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 5, 4], f32)
    g = b.add_constant("idx", np.array([0, 2, 4], np.int32))
    y = b.add_tensor("y", [1, 3, 4], f32)
    b.add_op("GATHER", [x, g], [y], {"axis": 1})
    ax = b.add_constant("ax", np.array([1], np.int32))
    m = b.add_tensor("m", [1, 4], f32)
    b.add_op("MEAN", [y, ax], [m], {"keep_dims": False})
    pads = b.add_constant("pads", np.array([[0, 0], [1, 2]], np.int32))
    pd = b.add_tensor("pd", [1, 7], f32)
    b.add_op("PAD", [m, pads], [pd])
    finish(b, [x], [pd], "gather_mean_pad")

    # The runtime's own custom ops, with the options TF's converter writes.
    b = ModelBuilder()
    x = b.add_tensor("audio", [1600, 1], f32)
    spec = b.add_tensor("spectrogram", [1, 9, 257], f32)
    b.add_custom_op("AudioSpectrogram", [x], [spec], {"window_size": 400, "stride": 160, "magnitude_squared": True})
    rate = b.add_constant("rate", np.array([16000], np.int32))
    mf = b.add_tensor("mfcc", [1, 9, 13], f32)
    b.add_custom_op(
        "Mfcc",
        [spec, rate],
        [mf],
        {
            "upper_frequency_limit": 4000,
            "lower_frequency_limit": 20,
            "filterbank_channel_count": 40,
            "dct_coefficient_count": 13,
        },
    )
    finish(b, [x], [mf], "spectrogram_mfcc")

    b = ModelBuilder()
    n = 16
    boxes = b.add_tensor("boxes", [1, n, 4], f32)
    scores = b.add_tensor("scores", [1, n, 3], f32)
    anchors = b.add_constant("anchors", np.abs(rng.standard_normal((n, 4))).astype(f32) + 0.1)
    outs = [
        b.add_tensor(nm, sh, f32)
        for nm, sh in (("det_boxes", [1, 5, 4]), ("det_classes", [1, 5]), ("det_scores", [1, 5]), ("num", [1]))
    ]
    b.add_custom_op(
        "TFLite_Detection_PostProcess",
        [boxes, scores, anchors],
        outs,
        {
            "max_detections": 5,
            "max_classes_per_detection": 1,
            "detections_per_class": 10,
            "use_regular_nms": False,
            "nms_score_threshold": 0.0,
            "nms_iou_threshold": 0.5,
            "num_classes": 2,
            "y_scale": 10.0,
            "x_scale": 10.0,
            "h_scale": 5.0,
            "w_scale": 5.0,
        },
    )
    finish(b, [boxes, scores], outs, "detection_postprocess")

    # The bundled kernels' ops, so that the "kernels" configuration runs them.
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 6, 6, 2], f32)
    pt = b.add_tensor("patches", [1, 3, 3, 8], f32)
    b.add_custom_op(
        "ExtractImagePatches",
        [x],
        [pt],
        {"ksizes": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "rates": [1, 1, 1, 1], "padding": "VALID", "T": 0},
    )
    at = b.add_tensor("atan", [1, 3, 3, 8], f32)
    b.add_custom_op("Atan", [pt], [at])
    w = b.add_constant("w", rng.standard_normal((2, 3, 3, 8)).astype(f32))
    bias = b.add_constant("bias", np.zeros(2, f32))
    up = b.add_tensor("up", [1, 6, 6, 2], f32)
    b.add_custom_op("Convolution2DTransposeBias", [at, w, bias], [up], np.array([1, 2, 2], "<i4").tobytes())
    finish(b, [x], [up], "bundled_custom_ops")

    # WHILE and IF need more than one subgraph: built from one-subgraph
    # models joined with the object API (see _join_subgraphs).
    out["while"] = _while_model()
    out["if"] = _if_model()
    return out


def _schema():
    import ai_edge_litert.schema_py_generated as s

    return s


def unpack(data: bytes):
    """The object-API tree (``ModelT``) of model bytes."""
    return _schema().ModelT.InitFromPackedBuf(bytearray(data), 0)


def pack(model) -> bytes:
    """Serialize a ``ModelT`` (identifier ``TFL3``)."""
    import flatbuffers

    b = flatbuffers.Builder(1 << 16)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _join_subgraphs(main: bytes, *others: bytes):
    """Append the subgraphs of ``others`` to ``main``, renumbering buffers and opcodes."""
    m = unpack(main)
    for data in others:
        o = unpack(data)
        boff = len(m.buffers)
        m.buffers.extend(o.buffers)
        code_map = {}
        for k, oc in enumerate(o.operatorCodes):
            key = (oc.builtinCode, oc.customCode, oc.version)
            for j, mc in enumerate(m.operatorCodes):
                if (mc.builtinCode, mc.customCode, mc.version) == key:
                    code_map[k] = j
                    break
            else:
                m.operatorCodes.append(oc)
                code_map[k] = len(m.operatorCodes) - 1
        for sg in o.subgraphs:
            for t in sg.tensors:
                if t.buffer:
                    t.buffer += boff
            for op in sg.operators or []:
                op.opcodeIndex = code_map[op.opcodeIndex]
            m.subgraphs.append(sg)
    return m


def _while_model() -> bytes:
    from opaque_ops.model import ModelBuilder

    s = _schema()
    i32 = np.int32
    main = ModelBuilder()
    i = main.add_tensor("i", [], i32)
    x = main.add_tensor("x", [2], np.float32)
    io = main.add_tensor("i_out", [], i32)
    xo = main.add_tensor("x_out", [2], np.float32)
    main.add_op("WHILE", [i, x], [io, xo])
    main.set_inputs([i, x])
    main.set_outputs([io, xo])
    cond = ModelBuilder(subgraph_name="cond")
    ci = cond.add_tensor("i", [], i32)
    cx = cond.add_tensor("x", [2], np.float32)
    lim = cond.add_constant("limit", np.array(5, i32))
    cb = cond.add_tensor("keep_going", [], np.bool_)
    cond.add_op("LESS", [ci, lim], [cb])
    cond.set_inputs([ci, cx])
    cond.set_outputs([cb])
    body = ModelBuilder(subgraph_name="body")
    bi = body.add_tensor("i", [], i32)
    bx = body.add_tensor("x", [2], np.float32)
    one = body.add_constant("one", np.array(1, i32))
    bi2 = body.add_tensor("i2", [], i32)
    bx2 = body.add_tensor("x2", [2], np.float32)
    body.add_op("ADD", [bi, one], [bi2])
    body.add_op("ADD", [bx, bx], [bx2])
    body.set_inputs([bi, bx])
    body.set_outputs([bi2, bx2])
    m = _join_subgraphs(main.build(), cond.build(), body.build())
    op = m.subgraphs[0].operators[0]
    op.builtinOptionsType = s.BuiltinOptions.WhileOptions
    op.builtinOptions = s.WhileOptionsT()
    op.builtinOptions.condSubgraphIndex, op.builtinOptions.bodySubgraphIndex = 1, 2
    return pack(m)


def _if_model() -> bytes:
    from opaque_ops.model import ModelBuilder

    s = _schema()
    main = ModelBuilder()
    c = main.add_tensor("cond", [], np.bool_)
    x = main.add_tensor("x", [3], np.float32)
    y = main.add_tensor("y", [3], np.float32)
    main.add_op("IF", [c, x], [y])
    main.set_inputs([c, x])
    main.set_outputs([y])
    branches = []
    for name, op in (("then", "ADD"), ("else", "MUL")):
        b = ModelBuilder(subgraph_name=name)
        bx = b.add_tensor("x", [3], np.float32)
        by = b.add_tensor("y", [3], np.float32)
        b.add_op(op, [bx, bx], [by])
        b.set_inputs([bx])
        b.set_outputs([by])
        branches.append(b.build())
    m = _join_subgraphs(main.build(), *branches)
    op = m.subgraphs[0].operators[0]
    op.builtinOptionsType = s.BuiltinOptions.IfOptions
    op.builtinOptions = s.IfOptionsT()
    op.builtinOptions.thenSubgraphIndex, op.builtinOptions.elseSubgraphIndex = 1, 2
    return pack(m)


# (package, path, weight): real models no one here wrote.  Weights favour the
# small ones so that the run stays fast; every one is drawn regularly.
REAL_SEEDS = [
    ("pyopen_wakeword", "models/melspectrogram.tflite", 3),
    ("pyopen_wakeword", "models/embedding_model.tflite", 2),
    ("pymicro_wakeword", "models/okay_nabu.tflite", 3),
    ("pymicro_wakeword", "models/hey_jarvis.tflite", 1),
    ("mediapipe", "modules/selfie_segmentation/selfie_segmentation.tflite", 2),
    ("mediapipe", "modules/face_detection/face_detection_short_range.tflite", 2),
    ("mediapipe", "modules/face_detection/face_detection_full_range_sparse.tflite", 1),
    ("mediapipe", "modules/face_landmark/face_landmark_with_attention.tflite", 1),
]

_SEEDS: list | None = None


def seed_models() -> list[tuple[str, bytes, int]]:
    """``(name, bytes, weight)`` of every seed model present in this environment."""
    global _SEEDS
    if _SEEDS is None:
        sys.path.insert(0, str(ROOT / "examples" / "atan"))
        import make_model

        seeds = [("atan", make_model.build(), 2)]
        seeds += [(k, v, 3) for k, v in _one_op_models().items()]
        for pkg, rel, w in REAL_SEEDS:
            p = _package_file(pkg, *rel.split("/"))
            if p is not None:
                seeds.append((p.name, p.read_bytes(), w))
        _SEEDS = seeds
    return _SEEDS


# ------------------------------------------------------------- the mutations

_EDGE_INTS = [0, 1, 2, 3, -1, -2, 5, 7, 64, 127, 128, 255, 256, 1 << 16, (1 << 31) - 1, -(1 << 31)]
_EDGE_DIMS = [0, 1, 2, 3, 5, -1, -2, 1000, 1 << 16, (1 << 31) - 1, -(1 << 31)]
_EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e38, float("inf"), float("-inf"), float("nan"), 1e-7]

_CUSTOM_NAMES = [
    "AudioSpectrogram",
    "Mfcc",
    "TFLite_Detection_PostProcess",
    "NumericVerify",
    "Convolution2DTransposeBias",
    "MaxPoolingWithArgmax2D",
    "MaxUnpooling2D",
    "TransformTensorBilinear",
    "Landmarks2TransformMatrix",
    "TransformLandmarks",
    "Atan",
    "ExtractImagePatches",
    "NoSuchOp",
]


# Flexbuffer option maps to graft onto custom ops: valid, extreme and ill-typed.
def _custom_option_variants(rng: random.Random) -> bytes | None:
    from opaque_ops.model import flex_options

    keys = [
        "window_size",
        "stride",
        "magnitude_squared",
        "upper_frequency_limit",
        "lower_frequency_limit",
        "filterbank_channel_count",
        "dct_coefficient_count",
        "max_detections",
        "max_classes_per_detection",
        "detections_per_class",
        "use_regular_nms",
        "nms_score_threshold",
        "nms_iou_threshold",
        "num_classes",
        "y_scale",
        "x_scale",
        "h_scale",
        "w_scale",
        "output_height",
        "output_width",
        "subset_idxs",
        "ksizes",
        "strides",
        "rates",
        "padding",
        "T",
        "tolerance",
        "log_if_failed",
        "left_rotation_idx",
        "right_rotation_idx",
        "target_rotation_radians",
        "scale_x",
        "scale_y",
    ]
    kind = rng.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 3, 4, 8, 12, 24, 40])))
    opts = {}
    for k in rng.sample(keys, rng.randrange(1, 8)):
        v = rng.choice(
            [
                rng.choice(_EDGE_INTS),
                rng.choice(_EDGE_FLOATS),
                True,
                "SAME",
                "x",
                [1, 2, 2, 1],
                [rng.choice(_EDGE_INTS) for _ in range(rng.randrange(5))],
                {"a": 1},
                b"\x00\x01",
            ]
        )
        opts[k] = v
    try:
        data = flex_options(opts)
    except (TypeError, ValueError, OverflowError):
        return None
    if kind == 5 and data:
        b = bytearray(data)
        b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    return data


def _options_fields(obj) -> list[str]:
    return [k for k in vars(obj)] if obj is not None else []


def _mut_value(rng: random.Random, v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, np.integer)):
        return rng.choice(_EDGE_INTS + [int(v) + 1, int(v) - 1, int(v) * 5])
    if isinstance(v, (float, np.floating)):
        return rng.choice(_EDGE_FLOATS)
    if isinstance(v, (list, np.ndarray)):
        arr = list(v)
        if arr and rng.random() < 0.5:
            arr[rng.randrange(len(arr))] = rng.choice(_EDGE_INTS)
        elif rng.random() < 0.5:
            arr.append(rng.choice(_EDGE_INTS))
        else:
            arr = arr[:-1]
        return np.array(arr, np.int32) if isinstance(v, np.ndarray) else arr
    if v is None:
        return rng.choice([0, 1, -1, [1, 2]])
    return v


def _builtin_codes() -> dict:
    from opaque_ops.model.schema import BUILTIN_OPERATORS

    return BUILTIN_OPERATORS


_CODE = _builtin_codes()

# The first seed whose cases include issue 17's mutations (retyped graph
# inputs and outputs, value-dependent ops before a consumer).
ISSUE17_FIRST_SEED = 41


class Mutator:
    """Applies one random structural edit to a ``ModelT``; returns its description."""

    def __init__(self, rng: random.Random, model, seed: int | None = None):
        self.rng = rng
        self.m = model
        self.s = _schema()
        # Seeds below ISSUE17_FIRST_SEED draw from the mutations as they were,
        # so every recorded SEED:INDEX still replays the same model.
        self.issue17 = seed is None or seed >= ISSUE17_FIRST_SEED

    # helpers
    def sg(self):
        return self.rng.choice(self.m.subgraphs) if self.m.subgraphs else None

    def tensor(self, sg):
        return self.rng.choice(sg.tensors) if sg and sg.tensors else None

    def op(self, sg):
        return self.rng.choice(sg.operators) if sg and sg.operators else None

    def tensor_index(self, sg):
        n = len(sg.tensors or [])
        r = self.rng.random()
        if r < 0.75 and n:
            return self.rng.randrange(n)
        return self.rng.choice([-1, n, n + 5, -2, 1 << 20])

    def apply(self) -> str:
        kinds = [
            (self.shape, 10),
            (self.shape_signature, 4),
            (self.ttype, 4),
            (self.buffer, 4),
            (self.buffer_data, 4),
            (self.op_io, 10),
            (self.opcode, 6),
            (self.version, 3),
            (self.options_field, 14),
            (self.options_confusion, 3),
            (self.quantization, 5),
            (self.sparsity, 2),
            (self.signature, 3),
            (self.graph_io, 4),
            (self.subgraph_index, 4),
            (self.custom_options, 5),
            (self.variable, 1),
            (self.op_list, 3),
        ]
        if self.issue17:
            # Issue 17: retyped graph inputs / outputs (a copy op then moves
            # the wrong number of bytes), and value-dependent ops (WHERE,
            # UNIQUE, NMS) whose output a static-shape consumer reads.
            kinds += [(self.io_retype, 5), (self.value_dependent, 5)]
        fns, weights = zip(*kinds)
        fn = self.rng.choices(fns, weights)[0]
        return fn() or fn.__name__

    def shape(self):
        sg = self.sg()
        t = self.tensor(sg)
        if t is None:
            return "shape: no tensor"
        shape = list(t.shape) if t.shape is not None else []
        r = self.rng.random()
        if r < 0.5 and shape:
            k = self.rng.randrange(len(shape))
            shape[k] = self.rng.choice(_EDGE_DIMS + [shape[k] + 1, max(shape[k] - 1, 0), shape[k] * 5])
        elif r < 0.7:
            shape.append(self.rng.choice([1, 2, 3]))
        elif r < 0.85:
            shape = shape[:-1]
        else:
            shape = [1] * self.rng.choice([7, 8, 12, 64])
        t.shape = np.array(shape, np.int32)
        return f"shape of {t.name!r} -> {shape[:8]}"

    def shape_signature(self):
        t = self.tensor(self.sg())
        if t is None:
            return "sig: none"
        base = list(t.shape) if t.shape is not None else []
        r = self.rng.random()
        if r < 0.3:
            t.shapeSignature = None
        elif r < 0.7 and base:
            sig = list(base)
            sig[self.rng.randrange(len(sig))] = -1
            t.shapeSignature = np.array(sig, np.int32)
        else:
            t.shapeSignature = np.array(
                [self.rng.choice([-1, 1, 2, -5]) for _ in range(self.rng.randrange(6))], np.int32
            )
        return f"shape_signature of {t.name!r}"

    def ttype(self):
        t = self.tensor(self.sg())
        if t is None:
            return "type: none"
        t.type = self.rng.choice(list(range(0, 23)) + [23, 100, -1])
        return f"type of {t.name!r} -> {t.type}"

    def buffer(self):
        t = self.tensor(self.sg())
        if t is None:
            return "buffer: none"
        n = len(self.m.buffers or [])
        t.buffer = self.rng.choice([0, self.rng.randrange(max(n, 1)), n - 1 if n else 0])
        return f"buffer of {t.name!r} -> {t.buffer}"

    def buffer_data(self):
        bufs = [b for b in (self.m.buffers or []) if b.data is not None and len(b.data)]
        if not bufs:
            return "buffer data: none"
        b = self.rng.choice(bufs)
        n = len(b.data)
        r = self.rng.random()
        if r < 0.35:
            b.data = np.asarray(b.data[: self.rng.randrange(n)], np.uint8)
        elif r < 0.6:
            b.data = np.concatenate(
                [np.asarray(b.data, np.uint8), np.zeros(self.rng.choice([1, 4, 16, 1000]), np.uint8)]
            )
        elif r < 0.8:
            b.data = None
        else:
            d = np.array(b.data, np.uint8)
            # Hostile values inside int32 data (indices, shapes, pads).
            if len(d) >= 4:
                k = self.rng.randrange(len(d) // 4) * 4
                d[k : k + 4] = np.frombuffer(np.array([self.rng.choice(_EDGE_INTS)], "<i4").tobytes(), np.uint8)
            b.data = d
        return f"buffer data length {n} -> {0 if b.data is None else len(b.data)}"

    def op_io(self):
        sg = self.sg()
        op = self.op(sg)
        if op is None:
            return "op io: none"
        which = self.rng.choice(["inputs", "outputs", "intermediates"])
        arr = list(getattr(op, which) if getattr(op, which) is not None else [])
        r = self.rng.random()
        if r < 0.55 and arr:
            arr[self.rng.randrange(len(arr))] = self.tensor_index(sg)
        elif r < 0.7:
            arr.append(self.tensor_index(sg))
        elif r < 0.85 and arr:
            del arr[self.rng.randrange(len(arr))]
        elif len(arr) > 1:
            self.rng.shuffle(arr)
        setattr(op, which, np.array(arr, np.int32))
        return f"op {which} -> {arr[:8]}"

    def opcode(self):
        if not self.m.operatorCodes:
            return "opcode: none"
        oc = self.rng.choice(self.m.operatorCodes)
        r = self.rng.random()
        if r < 0.6:
            code = self.rng.choice(list(range(0, 207)) + [-1, 300])
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(max(code, -128), 127)
            if code == 32 and oc.customCode is None:
                oc.customCode = self.rng.choice(_CUSTOM_NAMES)
        else:
            oc.builtinCode = oc.deprecatedBuiltinCode = 32
            oc.customCode = self.rng.choice(_CUSTOM_NAMES)
        return f"opcode -> {oc.builtinCode} {oc.customCode!r}"

    def version(self):
        if not self.m.operatorCodes:
            return "version: none"
        oc = self.rng.choice(self.m.operatorCodes)
        oc.version = self.rng.choice([0, 1, 2, 3, 4, 7, 100, -1, (1 << 31) - 1])
        return f"version -> {oc.version}"

    def options_field(self):
        sg = self.sg()
        ops = [o for o in (sg.operators or [])] if sg else []
        ops = [o for o in ops if o.builtinOptions is not None and _options_fields(o.builtinOptions)]
        if not ops:
            return self.custom_options()
        op = self.rng.choice(ops)
        f = self.rng.choice(_options_fields(op.builtinOptions))
        old = getattr(op.builtinOptions, f)
        new = _mut_value(self.rng, old)
        setattr(op.builtinOptions, f, new)
        return f"{type(op.builtinOptions).__name__}.{f}: {old!r} -> {new!r}"

    def options_confusion(self):
        op = self.op(self.sg())
        if op is None:
            return "confusion: none"
        r = self.rng.random()
        if r < 0.4:
            # Keep the table, change the tag.
            op.builtinOptionsType = self.rng.randrange(1, 127)
        elif r < 0.7:
            # A fresh table of a random type under its own tag, on the wrong op.
            t = self.rng.randrange(1, 127)
            obj = self.s.BuiltinOptionsCreator(t, _empty_table())
            op.builtinOptionsType = t if obj is not None else 0
            op.builtinOptions = obj
        else:
            op.builtinOptionsType = 0
            op.builtinOptions = None
        return f"options type -> {op.builtinOptionsType}"

    def quantization(self):
        t = self.tensor(self.sg())
        if t is None:
            return "quant: none"
        q = t.quantization or self.s.QuantizationParametersT()
        r = self.rng.random()
        n = self.rng.choice([1, 1, 2, 3, 4, 64])
        if r < 0.4:
            q.scale = np.array([self.rng.choice(_EDGE_FLOATS + [0.1, 0.02]) for _ in range(n)], np.float32)
            q.zeroPoint = np.array([self.rng.choice([0, 0, 1, -128, 127, 255, 300]) for _ in range(n)], np.int64)
        elif r < 0.6:
            q.quantizedDimension = self.rng.choice([0, 1, 3, 4, -1, 100])
        elif r < 0.8:
            q.zeroPoint = np.array(
                [self.rng.choice([0, 1, -1]) for _ in range(self.rng.choice([0, 1, 2, 5]))], np.int64
            )
        else:
            q.min = np.array([-1.0], np.float32)
            q.max = np.array([1.0], np.float32)
        t.quantization = q
        return f"quantization of {t.name!r}"

    def sparsity(self):
        t = self.tensor(self.sg())
        if t is None:
            return "sparsity: none"
        sp = self.s.SparsityParametersT()
        rank = len(t.shape) if t.shape is not None else 0
        k = self.rng.choice([rank, rank + 1, max(rank - 1, 0), 0, 3])
        sp.traversalOrder = np.array(self.rng.sample(range(max(k, 1) + 2), k) if k else [], np.int32)
        if self.rng.random() < 0.4:
            sp.blockMap = np.array([self.rng.choice([0, 1, 5, -1])], np.int32)
        dims = []
        for _ in range(self.rng.choice([k, k + 1, 0])):
            d = self.s.DimensionMetadataT()
            d.format = self.rng.choice([0, 1, 2])
            d.denseSize = self.rng.choice([0, 1, 4, 1 << 20, -1])
            if d.format == 1:
                seg = self.s.Int32VectorT()
                seg.values = [self.rng.choice([0, 1, 2, 4, 100, -1]) for _ in range(self.rng.randrange(5))]
                idx = self.s.Int32VectorT()
                idx.values = [self.rng.choice([0, 1, 3, 1000, -1]) for _ in range(self.rng.randrange(5))]
                d.arraySegmentsType = d.arrayIndicesType = 1
                d.arraySegments, d.arrayIndices = seg, idx
            dims.append(d)
        sp.dimMetadata = dims
        t.sparsity = sp
        return f"sparsity on {t.name!r}"

    def signature(self):
        sigs = self.m.signatureDefs
        if not sigs:
            sd = self.s.SignatureDefT()
            sd.signatureKey = "fuzz"
            sd.inputs, sd.outputs = [], []
            self.m.signatureDefs = sigs = [sd]
        sd = self.rng.choice(sigs)
        r = self.rng.random()
        if r < 0.3:
            sd.subgraphIndex = self.rng.choice([0, 1, 2, len(self.m.subgraphs), 1 << 20])
        elif r < 0.7:
            tm = self.s.TensorMapT()
            tm.name = self.rng.choice(["x", "in0", "out0", ""])
            tm.tensorIndex = self.rng.choice([0, 1, 5, 1 << 20, (1 << 32) - 1])
            (sd.inputs if self.rng.random() < 0.5 else sd.outputs).append(tm)
        elif r < 0.85:
            sigs.append(sigs[0])
        else:
            if sd.inputs:
                sd.inputs.pop()
        return "signature def"

    def graph_io(self):
        sg = self.sg()
        if sg is None:
            return "graph io: none"
        which = self.rng.choice(["inputs", "outputs"])
        arr = list(getattr(sg, which) if getattr(sg, which) is not None else [])
        r = self.rng.random()
        if r < 0.4:
            arr.append(self.tensor_index(sg))
        elif r < 0.7 and arr:
            arr[self.rng.randrange(len(arr))] = self.tensor_index(sg)
        elif arr:
            arr.pop()
        setattr(sg, which, np.array(arr, np.int32))
        return f"subgraph {which} -> {arr[:8]}"

    def subgraph_index(self):
        n = len(self.m.subgraphs)
        hits = []
        for sg in self.m.subgraphs:
            for op in sg.operators or []:
                for f in (
                    "condSubgraphIndex",
                    "bodySubgraphIndex",
                    "thenSubgraphIndex",
                    "elseSubgraphIndex",
                    "initSubgraphIndex",
                    "subgraph",
                ):
                    if op.builtinOptions is not None and hasattr(op.builtinOptions, f):
                        hits.append((op, f))
        if not hits:
            return self.op_list()
        op, f = self.rng.choice(hits)
        setattr(op.builtinOptions, f, self.rng.choice([0, 1, 2, n - 1, n, -1, 1 << 20]))
        return f"{f} -> {getattr(op.builtinOptions, f)}"

    def custom_options(self):
        sg = self.sg()
        ops = [o for o in (sg.operators or [])] if sg else []
        if not ops:
            return "custom options: none"
        op = self.rng.choice(ops)
        raw = _custom_option_variants(self.rng)
        op.customOptions = None if raw is None else np.frombuffer(raw, np.uint8).copy()
        return f"custom options -> {None if raw is None else len(raw)} bytes"

    def variable(self):
        t = self.tensor(self.sg())
        if t is None:
            return "variable: none"
        t.isVariable = not t.isVariable
        return f"is_variable of {t.name!r} -> {t.isVariable}"

    def io_retype(self):
        """Retype one graph input or output to another numeric type, nothing else changed."""
        sg = self.sg()
        ios = list(sg.inputs if sg is not None and sg.inputs is not None else [])
        ios += list(sg.outputs if sg is not None and sg.outputs is not None else [])
        ios = [t for t in ios if 0 <= t < len(sg.tensors or [])]
        if not ios:
            return "io retype: none"
        t = sg.tensors[self.rng.choice(ios)]
        # FLOAT32 FLOAT16 INT32 UINT8 INT64 BOOL INT16 INT8 UINT32 UINT16
        t.type = self.rng.choice([0, 1, 2, 3, 4, 6, 7, 9, 15, 16])
        return f"io retype {t.name!r} -> {t.type}"

    def _opcode_index(self, code: int) -> int:
        for k, oc in enumerate(self.m.operatorCodes or []):
            if oc.builtinCode == code and oc.customCode is None:
                return k
        oc = self.s.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
        self.m.operatorCodes = (self.m.operatorCodes or []) + [oc]
        return len(self.m.operatorCodes) - 1

    def _new_tensor(self, sg, name: str, shape, ttype: int) -> int:
        t = self.s.TensorT()
        t.name, t.type, t.buffer = name.encode(), ttype, 0
        t.shape = np.array(shape, np.int32)
        if shape and self.rng.random() < 0.5:
            t.shapeSignature = np.array([-1] + list(shape[1:]), np.int32)
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    def value_dependent(self):
        """Insert WHERE / UNIQUE / NON_MAX_SUPPRESSION_V4 (optionally through a CAST) before an
        operator, feeding it in place of one of its inputs; the new output is declared either as
        the kernel writes it or with the replaced tensor's stale type and shape."""
        sg = self.sg()
        if sg is None or not sg.operators or not sg.tensors:
            return "value dependent: none"
        k = self.rng.randrange(len(sg.operators))
        consumer = sg.operators[k]
        ins = list(consumer.inputs if consumer.inputs is not None else [])
        slots = [j for j, t in enumerate(ins) if 0 <= t < len(sg.tensors)]
        if not slots:
            return "value dependent: no input"
        j = self.rng.choice(slots)
        old = sg.tensors[ins[j]]
        old_shape = list(old.shape) if old.shape is not None else []
        src = self.rng.choice([t for t in ins if 0 <= t < len(sg.tensors)])
        src_rank = len(sg.tensors[src].shape) if sg.tensors[src].shape is not None else 0
        stale = self.rng.random() < 0.5
        kind = self.rng.choice(["WHERE", "UNIQUE", "NON_MAX_SUPPRESSION_V4"])
        new_ops = []
        if kind == "WHERE":
            shape, ttype = (old_shape, old.type) if stale else ([1, src_rank], 4)
            out = self._new_tensor(sg, "fuzz_where", shape, ttype)
            new_ops.append((_CODE["WHERE"], [src], [out], None))
        elif kind == "UNIQUE":
            shape, ttype = (old_shape, old.type) if stale else ([1], sg.tensors[src].type)
            out = self._new_tensor(sg, "fuzz_unique", shape, ttype)
            idx = self._new_tensor(sg, "fuzz_unique_idx", [1], self.rng.choice([2, 4]))
            opts = self.s.UniqueOptionsT()
            opts.idxOutType = self.rng.choice([2, 4])
            new_ops.append((_CODE["UNIQUE"], [src], [out, idx], (self.s.BuiltinOptions.UniqueOptions, opts)))
        else:
            shape, ttype = (old_shape, old.type) if stale else ([1], 2)
            out = self._new_tensor(sg, "fuzz_nms", shape, ttype)
            valid = self._new_tensor(sg, "fuzz_nms_valid", [], 2)
            new_ops.append((_CODE["NON_MAX_SUPPRESSION_V4"], [src] * 5, [out, valid], None))
        if self.rng.random() < 0.4:
            # Through a CAST declared with the replaced tensor's type and shape.
            cast = self._new_tensor(sg, "fuzz_cast", old_shape, old.type)
            new_ops.append((_CODE["CAST"], [out], [cast], None))
            out = cast
        for n, (code, i, o, opts) in enumerate(new_ops):
            op = self.s.OperatorT()
            op.opcodeIndex = self._opcode_index(code)
            op.inputs, op.outputs = np.array(i, np.int32), np.array(o, np.int32)
            if opts is not None:
                op.builtinOptionsType, op.builtinOptions = opts
            sg.operators.insert(k + n, op)
        ins[j] = out
        consumer.inputs = np.array(ins, np.int32)
        return f"{kind} ({'stale' if stale else 'as written'}) -> input {j} of operator {k}"

    def op_list(self):
        sg = self.sg()
        if sg is None or not sg.operators:
            return "op list: none"
        ops = sg.operators
        r = self.rng.random()
        k = self.rng.randrange(len(ops))
        if r < 0.4:
            del ops[k]
        elif r < 0.6:
            import copy

            ops.insert(k, copy.copy(ops[k]))
        elif len(ops) > 1:
            j = self.rng.randrange(len(ops))
            ops[k], ops[j] = ops[j], ops[k]
        return "operator list"


def _empty_table():
    """A packed empty table, for BuiltinOptionsCreator to read default fields from."""
    import flatbuffers

    b = flatbuffers.Builder(16)
    b.StartObject(0)
    b.Finish(b.EndObject())
    buf = b.Output()
    import flatbuffers.table

    pos = flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0)
    return flatbuffers.table.Table(buf, pos)


# ---------------------------------------------------------------- the cases


@dataclasses.dataclass
class Case:
    """One fuzz case: model bytes plus how to run them."""

    seed: int
    index: int
    seed_model: str
    mutations: list
    data: bytes
    xnnpack: bool
    kernels: bool
    resize: list | None
    runner: bool

    def config(self) -> str:
        return (
            f"xnnpack={'on' if self.xnnpack else 'off'} kernels={'on' if self.kernels else 'off'} "
            f"resize={self.resize is not None} runner={self.runner}"
        )


def _resize_for(rng: random.Random, model) -> list | None:
    if rng.random() < 0.6 or not model.subgraphs:
        return None
    sg = model.subgraphs[0]
    if sg.inputs is None or not len(sg.inputs):
        return None
    t = sg.tensors[int(sg.inputs[0])] if 0 <= int(sg.inputs[0]) < len(sg.tensors or []) else None
    shape = list(t.shape) if t is not None and t.shape is not None else [1]
    r = rng.random()
    if r < 0.3 and shape:
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 7, 96, 1760, 4000])
    elif r < 0.5:
        shape = shape + [rng.choice([1, 2])]
    elif r < 0.6:
        shape = shape[:-1]
    elif r < 0.7:
        shape = [1] * rng.choice([7, 64])
    elif r < 0.85 and shape:
        shape = [max(1, d * rng.choice([2, 3])) if d > 0 else 1 for d in shape]
    else:
        shape = [max(d // 2, 1) if d > 0 else 1 for d in shape]
    return [int(d) for d in shape]


#: Share of cases run through a signature runner instead of invoke.
RUNNER_RATE = float(os.environ.get("OO_FUZZ_RUNNER_RATE", "0.15"))


def make_case(seed: int, index: int) -> Case:
    """Case ``index`` of run ``seed``: a pure function of the two."""
    rng = random.Random(f"structured:{seed}:{index}")
    seeds = seed_models()
    name, data, _w = rng.choices(seeds, [w for _, _, w in seeds])[0]
    model = unpack(data)
    mut = Mutator(rng, model, seed)
    muts = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3])):
        try:
            muts.append(mut.apply())
        except (IndexError, ValueError, TypeError, AttributeError) as exc:
            muts.append(f"(mutation skipped: {type(exc).__name__})")
    try:
        out = pack(model)
    except Exception as exc:  # noqa: BLE001 - the generated Pack rejects some edits (e.g. huge ints)
        muts.append(f"(pack failed: {type(exc).__name__}; the seed runs unchanged)")
        out = data
    return Case(
        seed,
        index,
        name,
        muts,
        out,
        xnnpack=rng.random() < 0.6,
        kernels=rng.random() < 0.5,
        resize=_resize_for(rng, model),
        runner=rng.random() < RUNNER_RATE,
    )


def cases(seed: int, start: int = 0, stop: int | None = None):
    """Yield :class:`Case` ``start``, ``start + 1``, ... (forever if ``stop`` is None)."""
    i = start
    while stop is None or i < stop:
        yield make_case(seed, i)
        i += 1


# ---------------------------------------------------------------- running one


_KERNELS = None


def _kernels():
    global _KERNELS
    if _KERNELS is None:
        import opaque_ops as oo

        _KERNELS = oo.kernels.all_kernels()
    return _KERNELS


def _fill(detail, rng):
    shape = [int(d) for d in detail["shape"]]
    dtype = np.dtype(detail["dtype"]) if detail["dtype"] is not None else None
    if dtype is None or dtype == object or dtype.kind == "S":  # (strings: np.bytes_, as litert reports them)
        return None
    if int(np.prod(shape, dtype=np.int64)) > 1 << 24:
        return None  # a huge planned input: leave the arena's bytes rather than allocate here
    if dtype.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype)
    return np.ones(shape, dtype)


def run_case(case: Case, library=None) -> str:
    """Run one case in this process.

    Returns ``"ok"`` or ``"refused: <ExceptionClass>: <message>"``.  An
    exception that is not an ``OpaqueOpsError`` propagates: it is a finding.
    """
    import opaque_ops as oo

    rng = np.random.default_rng(case.index)
    try:
        it = oo.Interpreter(
            model_content=case.data,
            use_xnnpack=case.xnnpack,
            custom_ops=[_kernels()] if case.kernels else None,
            library=library,
        )
        if case.runner and it.get_signature_list():
            runner = it.get_signature_runner(next(iter(it.get_signature_list())))
            ins = {}
            for n, d in runner.get_input_details().items():
                shape = list(d["shape"])
                if case.resize is not None and not ins:
                    shape = case.resize
                v = _fill({"shape": shape, "dtype": d["dtype"]}, rng)
                if v is None:
                    return "ok"
                ins[n] = v
            for _ in range(2):
                runner(**ins)
            return "ok"
        if case.resize is not None and it.get_input_details():
            it.resize_tensor_input(it.get_input_details()[0]["index"], case.resize)
        it.allocate_tensors()
        for d in it.get_input_details():
            v = _fill(d, rng)
            if v is not None:
                it.set_tensor(d["index"], v)
        it.invoke()
        for d in it.get_output_details():
            it.get_tensor(d["index"])
        it.invoke()
        return "ok"
    except oo.OpaqueOpsError as exc:
        return f"refused: {type(exc).__name__}: {exc}"


def reason_key(outcome: str) -> str:
    """A count-friendly outcome: numbers and quoted names masked."""
    msg = outcome.replace("<model_content>", "")
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"-?\d+", "N", msg)
    msg = msg.replace(" is not a usable TFLite model:", "")
    return msg[:140]


CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from tools._fuzz_pool import Child
# A case that plans a huge tensor must fail its allocation, not take the
# machine's memory: cap the child's address space.  A case that runs past its
# time (a WHILE looping for billions of turns) is a hang: the child says which
# and ends, so a fresh one carries on.
child = Child(case_timeout={case_timeout}, mem_limit={mem_limit})
from tools.fuzz_structured import make_case, run_case, reason_key
stats = {{"ok": 0, "refused": 0, "reasons": {{}}, "configs": {{}}, "seeds": {{}}}}
for i in child.cases({start}, {stop}):
    case = make_case({seed}, i)
    stats["configs"][case.config()] = stats["configs"].get(case.config(), 0) + 1
    stats["seeds"][case.seed_model] = stats["seeds"].get(case.seed_model, 0) + 1
    try:
        res = run_case(case, library={library!r})
    except Exception as e:
        child.finding(i, "%s: %s" % (type(e).__name__, str(e)[:300].replace(chr(10), " ")))
        continue
    if res == "ok":
        stats["ok"] += 1
    else:
        stats["refused"] += 1
        k = reason_key(res)
        stats["reasons"][k] = stats["reasons"].get(k, 0) + 1
child.stats(stats)
"""


def death_kind(crash: dict) -> str:
    """``out_of_memory``, ``hang`` or ``crash``, from a dead child's return code and stderr."""
    if crash.get("returncode") == "timeout":
        return "hang"
    if "std::bad_alloc" in crash.get("stderr", ""):
        return "out_of_memory"
    return "crash"


TRIAGE_CHILD = r"""
import os, signal, sys, threading, time
sys.path.insert(0, {root!r})
from tools.fuzz_structured import make_case, run_case
interrupt = {interrupt!r}
if interrupt:  # a user's Ctrl-C, that many seconds in
    # (Python's own handler first: started from a background job, this process inherits SIGINT ignored.)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(interrupt, os.kill, (os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    out = run_case(make_case({seed}, {index}), library={library!r})
except KeyboardInterrupt:
    out = "stopped by Ctrl-C after %.1f s" % (time.monotonic() - t0)
print("OUTCOME " + out[:300].replace(chr(10), " "), flush=True)
"""


def triage(report: dict, timeout: float = 300.0, library=None) -> list[dict]:
    """Replay each ``out_of_memory`` and ``hang`` death of a run without the fuzzing child's limits.

    An ``out_of_memory`` case runs with no address-space cap (and ``timeout``
    s); a ``hang`` gets a SIGINT 5 s in, as a user's Ctrl-C, which must stop
    it cleanly.  Returns one row per replayed case: its kind, and
    ``outcome`` (the clean result, ``"still dies: ..."`` or ``"still running
    after N s"``).  Cases run one at a time: an uncapped one may take most of
    the machine's memory, and the kernel's OOM killer then ends only that
    child.
    """
    import subprocess

    rows = []
    for c in report.get("crashes", []):
        kind = c.get("kind") or death_kind(c)
        if kind == "crash":
            continue
        code = TRIAGE_CHILD.format(
            root=str(ROOT),
            seed=report["seed"],
            index=c["index"],
            library=library,
            interrupt=5.0 if kind == "hang" else None,
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT), OPAQUE_OPS_VERDICT_CACHE="off")
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
            got = [ln[8:] for ln in p.stdout.splitlines() if ln.startswith("OUTCOME ")]
            outcome = got[0] if got and p.returncode == 0 else f"still dies: rc {p.returncode}: {p.stderr[-300:]}"
        except subprocess.TimeoutExpired:
            outcome = f"still running after {timeout:.0f} s"
        rows.append({"index": c["index"], "kind": kind, "seed_model": c.get("seed_model"), "outcome": outcome})
    return rows


def _run_range(seed: int, start: int, stop: int, timeout: float, library=None, case_timeout: float = 20.0) -> dict:
    code = CHILD.format(
        root=str(ROOT),
        seed=seed,
        start=start,
        stop=stop,
        library=library,
        mem_limit=MEM_LIMIT,
        case_timeout=case_timeout,
    )
    return run_child(code, start, stop, timeout)


def run(
    n: int,
    seed: int,
    workdir: Path,
    chunk: int = 200,
    workers: int = 1,
    start: int = 0,
    progress: bool = False,
    library=None,
    per_case_timeout: float = 20.0,
    snapshot=None,
) -> dict:
    """Run cases ``start .. start+n-1`` in child processes and return the totals.

    A child that dies (signal, abort) or hangs is reported with the case it
    was on; that case is saved to ``workdir`` and a fresh child carries on
    after it.  ``unaccounted`` counts cases a crashed child had run (they did
    not crash it, but their outcomes died with it).
    """
    totals = {
        "cases": n,
        "seed": seed,
        "start": start,
        "ok": 0,
        "refused": 0,
        "unaccounted": 0,
        "crashes": [],
        "deaths": {"crash": 0, "out_of_memory": 0, "hang": 0},
        "findings": [],
        "reasons": {},
        "configs": {},
        "seeds": {},
    }
    t0 = time.time()

    def take(res: dict, a: int) -> None:
        st = res["stats"]
        if st is not None:
            add_stats(totals, st, ("ok", "refused"), ("reasons", "configs", "seeds"))
        totals["findings"].extend(res["findings"])
        if progress:
            for f in res["findings"]:
                print(f"FINDING {f}", file=sys.stderr, flush=True)
        if res["crash"] is not None:
            c = res["crash"]
            c["kind"] = death_kind(c)
            totals["deaths"][c["kind"]] += 1
            totals["unaccounted"] += max(res["partial"], 0)
            if c["index"] >= a:
                case = make_case(seed, c["index"])
                c.update(
                    file=keep_case(workdir, f"crash-{seed}-{c['index']}", case.data),
                    seed_model=case.seed_model,
                    mutations=case.mutations,
                    config=case.config(),
                    resize=case.resize,
                )
            totals["crashes"].append(c)
            if progress:
                print(
                    f"{c['kind'].upper()} at case {c['index']} (rc {c['returncode']}): {c.get('mutations')} "
                    f"{c.get('config')}",
                    file=sys.stderr,
                    flush=True,
                )

    def chunk_done(k: int, count: int) -> None:
        if snapshot is not None:
            Path(snapshot).write_text(json.dumps(dict(totals, seconds=round(time.time() - t0, 1)), default=str))
        if progress:
            d = totals["deaths"]
            print(
                f"[{time.time() - t0:7.0f}s] chunk {k + 1}/{count}: ok {totals['ok']} "
                f"refused {totals['refused']} crashes {d['crash']} out-of-memory {d['out_of_memory']} "
                f"hangs {d['hang']} findings {len(totals['findings'])}",
                file=sys.stderr,
                flush=True,
            )

    def run_range(a: int, b: int) -> dict:
        return _run_range(
            seed, a, b, timeout=60 + per_case_timeout * (b - a), library=library, case_timeout=per_case_timeout
        )

    run_ranges(start, start + n, chunk, run_range, take, workers=workers, chunk_done=chunk_done)
    totals["seconds"] = round(time.time() - t0, 1)
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=200)
    ap.add_argument("--library", default=None, help="the libtensorflowlite_c to run on")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--save", nargs=2, metavar=("SEED:INDEX", "OUT"))
    ap.add_argument("--replay", metavar="SEED:INDEX")
    ap.add_argument("--triage", metavar="RUN.json", help="replay a run's out-of-memory deaths and hangs uncapped")
    ap.add_argument("--triage-timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    if args.triage:
        rows = triage(json.loads(Path(args.triage).read_text()), args.triage_timeout, args.library)
        for r in rows:
            print(json.dumps(r))
        return 1 if any(r["outcome"].startswith("still") for r in rows) else 0
    if args.save or args.replay:
        seed, index = (int(v) for v in (args.save[0] if args.save else args.replay).split(":"))
        case = make_case(seed, index)
        if args.save:
            Path(args.save[1]).write_bytes(case.data)
            print(
                json.dumps(
                    {
                        "seed_model": case.seed_model,
                        "mutations": case.mutations,
                        "config": case.config(),
                        "resize": case.resize,
                    }
                )
            )
            return 0
        print(case.seed_model, case.mutations, case.config(), case.resize, flush=True)
        print(run_case(case, library=args.library))
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_sfuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    totals = run(
        args.n,
        args.seed,
        workdir,
        chunk=args.chunk,
        workers=args.workers,
        start=args.start,
        progress=args.progress,
        library=args.library,
        snapshot=(args.json + ".partial") if args.json else None,
    )
    totals["reasons"] = dict(sorted(totals["reasons"].items(), key=lambda kv: -kv[1]))
    totals["crash_count"] = totals["deaths"]["crash"]
    totals["finding_count"] = len(totals["findings"])
    text = json.dumps(totals, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    print(text[-20000:])
    # Out-of-memory deaths and hangs fail the run too, until --triage shows
    # each ends cleanly given memory and time.
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
