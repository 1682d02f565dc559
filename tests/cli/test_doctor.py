"""opaque-ops doctor: the report on models it has never seen, on MediaPipe's face model, and its exit codes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from flatbuffers import flexbuffers

from opaque_ops.cli.doctor import gather, render
from opaque_ops.errors import ModelError
from opaque_ops.model import ModelBuilder
from opaque_ops.model import flex_options as encode_map
from opaque_ops.model.nodedef import decode_flex_op, read_node_def
from tests.helpers.child_process import run_cli
from tests.helpers.locations import ROOT, package_file


def cli(*args, timeout=180):
    return run_cli(*args, timeout=timeout)


# -- a protobuf wire encoder written from the spec (protobuf.dev encoding guide), independent of
# the decoder under test: varints, tags (field << 3 | wire type), length-delimited fields.


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s are ten-byte two's complement varints
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def attr(name: str, value: bytes) -> bytes:
    """NodeDef.attr (field 5) map entry {1: key, 2: AttrValue}."""
    return ld(5, ld(1, name.encode()) + ld(2, value))


DT_FLOAT, DT_COMPLEX64, DT_INT32 = 1, 8, 3


def complex_node_def() -> bytes:
    # NodeDef {name: "to_complex", op: "Complex", input: ["re", "im"],
    #          attr {T: type float32, Tout: type complex64, N: int 3, perm: list(int) [2, 0, 1]}}
    return (
        ld(1, b"to_complex")
        + ld(2, b"Complex")
        + ld(3, b"re")
        + ld(3, b"im")
        + attr("T", tag(6, 0) + varint(DT_FLOAT))
        + attr("Tout", tag(6, 0) + varint(DT_COMPLEX64))
        + attr("N", tag(3, 0) + varint(3))
        + attr("perm", ld(1, ld(3, varint(2) + varint(0) + varint(1))))
    )


def flex_options(op: str, node_def: bytes) -> bytes:
    """A Flex op's custom options as TensorFlow's converter writes them: a vector of two strings."""
    fbb = flexbuffers.Builder()
    with fbb.Vector():
        fbb.String(op)
        # The package's String() takes text; this NodeDef is ASCII (asserted), so its bytes are unchanged.
        fbb.String(node_def.decode("ascii"))
    return bytes(fbb.Finish())


SOFT = {"lambda": 0.25, "mode": "soft", "axis": -1, "enabled": True, "scales": [1, 2, 3]}
RAW12 = struct.pack("<iif", 3, -7, 0.5)


@pytest.fixture(scope="module")
def new_ops_model(tmp_path_factory) -> Path:
    b = ModelBuilder(description="three ops no runtime has")
    x = b.add_tensor("x", [1, 4], np.float32, shape_signature=[-1, 4])
    y = b.add_tensor("y", [1, 4], np.float32)
    z = b.add_tensor("z", [1, 4], np.float32)
    w = b.add_tensor("w", [1, 4], np.complex64)
    b.add_custom_op("SoftThreshold", [x], [y], options=SOFT)
    b.add_custom_op("RawParams", [y], [z], options=RAW12)
    b.add_custom_op("FlexComplex", [y, z], [w], options=flex_options("Complex", complex_node_def()))
    b.set_inputs([x])
    b.set_outputs([w])
    b.add_signature("serve", {"x": x}, {"w": w})
    path = tmp_path_factory.mktemp("doctor") / "three new ops.tflite"
    path.write_bytes(b.build())
    return path


@pytest.fixture(scope="module")
def atan_only(tmp_path_factory) -> Path:
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8], np.float32)
    y = b.add_tensor("y", [1, 8], np.float32)
    b.add_custom_op("Atan", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    path = tmp_path_factory.mktemp("doctor") / "atan.tflite"
    path.write_bytes(b.build())
    return path


def op(facts, name):
    return next(e for e in facts["operators"] if e["name"] == name)


def test_node_def_read_from_independent_encoding():
    node = read_node_def(
        complex_node_def()
        + attr("k", tag(3, 0) + varint(-2))
        + attr("f", tag(4, 5) + struct.pack("<f", 0.5))
        + attr("b", tag(5, 0) + varint(1))
        + attr("s", ld(2, b"SAME"))
        + attr("shape", ld(7, ld(2, ld(1, b"") + tag(1, 0) + varint(-1)) + ld(2, tag(1, 0) + varint(3))))
        + attr("types", ld(1, ld(6, varint(DT_INT32) + varint(DT_COMPLEX64))))
        + attr("floats", ld(1, tag(4, 5) + struct.pack("<f", 1.5) + tag(4, 5) + struct.pack("<f", -2.0)))
    )
    assert (node.name, node.op, node.inputs) == ("to_complex", "Complex", ["re", "im"])
    assert node.attrs["T"] == ("type", "float32")
    assert node.attrs["Tout"] == ("type", "complex64")
    assert node.attrs["N"] == ("int", 3)
    assert node.attrs["perm"] == ("list(int)", [2, 0, 1])
    assert node.attrs["k"] == ("int", -2)
    assert node.attrs["f"] == ("float", 0.5)
    assert node.attrs["b"] == ("bool", True)
    assert node.attrs["s"] == ("string", "SAME")
    assert node.attrs["shape"] == ("shape", [-1, 3])
    assert node.attrs["types"] == ("list(type)", ["int32", "complex64"])
    assert node.attrs["floats"] == ("list(float)", [1.5, -2.0])


@pytest.mark.parametrize(
    "bad, message",
    [
        (ld(1, b"name")[:-2], "claims 4 bytes"),
        (b"\x80" * 11, "varint"),
        (tag(2, 3) + b"x", "wire type 3"),
    ],
)
def test_malformed_node_def_is_a_model_error(bad, message):
    with pytest.raises(ModelError, match=message):
        read_node_def(bad)


def test_flex_options_decode_to_the_tf_op():
    node_def = complex_node_def()
    assert max(node_def) < 0x80  # what flex_options() above relies on
    node = decode_flex_op(flex_options("Complex", node_def))
    assert node.op == "Complex" and node.attrs["Tout"] == ("type", "complex64")
    with pytest.raises(ModelError, match="not a flexbuffer vector"):
        decode_flex_op(encode_map({"a": 1}))


def test_three_new_ops_every_value_shown(new_ops_model):
    r = cli("doctor", new_ops_model)
    assert r.returncode == 1, r.stderr
    text = r.stdout
    # The flexbuffer map: each key with its type and value.
    for line in (
        "lambda: float = 0.25",
        "mode: string = 'soft'",
        "axis: int = -1",
        "enabled: bool = true",
        "scales: vector of int = [1, 2, 3]",
    ):
        assert line in text, text
    # The 12 raw bytes: hex and both readings.
    assert "options: raw 12 bytes: 03000000 f9ffffff 0000003f" in text
    assert "as int32: [3, -7, 1056964608]" in text
    assert "as float32: [4.203895e-45, nan, 0.5]" in text
    # The Flex op: TensorFlow's op name and attribute types by name.
    assert "options: Flex op, TensorFlow op Complex (node 'to_complex'), 4 attribute(s)" in text
    assert "  Tout: complex64" in text and "  T: float32" in text
    assert "  N: int = 3" in text and "  perm: list(int) = [2, 0, 1]" in text
    # Each missing op gets the exact scaffold command.
    quoted = f"'{new_ops_model}'"
    for name in ("SoftThreshold", "RawParams", "FlexComplex"):
        assert (
            f"next step: opaque-ops scaffold {quoted} -o three_new_ops_ops --name three_new_ops_ops --op {name}"
        ) in text
    assert "--op SoftThreshold --op RawParams --op FlexComplex" in text
    assert "x  [-1, 4]  (input: resize it before allocating)" in text
    assert "serve (subgraph 0): inputs ['x'] -> outputs ['w']" in text
    assert "verdict: will NOT run as given (exit 1):" in text


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_json_is_json_when_the_model_cannot_be_read(tmp_path, damage):
    # A program reading --json got a plain-text error on stdout's place.
    path = tmp_path / "m.tflite"
    if damage == "truncated":
        path.write_bytes((ROOT / "examples" / "atan" / "atan.tflite").read_bytes()[:60])
    r = cli("doctor", path, "--json")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    facts = json.loads(r.stdout)
    assert facts["model"] == str(path) and facts["verdict"]["runs"] is False and facts["verdict"]["exit"] == 1
    assert str(path) in facts["error"] and facts["verdict"]["reasons"] == [facts["error"]]
    assert facts["error"] in r.stderr
    said = {"truncated": "is not a usable TFLite model: truncated", "missing": "does not exist"}[damage]
    assert said in facts["error"]


@pytest.mark.parametrize("command", ["doctor", "inspect"])
def test_an_unreadable_model_is_named(tmp_path, command):
    path = tmp_path / "cut.tflite"
    path.write_bytes((ROOT / "examples" / "atan" / "atan.tflite").read_bytes()[:60])
    r = cli(command, path)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert f"opaque-ops: error: {path} is not a usable TFLite model: truncated" in r.stderr, r.stderr


def test_json_is_the_same_facts_as_the_text(new_ops_model):
    r = cli("doctor", new_ops_model, "--json")
    assert r.returncode == 1, r.stderr
    facts = json.loads(r.stdout)
    assert render(facts) == cli("doctor", new_ops_model).stdout.rstrip("\n")
    soft = op(facts, "SoftThreshold")
    assert soft["provider"] == "nobody" and soft["options"][0]["kind"] == "flexbuffer map"
    assert {e["key"]: (e["type"], e["value"]) for e in soft["options"][0]["entries"]} == {
        "axis": ("int", -1),
        "enabled": ("bool", True),
        "lambda": ("float", 0.25),
        "mode": ("string", "soft"),
        "scales": ("vector of int", [1, 2, 3]),
    }
    raw = op(facts, "RawParams")["options"][0]
    assert (raw["kind"], raw["length"], raw["hex"], raw["int32"]) == ("raw", 12, RAW12.hex(), [3, -7, 1056964608])
    flex = op(facts, "FlexComplex")["options"][0]
    assert flex["tf_op"] == "Complex" and flex["attrs"]["Tout"] == {"kind": "type", "value": "complex64"}
    assert facts["dynamic"][0]["shape_signature"] == [-1, 4]
    assert facts["checks"] == {"passed": True, "refused": None}
    assert facts["verdict"]["exit"] == 1 and len(facts["verdict"]["reasons"]) == 3


def test_bundled_kernel_is_the_next_step_then_exit_0(atan_only):
    facts = gather(atan_only)
    atan = op(facts, "Atan")
    assert atan["provider"] == "nobody" and atan["next_step"] == "--ops kernels:atan"
    assert facts["verdict"]["exit"] == 1
    r = cli("doctor", atan_only, "--ops", "kernels:atan")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "custom  Atan v1  x1  a bundled kernel (kernels:atan)" in r.stdout
    assert "verdict: will run as given (exit 0)" in r.stdout


def test_exit_codes_agree_with_inspect_check(atan_only):
    for ops, want in (((), 1), (("--ops", "kernels:atan"), 0)):
        doctor = cli("doctor", atan_only, *ops)
        check = cli("inspect", atan_only, "--check", *ops)
        assert (doctor.returncode, check.returncode) == (want, want), doctor.stdout + check.stdout + check.stderr


def test_builtin_code_beyond_the_runtime_is_named(tmp_path):
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ABS", [x], [y])
    b.add_op("STABLEHLO_CASE", [y], [b.add_tensor("z", [1, 4], np.float32)])
    b.set_inputs([x])
    data = b.build()
    # Give the second op code a number no TFLite has (250): its int32 builtin_code field is the
    # only place STABLEHLO_CASE's code appears in these bytes.
    code = struct.pack("<i", 209)
    assert data.count(code) == 1
    path = tmp_path / "future.tflite"
    path.write_bytes(data.replace(code, struct.pack("<i", 250)))
    r = cli("doctor", path)
    assert r.returncode == 1
    assert "Op builtin_code out of range" not in r.stdout
    assert "builtin BUILTIN_250 v1 (code 250)  x1  NOT IN THIS RUNTIME: this runtime (TFLite " in r.stdout
    assert "does not know builtin code 250: the model was made for a newer TFLite" in r.stdout
    assert "builtin ABS v1  x1  the runtime" in r.stdout


def test_builtin_version_beyond_the_runtime_is_named(tmp_path):
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ABS", [x], [y], version=99)
    b.set_inputs([x])
    b.set_outputs([y])
    path = tmp_path / "abs99.tflite"
    path.write_bytes(b.build())
    e = op(gather(path), "ABS")
    assert e["problem"].endswith(
        "has ABS but not version 99: the model was made for a newer TFLite; "
        "use a runtime that has it (OPAQUE_OPS_TFLITE_LIB)"
    )


def test_model_checks_refusal_is_the_verdict(tmp_path):
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ABS", [x], [y])
    b.add_op("ABS", [x], [y])  # a second writer of y: the memory planner would alias them
    b.set_inputs([x])
    b.set_outputs([y])
    path = tmp_path / "two_writers.tflite"
    path.write_bytes(b.build())
    r = cli("doctor", path)
    assert r.returncode == 1
    assert "checks: REFUSED: subgraph 0 operator 1 (ABS) writes tensor 1, which operator 0 already writes" in r.stdout
    assert "xnnpack: takes up to 2 of 2 nodes" in r.stdout


def test_state_is_reported(tmp_path):
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    s = b.add_tensor("state", [1, 4], np.float32, is_variable=True)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ADD", [x, s], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    path = tmp_path / "state.tflite"
    path.write_bytes(b.build())
    facts = gather(path)
    assert facts["state"]["variable_tensors"] == [
        {"subgraph": 0, "tensor": 1, "name": "state", "shape": [1, 4], "type": "FLOAT32"}
    ]
    assert "state: 1 variable tensor(s), 0 resource variable(s)" in render(facts)


def test_mediapipe_face_model():
    path = package_file("mediapipe", "modules", "face_landmark", "face_landmark_with_attention.tflite")
    if not path.is_file():
        pytest.skip("mediapipe 0.10.14 with face_landmark_with_attention.tflite is not installed")
    facts = gather(path)
    l2t = op(facts, "Landmarks2TransformMatrix")
    assert (l2t["version"], l2t["count"], l2t["provider"]) == (2, 3, "nobody")
    assert l2t["next_step"] == "--ops kernels:landmarks_to_transform_matrix"
    entries = {e["key"]: e for e in l2t["options"][0]["entries"]}
    assert sorted(entries) == [
        "left_rotation_idx",
        "output_height",
        "output_width",
        "right_rotation_idx",
        "scale_x",
        "scale_y",
        "subset_idxs",
        "target_rotation_radians",
    ]
    assert entries["scale_x"]["type"] == "float" and entries["subset_idxs"]["type"] == "vector of int"
    assert op(facts, "TransformLandmarks")["options"] == [{"kind": "none"}]
    assert facts["bundle_all"] == "--ops kernels:mediapipe"
    assert facts["checks"]["passed"] and facts["verdict"]["exit"] == 1
    assert 0 < facts["xnnpack"]["nodes"] < facts["xnnpack"]["of"] == 712
    ok = gather(path, ["kernels:mediapipe"])
    assert ok["verdict"] == {"runs": True, "exit": 0, "reasons": []}
    assert op(ok, "Landmarks2TransformMatrix")["provider"] == "a bundled kernel"


def test_says_whether_the_fast_calls_are_in_use(new_ops_model):
    from opaque_ops.interpreter import fast_calls
    from tests.helpers.child_process import run_python

    used, where = fast_calls.status()
    text = cli("doctor", new_ops_model).stdout
    expected = f"fast calls: in use ({where})" if used else "fast calls: not in use"
    assert expected in text, text
    off = run_python("-m", "opaque_ops", "doctor", new_ops_model, env={"OPAQUE_OPS_FASTCALLS": "0"}, timeout=180)
    assert (
        "fast calls: not in use, set_tensor/invoke/get_tensor, the model reader and the planned-tensor reads "
        "run in Python (turned off by OPAQUE_OPS_FASTCALLS=0)" in off.stdout
    ), off.stdout


def one_op_model(path, op: str, options) -> Path:
    """A model of one custom op ``op`` with ``options``, [1, 4] float32 in and out, written to ``path``."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_custom_op(op, [x], [y], options=options)
    b.set_inputs([x])
    b.set_outputs([y])
    path.write_bytes(b.build())
    return path


