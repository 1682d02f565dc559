"""BATCH_MATMUL by a constant run as FULLY_CONNECTED in the private model copy (opaque_ops/interpreter/matmul.py).

What is proven here:

- the rewritten copy computes what the model says: against a float64 numpy
  BATCH_MATMUL written from the op's definition, and against ai-edge-litert
  running the *original* model, for several leading shapes and row counts
  (also after resize_tensor_input), and on openWakeWord's melspectrogram;
- the rewrite happens where it should (the operator in the bytes handed to
  TFLite is FULLY_CONNECTED) and nowhere else: adj flags, int8, a constant
  read by another op, a left operand that is a graph input, a model whose
  buffers sit after the flatbuffer;
- nothing else is visible: tensor details and counts, the constant's own
  values, errors for out-of-range indices and bad shapes, signature runners,
  isolation, pickling, ``experimental_preserve_all_tensors``.

Tolerance: FULLY_CONNECTED and BATCH_MATMUL add the K products of a row in
different orders.  A float32 sum of K terms is within about K * 2**-24 of
the exact sum times the sum of the terms' magnitudes, so each output is
compared with ``K * 2**-23 * (|x| @ |B|)`` (twice that bound) in float64.
"""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.interpreter import matmul
from opaque_ops.model import ModelBuilder, read_model
from tests.helpers.locations import package_file

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

K, N = 37, 11
RNG = np.random.default_rng(19)
WEIGHTS = RNG.standard_normal((K, N)).astype(np.float32)
OFFSET = RNG.standard_normal(K).astype(np.float32)


def _bmm_reference(x, b, adj_x=False, adj_y=False):
    """BATCH_MATMUL from its definition: out[..., i, j] = sum_k x[..., i, k] * b[..., k, j], broadcast batch dims."""
    x = np.asarray(x, np.float64)
    b = np.asarray(b, np.float64)
    if adj_x:
        x = np.swapaxes(x, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    batch = np.broadcast_shapes(x.shape[:-2], b.shape[:-2])
    x = np.broadcast_to(x, batch + x.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.zeros(batch + (x.shape[-2], b.shape[-1]))
    for k in range(x.shape[-1]):
        out += x[..., :, k : k + 1] * b[..., k : k + 1, :]
    return out


def _assert_product_close(got, x, b):
    want = _bmm_reference(x, b)
    bound = x.shape[-1] * 2.0**-23 * _bmm_reference(np.abs(x), np.abs(b)) + 1e-30
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


def _model(shape, *, options=None, shared=False, direct=False, signature=False) -> bytes:
    """y = (x + OFFSET) @ WEIGHTS: the BATCH_MATMUL's left operand is an intermediate, as in real models."""
    b = ModelBuilder()
    x = b.add_tensor("x", shape)
    c = b.add_constant("offset", OFFSET)
    h = b.add_tensor("h", shape)
    w = b.add_constant("weights", WEIGHTS)
    y = b.add_tensor("y", list(shape[:-1]) + [N])
    b.add_op("ADD", [x, c], [h])
    b.add_op("BATCH_MATMUL", [x if direct else h, w], [y], options)
    outs = [y]
    if shared:  # the constant is also read by another operator
        w2 = b.add_tensor("w2", [K, N])
        b.add_op("ADD", [w, w], [w2])
        outs.append(w2)
    b.set_inputs([x])
    b.set_outputs(outs)
    if signature:
        b.add_signature("serving_default", {"x": x}, {"y": y})
    return b.build()


def _private_ops(it) -> list[str]:
    """Op names of the model bytes the interpreter handed to TfLiteModelCreate."""
    return [op.op_name for op in read_model(it._native._model._bytes).subgraphs[0].operators]


def _expect_rewrite(it) -> bool:
    return matmul.worth_it(oo.runtime_info().version, it.xnnpack)


def _run(cls, data, x, **kw):
    it = cls(model_content=data, **kw)
    if tuple(it.get_input_details()[0]["shape"]) != x.shape:
        it.resize_tensor_input(it.get_input_details()[0]["index"], list(x.shape))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]), it


@pytest.fixture(params=[False, True], ids=["policy", "forced"])
def forced(request, monkeypatch):
    """``forced``: rewrite on every runtime and XNNPACK setting, to check the FULLY_CONNECTED form everywhere."""
    if request.param:
        monkeypatch.setattr(matmul, "worth_it", lambda *a, **k: True)
    return request.param


