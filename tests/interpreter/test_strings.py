"""String tensors (opaque_ops.interpreter.strings): set and read through TFLite's string buffer, as ai-edge-litert.

ai-edge-litert is the reference for what set_tensor takes and what
get_tensor and the details give; the buffer's layout is checked against a
worked example of string_util.h's format, and against TFLite's own reader
(GATHER) and writer (TfLiteOpaqueTensorWriteStrings in a kernel).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from ai_edge_litert import interpreter as litert

import opaque_ops as oo
from opaque_ops.interpreter import strings
from tests.helpers import string_models as sm


def _expected(value) -> list:
    """The definition: each element as bytes, str encoded UTF-8, a bytes_ array's elements as numpy gives them."""
    flat = np.asarray(value).ravel().tolist()
    return [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in flat]


def _round_trip(cls, shape, value):
    it = cls(model_content=sm.reshape_model(shape))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], value)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]), it.get_tensor(it.get_input_details()[0]["index"])


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert [type(x) for x in a.ravel()] == [type(x) for x in b.ravel()]
    assert a.ravel().tolist() == b.ravel().tolist()


@pytest.mark.parametrize("name", list(sm.VALUES))
def test_strings_round_trip_as_in_litert(name):
    """Before: set_tensor refused every string tensor ("cannot be set from numpy")."""
    shape, value = sm.VALUES[name]
    out, back = _round_trip(oo.Interpreter, shape, value)
    # (litert takes numpy arrays only; opaque_ops also what np.asarray takes, as for numbers.)
    ref_out, ref_back = _round_trip(litert.Interpreter, shape, np.asarray(value))
    _same(out, ref_out)
    _same(back, ref_back)
    assert out.dtype == object and out.shape == shape
    assert out.ravel().tolist() == _expected(value)


def test_tflite_reads_the_strings_set_tensor_writes():
    """GATHER parses the input buffer with TFLite's own reader: a wrong layout would give other strings."""
    value = np.array(["a", "\u00e9", b"z\x00"], dtype=object)
    got = {}
    for cls in (oo.Interpreter, litert.Interpreter):
        it = cls(model_content=sm.gather_model())
        it.allocate_tensors()
        it.set_tensor(0, value)
        it.invoke()
        got[cls] = it.get_tensor(it.get_output_details()[0]["index"])
    expected = [_expected(value)[i] for i in sm.GATHER_INDICES]
    assert got[oo.Interpreter].tolist() == expected
    _same(got[oo.Interpreter], got[litert.Interpreter])


def test_details_report_bytes_as_litert():
    """Before: np.object_ (litert: np.bytes_), so np.array(values, dtype=details["dtype"]) gave what set_tensor refused."""
    model = sm.reshape_model([3])
    ours, ref = oo.Interpreter(model_content=model), litert.Interpreter(model_content=model)
    for it in (ours, ref):
        it.allocate_tensors()
    for get in ("get_input_details", "get_output_details", "get_tensor_details"):
        assert [d["dtype"] for d in getattr(ours, get)()] == [d["dtype"] for d in getattr(ref, get)()]
    assert ours.get_input_details()[0]["dtype"] is np.bytes_
    runner, ref_runner = ours.get_signature_runner(), ref.get_signature_runner()
    for get in ("get_input_details", "get_output_details"):
        assert {k: d["dtype"] for k, d in getattr(runner, get)().items()} == {
            k: d["dtype"] for k, d in getattr(ref_runner, get)().items()
        }
    # The port idiom: the input built from the reported dtype is taken.
    d = ours.get_input_details()[0]
    ours.set_tensor(d["index"], np.array(["a", "b", "c"], dtype=d["dtype"]))
    ours.invoke()
    assert ours.get_tensor(ours.get_output_details()[0]["index"]).tolist() == [b"a", b"b", b"c"]


def test_signature_runner_takes_and_returns_strings_as_litert():
    value = np.array([b"q\x00", "\u00e9"], dtype=object)
    ours = oo.Interpreter(model_content=sm.reshape_model([2])).get_signature_runner()(words=value)
    ref = litert.Interpreter(model_content=sm.reshape_model([2])).get_signature_runner()(words=value)
    assert list(ours) == list(ref) == ["same"]
    _same(ours["same"], ref["same"])


def test_buffer_layout_is_string_util_s():
    """Worked example: count 3, offsets from the buffer's start (header 4 * (3 + 2) = 20), then the bytes."""
    buf = struct.pack("=5i", 3, 20, 22, 22, 25) + b"abxyz"
    assert strings.encode_strings([b"ab", b"", b"xyz"]) == buf
    assert strings.decode_strings(buf) == [b"ab", b"", b"xyz"]
    assert strings.encode_strings([]) == struct.pack("=2i", 0, 8)