def test_blob_options_are_decoded_not_shown_raw(tmp_path):
    # A map with blobs was once refused by the flexbuffer decoder, and the
    # report fell back to "options: raw N bytes".
    options = {"blob": b"\x00\x01", "blobs": [b"\xff", b""], "n": 3}
    path = one_op_model(tmp_path / "blob.tflite", "WithBlob", options)
    r = cli("doctor", path)
    assert r.returncode == 1, r.stderr
    assert "options: flexbuffer map, 3 entries" in r.stdout and "options: raw" not in r.stdout, r.stdout
    assert "  blob: blob = <2 bytes 0001>" in r.stdout
    assert "  blobs: vector = [<1 bytes ff>, <0 bytes >]" in r.stdout
    facts = json.loads(cli("doctor", path, "--json").stdout)
    entries = {e["key"]: e["value"] for e in op(facts, "WithBlob")["options"][0]["entries"]}
    # The same values as the flatbuffers package's own reader gets from these options' bytes.
    theirs = flexbuffers.Loads(encode_map(options))
    assert entries["blob"] == {"bytes": 2, "hex": theirs["blob"].hex()}
    assert entries["blobs"] == [{"bytes": len(v), "hex": v.hex()} for v in theirs["blobs"]]
    assert entries["n"] == theirs["n"]