@pytest.mark.parametrize("shape", [[7, K], [1, 1, 5, K], [3, 4, 2, K], [2, 1, 3, 2, K]], ids=str)
@pytest.mark.parametrize("xnnpack", [None, False], ids=["xnnpack", "no-xnnpack"])
def test_products_match_numpy_and_litert_on_the_original_model(shape, xnnpack, forced):
    data = _model(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    got, it = _run(oo.Interpreter, data, x, use_xnnpack=xnnpack)
    assert ("FULLY_CONNECTED" in _private_ops(it)) == (forced or _expect_rewrite(it))
    assert "BATCH_MATMUL" not in _private_ops(it) or not (forced or _expect_rewrite(it))
    h = (x + OFFSET).astype(np.float32)
    _assert_product_close(got, h, WEIGHTS)
    ref, _ = _run(litert.Interpreter, data, x)
    np.testing.assert_allclose(got, ref, rtol=0, atol=float(np.max(K * 2.0**-23 * (np.abs(h) @ np.abs(WEIGHTS)))))


@pytest.mark.parametrize("xnnpack", [None, False], ids=["xnnpack", "no-xnnpack"])
def test_any_row_count_and_batch_shape_after_a_resize(xnnpack, forced):
    it = oo.Interpreter(model_content=_model([2, K]), use_xnnpack=xnnpack)
    for shape in ([1, K], [9, K], [2, 3, K], [4, 1, 2, K], [1, 1, 1, 2, K]):
        it.resize_tensor_input(0, shape)
        it.allocate_tensors()
        x = RNG.standard_normal(shape).astype(np.float32)
        it.set_tensor(0, x)
        it.invoke()
        _assert_product_close(it.get_tensor(it.get_output_details()[0]["index"]), x + OFFSET, WEIGHTS)


@pytest.mark.parametrize("xnnpack", [None, False], ids=["xnnpack", "no-xnnpack"])
def test_a_rank_one_operand_is_refused_the_same_way_rewritten_or_not(xnnpack, forced):
    it = oo.Interpreter(model_content=_model([2, K]), use_xnnpack=xnnpack)
    it.resize_tensor_input(0, [K])
    with pytest.raises(oo.ModelError, match=r"operator 1 \(BATCH_MATMUL\): operand shape \[37\] has rank 1"):
        it.allocate_tensors()


def test_melspectrogram_matches_litert_on_the_original_model(forced):
    """openWakeWord's melspectrogram: one BATCH_MATMUL [1,1,T,257] x [257,32].

    Its output is 10*log10 of mel power (then scaled), so a relative error e
    in the power is an absolute error of about 4.3 e after the log; the
    product's e is within K * 2**-24 = 1.5e-5 (K = 257), hence atol 1e-4.
    """
    path = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")
    data = path.read_bytes()
    x = RNG.uniform(-3000, 3000, (1, 1280)).astype(np.float32)
    got, it = _run(oo.Interpreter, data, x)
    rewritten = forced or _expect_rewrite(it)
    ops = _private_ops(it)
    assert (ops[16], ops.count("BATCH_MATMUL")) == (("FULLY_CONNECTED", 0) if rewritten else ("BATCH_MATMUL", 1))
    ref, _ = _run(litert.Interpreter, data, x)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
    # The constant keeps its values and its place; the new tensor is not visible.
    details = it.get_tensor_details()
    assert len(details) == len(read_model(data).subgraphs[0].tensors) == 41
    const = read_model(data).subgraphs[0].tensors[10]
    np.testing.assert_array_equal(it.get_tensor(10), np.frombuffer(const.data, np.float32).reshape(257, 32))


@pytest.mark.parametrize(
    "kw",
    [
        {"options": {"adj_x": True}},
        {"options": {"adj_y": True}},
        {"options": {"asymmetric_quantize_inputs": True}},
        {"shared": True},
        {"direct": True},
    ],
    ids=["adj_x", "adj_y", "asymmetric", "constant-shared", "operand-is-graph-input"],
)
def test_left_alone_where_it_is_not_exactly_x_times_a_private_constant(kw):
    shape = [K, K] if "options" in kw and kw["options"].get("adj_x") else [3, K]
    data = _model(shape, **kw)
    assert matmul.rewrite_model(data) is data
    opts = kw.get("options", {})
    if opts.get("adj_y"):
        return  # [3,K] x [K,N] with adj_y does not multiply; the model is only for the rewrite's refusal
    x = RNG.standard_normal(shape).astype(np.float32)
    got, it = _run(oo.Interpreter, data, x)
    assert "FULLY_CONNECTED" not in _private_ops(it)
    lhs = x if kw.get("direct") else x + OFFSET
    _assert_product_close(got, np.swapaxes(lhs, -1, -2) if opts.get("adj_x") else lhs, WEIGHTS)


def test_int8_is_left_alone():
    b = ModelBuilder()
    q = {"scale": [0.05], "zero_point": [0]}
    x = b.add_tensor("x", [2, 4], np.int8, quantization=q)
    h = b.add_tensor("h", [2, 4], np.int8, quantization=q)
    b.add_op("RELU", [x], [h])
    w = b.add_constant(
        "w", np.arange(12, dtype=np.int8).reshape(4, 3), quantization={"scale": [0.1], "zero_point": [0]}
    )
    y = b.add_tensor("y", [2, 3], np.int8, quantization={"scale": [0.05], "zero_point": [0]})
    b.add_op("BATCH_MATMUL", [h, w], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    assert matmul.rewrite_model(data) is data


def test_buffers_after_the_flatbuffer_are_left_alone():
    """A model whose Buffer tables carry offset/size (data after the flatbuffer) is not touched."""
    data = _model([3, K])
    assert matmul.rewrite_model(data) is not data
    # Add Buffer.offset (slot 1) to one buffer by hand: give it a vtable with that slot.
    info = read_model(data)
    assert info.buffers  # the model has buffers to mark
    marked = _with_buffer_offset(data)
    assert matmul.rewrite_model(marked) is marked


def _with_buffer_offset(data: bytes) -> bytes:
    """``data`` with a Buffer table appended and buffer 1 pointed at it; it has ``offset``=1, ``size``=0 set."""
    u32 = lambda p: struct.unpack_from("<I", data, p)[0]  # noqa: E731
    root = u32(0)
    vt = root - struct.unpack_from("<i", data, root)[0]
    buffers_field = root + struct.unpack_from("<H", data, vt + 4 + 2 * 4)[0]
    vec = buffers_field + u32(buffers_field)
    slot = vec + 4 + 4  # buffer 1
    out = bytearray(data) + bytes(-len(data) % 8)
    vpos = len(out)
    out += struct.pack("<5H", 10, 24, 0, 8, 16) + bytes(6)  # slots: data absent, offset at 8, size at 16
    tpos = len(out)
    out += struct.pack("<iIQQ", tpos - vpos, 0, 1, 0)
    struct.pack_into("<I", out, slot, tpos - slot)
    return bytes(out)


def test_nothing_else_is_visible(forced):
    data = _model([3, K], signature=True)
    x = RNG.standard_normal([3, K]).astype(np.float32)
    # The same model through the same code with the rewrite switched off.
    seen = {}
    for name in ("rewritten", "plain"):
        rewrite = matmul.rewrite_model if name == "rewritten" else (lambda d: d)
        mp = pytest.MonkeyPatch()
        mp.setattr(matmul, "rewrite_model", rewrite)
        try:
            it = oo.Interpreter(model_content=data)
            it.allocate_tensors()
        finally:
            mp.undo()
        it.set_tensor(0, x)
        it.invoke()
        try:  # past the model's tensors: the plain model shows whatever TFLite keeps there
            it.get_tensor(len(it.get_tensor_details()))
            error = ""
        except ValueError as exc:
            error = str(exc)
        runner = it.get_signature_runner("serving_default")
        seen[name] = {
            "ops": _private_ops(it),
            "details": str(it.get_tensor_details()),
            "io": (str(it.get_input_details()), str(it.get_output_details())),
            "weights": it.get_tensor(3).tolist(),
            "error": error,
            "signature": runner.get_input_details().keys() | runner.get_output_details().keys(),
            "runner_out": runner(x=x)["y"],
            "out": it.get_tensor(it.get_output_details()[0]["index"]),
        }
    a, b = seen["rewritten"], seen["plain"]
    assert ("FULLY_CONNECTED" in a["ops"]) == (forced or matmul.worth_it(oo.runtime_info().version, True))
    assert "FULLY_CONNECTED" not in b["ops"]
    for key in ("details", "io", "weights", "signature"):
        assert a[key] == b[key], key
    if "FULLY_CONNECTED" in a["ops"]:
        # The copy's own tensor is never handed out: indices past the model's are refused.
        assert a["error"] == "tensor index 5 is out of range: the model has 5 tensors"
    assert a["weights"] == WEIGHTS.tolist()
    _assert_product_close(a["out"], x + OFFSET, WEIGHTS)
    _assert_product_close(a["runner_out"], x + OFFSET, WEIGHTS)


def test_isolated_pickled_and_preserve_all_tensors_give_the_same_bytes():
    data = _model([4, K])
    x = RNG.standard_normal([4, K]).astype(np.float32)
    here, it = _run(oo.Interpreter, data, x)
    copy = pickle.loads(pickle.dumps(it))
    copy.allocate_tensors()
    copy.set_tensor(0, x)
    copy.invoke()
    np.testing.assert_array_equal(copy.get_tensor(copy.get_output_details()[0]["index"]), here)
    assert _private_ops(copy) == _private_ops(it)
    with oo.Interpreter(model_content=data, isolate=True) as iso:
        iso.allocate_tensors()
        iso.set_tensor(0, x)
        iso.invoke()
        np.testing.assert_array_equal(iso.get_tensor(iso.get_output_details()[0]["index"]), here)
        assert iso.get_tensor_details() is not None and len(iso.get_tensor_details()) == len(it.get_tensor_details())
    kept, kept_it = _run(oo.Interpreter, data, x, experimental_preserve_all_tensors=True)
    assert "FULLY_CONNECTED" not in _private_ops(kept_it)  # no XNNPACK there: TFLite's own BATCH_MATMUL is faster
    np.testing.assert_array_equal(kept_it.get_tensor(2), x + OFFSET)
    _assert_product_close(kept, x + OFFSET, WEIGHTS)


def test_the_copy_passes_tflites_verifier_and_keeps_alignment():
    data = _model([3, K])
    new = matmul.rewrite_model(data)
    assert new is not data and (len(new) - len(data)) % 64 == 0 and new.endswith(data)
    # TFLite verifies the flatbuffer in TfLiteModelCreate: litert builds from the copy.
    it = litert.Interpreter(model_content=new)
    it.allocate_tensors()
    ops = read_model(new).subgraphs[0].operators
    fc = ops[1]
    assert fc.op_name == "FULLY_CONNECTED" and fc.builtin_options.get("keep_num_dims") is True
    w = read_model(new).subgraphs[0].tensors[fc.inputs[1]]
    np.testing.assert_array_equal(np.frombuffer(w.data, np.float32).reshape(N, K), WEIGHTS.T)


def test_a_start_from_the_models_record_rewrites_as_a_first_start_does(tmp_path, monkeypatch, forced):
    """The rewrite is imported only for a model with a BATCH_MATMUL, which a later start learns from the
    model's record (its builtin operator codes, model.cache.builtin_codes), not from the model: a start
    whose record is on disk must hand TFLite the same private copy, and give the same bytes."""
    from opaque_ops.model import cache

    monkeypatch.setenv(cache.ENV_VERDICTS, str(tmp_path / "verdicts"))
    data = _model([3, K])
    x = np.linspace(-1, 1, 3 * K, dtype=np.float32).reshape(3, K)
    runs = []
    cache.clear()
    try:
        for _start in ("first", "later"):
            cache.clear()  # (the second creation reads the record, as a new process does)
            it = oo.Interpreter(model_content=data)
            it.allocate_tensors()
            read = "subgraphs" in it._info.__dict__  # (before details, which read the model)
            it.set_tensor(0, x)
            it.invoke()
            runs.append((read, _private_ops(it), it.get_tensor(it.get_output_details()[0]["index"]).tobytes()))
    finally:
        cache.clear()
    (read_first, ops_first, first), (read_later, ops_later, later) = runs
    assert read_first and not read_later, "the later start did not come from the record"
    assert ("FULLY_CONNECTED" in ops_first) == (forced or _expect_rewrite(it))
    assert ops_later == ops_first
    assert later == first