@pytest.fixture(scope="module")
def broken_strings():
    return oo.compile_ops(sm.BROKEN_STRINGS)


def _broken(lib, how: int) -> np.ndarray:
    it = oo.Interpreter(model_content=sm.broken_strings_model(), custom_ops=[lib])
    it.allocate_tensors()
    it.set_tensor(0, np.array([how], np.int32))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_strings_a_kernel_writes_with_tflite_s_writer_are_read(broken_strings):
    _same(_broken(broken_strings, 0), np.array([b"ab", b"c"], dtype=object))


@pytest.mark.parametrize(
    "how, says",
    [
        (1, "count says 1000 strings, whose offsets alone do not fit its 19 bytes"),
        (2, "count says -1 strings"),
        (3, r"offsets \(from 16 to 1048576\) do not run forward"),
        (4, "do not run forward"),
        (5, r"offsets \(from 0 to 19\)"),
        (6, r"holds 1 string\(s\) but its shape \[2\] has 2 elements"),
    ],
)
def test_a_broken_string_buffer_is_a_model_error_never_a_read_outside_it(broken_strings, how, says):
    with pytest.raises(oo.ModelError, match=says):
        _broken(broken_strings, how)


def test_unset_string_tensor_says_how_to_fill_it():
    """litert crashes here (SIGSEGV reading the NULL buffer); before, this said "no numpy value"."""
    it = oo.Interpreter(model_content=sm.reshape_model([3]))
    it.allocate_tensors()
    for index in (0, it.get_output_details()[0]["index"]):
        with pytest.raises(oo.NotAllocatedError, match=r"holds no strings yet: set it with set_tensor\(\)"):
            it.get_tensor(index)


@pytest.mark.parametrize(
    "value, error, says",
    [
        (np.ones(3, np.float32), oo.InvalidInputError, r"takes bytes or str values, received an array of float32"),
        (np.array([b"a", 2, "c"], dtype=object), oo.InvalidInputError, r"element at \(1,\) is a int"),
        (np.array(["a", "\ud800", "c"], dtype=object), oo.InvalidInputError, "cannot be encoded UTF-8"),
        (np.array([b"a", b"b"]), oo.InvalidInputError, r"expected shape \(3,\), received \(2,\)"),
    ],
    ids=["float32", "an int element", "a lone surrogate", "shape"],
)
def test_values_that_are_not_the_tensor_s_strings_are_refused_with_the_fix(value, error, says):
    it = oo.Interpreter(model_content=sm.reshape_model([3]))
    it.allocate_tensors()
    with pytest.raises(error, match=says):
        it.set_tensor(0, value)


# invoke() while a string input holds no strings: TFLite 2.17's GATHER reads
# the input's empty buffer and dies (SIGSEGV, the whole process); RESHAPE
# copies it to an output that cannot be read.  Run in a child, so that a crash
# fails the test rather than ending the run.
UNSET = """
import sys
import opaque_ops as oo
from tests.helpers import string_models as sm

model = sm.gather_model() if sys.argv[1] == "gather" else sm.reshape_model((2,))
it = oo.Interpreter(model_content=model, isolate=sys.argv[2] == "isolated")
it.allocate_tensors()
for step in ("unset", "set", "resized"):
    if step == "set":
        it.set_tensor(0, [b"a", b"bc", b""][: it.get_input_details()[0]["shape"][0]])
    elif step == "resized":
        it.resize_tensor_input(0, [5])
        it.allocate_tensors()
    try:
        it.invoke()
    except oo.OpaqueOpsError as exc:
        print(step, type(exc).__name__, exc, flush=True)
    else:
        print(step, "ran", it.get_tensor(it.get_output_details()[0]["index"]).tolist(), flush=True)
"""


@pytest.mark.parametrize("isolated", ["in-process", "isolated"])
@pytest.mark.parametrize("model", ["gather", "reshape"])
def test_invoke_refuses_a_string_input_that_holds_no_strings(model, isolated):
    from tests.helpers.child_process import crashed, run_child

    p = run_child(UNSET, model, isolated, timeout=120)
    assert p.returncode == 0, crashed(p) + p.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    assert lines["unset"].startswith("NotAllocatedError invoke(): string input 0 ('x') holds no strings yet"), p.stdout
    x = [b"a", b"bc", b""]
    want = [x[i] for i in sm.GATHER_INDICES] if model == "gather" else x[:2]
    assert lines["set"] == f"ran {want}", p.stdout
    if model == "reshape":
        # Resized after it was set: its 2 strings no longer fill [5].
        assert lines["resized"].startswith("InvalidInputError invoke(): string input 0 ('x') holds 2 string(s)"), (
            p.stdout
        )