def test_nan_and_infinite_options_are_shown_as_floats(tmp_path):
    options = {"a": float("nan"), "b": float("inf"), "c": [1.0, float("-inf")], "s": "nan"}
    path = one_op_model(tmp_path / "floats.tflite", "Floats", options)
    text = cli("doctor", path).stdout
    for line in ("  a: float = nan", "  b: float = inf", "  c: vector of float = [1.0, -inf]", "  s: string = 'nan'"):
        assert line in text, (line, text)


@pytest.mark.parametrize("content", [b"hello\n", b""], ids=["text", "empty"])
@pytest.mark.parametrize("command", ["doctor", "inspect", "run"])
def test_a_file_too_small_to_be_a_model_is_not_called_truncated(tmp_path, content, command):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    r = cli(command, path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    found = f"{len(content)} bytes ({content!r}) are too few for one" if content else "there are no bytes"
    assert f"opaque-ops: error: {path} is not a TFLite model: {found}" in r.stderr, r.stderr
    assert "give a .tflite file (its path, or its bytes)" in r.stderr and "truncated" not in r.stderr, r.stderr


def test_no_line_ends_in_a_space(new_ops_model, tmp_path):
    empty = tmp_path / "empty.tflite"
    empty.write_bytes(ModelBuilder().build())
    for path in (new_ops_model, empty):
        text = cli("doctor", path).stdout
        assert ("inputs:\n" in text) == (path == new_ops_model), text
        assert [line for line in text.splitlines() if line != line.rstrip()] == [], text
    assert "inputs: none\n" in text and "outputs: none\n" in text
