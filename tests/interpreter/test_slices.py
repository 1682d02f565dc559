"""A fixed unit-stride STRIDED_SLICE run as SLICE in the private model copy (opaque_ops/interpreter/slices.py).

What is proven here:

- the rewritten copy computes what the model says: against numpy's basic
  slicing (``x[begin:end]`` per axis, negative indices counting from the end
  and both ends clamped, as TFLite's strided_slice.cc resolves them), for
  float32, int8 and uint8, and on microWakeWord's okay_nabu, bit for bit
  against the same model without XNNPACK and against ai-edge-litert over a
  stream of calls (the model carries state from call to call);
- only slices whose input shape no resize can change are rewritten: a
  slice of a resizable input gives numpy's values after a resize; with the
  analysis broken on purpose, the allocation guard refuses before invoke;
- the rewrite happens where it should and nowhere else (strides, shrink
  masks, types, quantization, value-dependent shapes, a wrong stored
  shape), and reads a model as TFLite does (options under the union type
  NONE are not read, bounds and a RESHAPE's shape count only as vectors):
  the model gives what it gives without the rewrite;
- nothing else is visible: tensor details, the copy's own tensors, isolation
  and pickling give the same bytes.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.interpreter import slices
from opaque_ops.model import ModelBuilder, cache, fixed_slices, read_model
from tests.helpers.locations import package_file
from tests.helpers.schema_models import SchemaModel
from tests.helpers.variable_models import STATE, variable_model

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

RNG = np.random.default_rng(45)
QUANT = {"scale": [0.5], "zero_point": [3]}


def _model(
    x_shape,
    h_shape,
    begin,
    end,
    strides=None,
    *,
    dtype=np.float32,
    pin=True,
    out_quant=None,
    signature=False,
) -> bytes:
    """y = STRIDED_SLICE(h, begin, end, strides); h = RESHAPE(x) to a constant shape (``pin``) or x itself."""
    b = ModelBuilder()
    quant = QUANT if dtype != np.float32 else None
    x = b.add_tensor("x", x_shape, dtype, quantization=quant)
    if pin:
        h = b.add_tensor("h", h_shape, dtype, quantization=quant)
        b.add_op("RESHAPE", [x, b.add_constant("shape", np.array(h_shape, np.int32))], [h])
    else:
        h = x
    strides = strides or [1] * len(h_shape)
    out_shape = [len(range(*slice(lo, hi, s).indices(n))) for n, lo, hi, s in zip(h_shape, begin, end, strides)]
    y = b.add_tensor("y", out_shape, dtype, quantization=out_quant or quant)
    bounds = [
        b.add_constant(n, np.array(v, np.int32)) for n, v in (("begin", begin), ("end", end), ("strides", strides))
    ]
    b.add_op("STRIDED_SLICE", [h, *bounds], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature:
        b.add_signature("serving_default", {"x": x}, {"y": y})
    return b.build()


def fixed_slice_model() -> bytes:
    """x [24] -> RESHAPE to [1, 6, 4] -> STRIDED_SLICE [0:1, -3:6, 1:4]: a slice no resize can move."""
    return _model([24], [1, 6, 4], [0, -3, 1], [1, 6, 4])


def _rewrite(data: bytes):
    """``slices.rewrite_model`` on the plan ``model.fixed_slices`` finds (as the Interpreter does)."""
    return slices.rewrite_model(data, fixed_slices.plan_of(read_model(data)))


def _private_ops(it) -> list[str]:
    """Op names of the model bytes the interpreter handed to TfLiteModelCreate."""
    return [op.op_name for op in read_model(it._native._model._bytes).subgraphs[0].operators]


def _reference(x, h_shape, begin, end, strides=None):
    """numpy's slicing of x reshaped: the definition STRIDED_SLICE with unit strides and no masks follows."""
    h = x.reshape(h_shape)
    strides = strides or [1] * len(h_shape)
    return h[tuple(slice(lo, hi, s) for lo, hi, s in zip(begin, end, strides))]


def _litert(data: bytes, x: np.ndarray) -> np.ndarray:
    """ai-edge-litert's output 0 of ``data`` for input ``x`` (at the model's declared shape)."""
    ref = litert.Interpreter(model_content=data)
    ref.allocate_tensors()
    ref.set_tensor(0, x)
    ref.invoke()
    return ref.get_tensor(ref.get_output_details()[0]["index"])


def _input(shape, dtype):
    if dtype == np.float32:
        return RNG.standard_normal(shape).astype(np.float32)
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape, dtype=dtype)


def _run(data, x, **kw):
    it = oo.Interpreter(model_content=data, **kw)
    if tuple(it.get_input_details()[0]["shape"]) != x.shape:
        it.resize_tensor_input(0, list(x.shape))
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]), it


@pytest.fixture(params=[False, True], ids=["policy", "forced"])
def forced(request, monkeypatch):
    """``forced``: rewrite on every runtime and XNNPACK setting, to check the SLICE form everywhere."""
    if request.param:
        monkeypatch.setattr(slices, "worth_it", lambda *a, **k: True)
    return request.param


def _expect_rewrite(it, forced) -> bool:
    return forced or slices.worth_it(oo.runtime_info().version, it.xnnpack)


# (x shape, h shape, begin, end): negative begins and ends, ends past the axis (clamped), whole axes.
CASES = [
    ([24], [1, 6, 4], [0, -3, 1], [1, 6, 4]),
    ([2, 12], [2, 3, 4], [1, -2, -3], [2, -1, 100]),
    ([60], [3, 4, 5], [-2, 0, 2], [3, 4, 5]),
    ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [0, 1, 0, -2, 1], [1, 2, 3, 4, -1]),
    ([8], [8], [-5], [-1]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]}[{c[2]}:{c[3]}]")
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("xnnpack", [None, False], ids=["xnnpack", "no-xnnpack"])
def test_slices_match_numpy(case, dtype, xnnpack, forced):
    x_shape, h_shape, begin, end = case
    data = _model(x_shape, h_shape, begin, end, dtype=dtype)
    x = _input(x_shape, dtype)
    got, it = _run(data, x, use_xnnpack=xnnpack)
    rewritten = _expect_rewrite(it, forced)
    assert ("SLICE" in _private_ops(it)) == rewritten
    assert ("STRIDED_SLICE" in _private_ops(it)) != rewritten
    want = _reference(x, h_shape, begin, end)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _litert(data, x))


def test_a_slice_of_a_resizable_input_gives_numpys_values_after_a_resize(forced):
    """Its input's shape follows the caller's: not rewritten, so a resize moves a negative begin as it should."""
    data = _model([2, 6], [2, 6], [0, -3], [2, 100], pin=False)
    for rows in (6, 9, 4):
        x = _input([2, rows], np.float32)
        got, it = _run(data, x)
        assert "SLICE" not in _private_ops(it)
        np.testing.assert_array_equal(got, x[:, -3:])


@pytest.fixture
def own_records(monkeypatch, tmp_path):
    """Records of this test only, on disk and in memory (the plan is kept in the model's record)."""
    monkeypatch.setenv(cache.ENV_VERDICTS, str(tmp_path / "verdicts"))
    cache.clear()
    yield
    cache.clear()


def test_the_allocation_guard_refuses_a_slice_whose_input_changed(monkeypatch, own_records):
    """With the analysis broken on purpose (every slice counted as fixed), the guard stops the resize.

    Without the guard the rewritten SLICE would read rows [3, 6) of a [2, 9]
    input where the model says the last three, [6, 9): a wrong answer and
    no error.
    """
    monkeypatch.setattr(slices, "worth_it", lambda *a, **k: True)
    monkeypatch.setattr(fixed_slices, "_varying", lambda info, consts: set())
    data = _model([2, 6], [2, 6], [0, -3], [2, 100], pin=False)
    it = oo.Interpreter(model_content=data)
    assert "SLICE" in _private_ops(it)
    it.allocate_tensors()  # the declared shape: the one the SLICE was written for
    x = _input([2, 6], np.float32)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(1), x[:, -3:])
    it.resize_tensor_input(0, [2, 9])
    with pytest.raises(
        oo.ModelError, match=r"tensor 0, read by a STRIDED_SLICE .*\(resolved for shape \[2, 6\]\), has shape \[2, 9\]"
    ):
        it.allocate_tensors()
    with pytest.raises(RuntimeError):
        it.invoke()  # not planned: nothing ran on the wrong rows
    it.resize_tensor_input(0, [2, 6])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(1), x[:, -3:])
    # A signature runner's resize reaches the same allocation, and the same guard.
    runner = oo.Interpreter(model_content=_model([2, 6], [2, 6], [0, -3], [2, 100], pin=False, signature=True))
    runner = runner.get_signature_runner("serving_default")
    np.testing.assert_array_equal(runner(x=x)["y"], x[:, -3:])
    with pytest.raises(oo.ModelError, match=r"\(resolved for shape \[2, 6\]\), has shape \[2, 9\]"):
        runner(x=_input([2, 9], np.float32))


def _flag_model(**kw) -> bytes:
    return _model([24], [1, 6, 4], [0, -3, 1], [1, 6, 4], **kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(strides=[1, 2, 1]),
        dict(dtype=np.int16),
        dict(dtype=np.int8, out_quant={"scale": [0.25], "zero_point": [3]}),
    ],
    ids=["stride-2", "int16", "requantizing"],
)
def test_left_alone_where_it_is_not_a_plain_copy_of_fixed_rows(kw, monkeypatch):
    monkeypatch.setattr(slices, "worth_it", lambda *a, **k: True)
    data = _flag_model(**kw)
    assert _rewrite(data) == (data, ())


def test_left_alone_behind_a_shape_made_from_values(monkeypatch):
    """RESHAPE by a computed shape (here: the shape of the input, from SHAPE) may give any shape."""
    monkeypatch.setattr(slices, "worth_it", lambda *a, **k: True)
    b = ModelBuilder()
    x = b.add_tensor("x", [24])
    h0 = b.add_tensor("h0", [1, 6, 4])
    b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([1, 6, 4], np.int32))], [h0])
    target = b.add_tensor("target", [3], np.int32)
    b.add_op("SHAPE", [h0], [target])
    h = b.add_tensor("h", [1, 6, 4])
    b.add_op("RESHAPE", [h0, target], [h])
    y = b.add_tensor("y", [1, 3, 3])
    bounds = [
        b.add_constant(n, np.array(v, np.int32)) for n, v in (("b", [0, -3, 1]), ("e", [1, 6, 4]), ("s", [1, 1, 1]))
    ]
    b.add_op("STRIDED_SLICE", [h, *bounds], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    assert _rewrite(data) == (data, ())


def _plain(data, **kw):
    """An Interpreter of ``data`` with the rewrite switched off: the model's own STRIDED_SLICEs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(slices, "rewrite_model", lambda d, *_: (d, ()))
        return oo.Interpreter(model_content=data, **kw)


def _allocated_output(it, x):
    """Output 0 after allocating for ``x``'s shape, setting it and invoking; or the exception raised."""
    try:
        if tuple(it.get_input_details()[0]["shape"]) != x.shape:
            it.resize_tensor_input(0, list(x.shape))
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
    except oo.OpaqueOpsError as exc:
        return type(exc)
    return it.get_tensor(it.get_output_details()[0]["index"])


def _untyped_options_model(rows: int) -> bytes:
    """h = RESHAPE(x, [6, 4]); y = STRIDED_SLICE(h, [3, 0], [6, 4], [1, 1]), y stored as [rows, 4].

    The slice's operator holds a StridedSliceOptions table with begin_mask 1
    but names its union type NONE (ai-edge-litert's schema module writes
    both as given; ModelBuilder cannot).
    """
    b = SchemaModel()
    schema = b.schema
    ops = schema.BuiltinOperator
    x, h = b.tensor("x", [24]), b.tensor("h", [6, 4])
    b.op(ops.RESHAPE, [x, b.tensor("shape", [2], schema.TensorType.INT32, np.array([6, 4], np.int32))], [h])
    bounds = [
        b.tensor(n, [2], schema.TensorType.INT32, np.array(v, np.int32))
        for n, v in (("b", [3, 0]), ("e", [6, 4]), ("s", [1, 1]))
    ]
    options = schema.StridedSliceOptionsT()
    options.beginMask = 1
    y = b.tensor("y", [rows, 4])
    b.op(ops.STRIDED_SLICE, [h, *bounds], [y], schema.BuiltinOptions.NONE, options)
    return b.build([x], [y])


@pytest.mark.parametrize("rows", [6, 3], ids=["stored-as-masked", "stored-as-unmasked"])
def test_options_under_the_union_type_none_are_not_the_slices(rows, forced):
    """TFLite reads an operator's options through their union type: under NONE, begin_mask is 0.

    So the slice is rows [3, 6) whatever the stored table says (TFLite
    resizes a wrongly stored [6, 4] output).  Resolved with the stored
    table's mask, the SLICE read rows [0, 6): the shape checks refused the
    model that TFLite and ai-edge-litert run.
    """
    data = _untyped_options_model(rows)
    x = _input([24], np.float32)
    want = x.reshape(6, 4)[3:]
    np.testing.assert_array_equal(_litert(data, x), want)
    it = oo.Interpreter(model_content=data)
    # Rewritten only where the stored shape agrees with TFLite's reading (as SLICE [3, 0] + [3, 4]).
    assert ("SLICE" in _private_ops(it)) == (rows == 3 and _expect_rewrite(it, forced))
    got = _allocated_output(it, x)
    np.testing.assert_array_equal(got, want)
    assert got.tobytes() == _allocated_output(_plain(data), x).tobytes()


def test_bounds_that_are_not_vectors_are_left_alone(forced):
    """strided_slice.cc refuses begin, end and strides of rank 2 at allocation; as SLICE the model ran."""
    b = ModelBuilder()
    x = b.add_tensor("x", [24])
    h = b.add_tensor("h", [6, 4])
    b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([6, 4], np.int32))], [h])
    y = b.add_tensor("y", [3, 4])
    bounds = [b.add_constant(n, np.array([v], np.int32)) for n, v in (("b", [-3, 0]), ("e", [100, 4]), ("s", [1, 1]))]
    b.add_op("STRIDED_SLICE", [h, *bounds], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    assert _rewrite(data) == (data, ())
    x = _input([24], np.float32)
    it = oo.Interpreter(model_content=data)
    assert "SLICE" not in _private_ops(it)
    assert _allocated_output(it, x) is oo.KernelError
    assert _allocated_output(_plain(data), x) is oo.KernelError


def _last_rows(stored, shape, options=None) -> bytes:
    """x [24] -> h = RESHAPE(x, ``shape``) stored as ``stored`` -> y = STRIDED_SLICE(h, [-3, 0], [100, 4]): h's last three rows."""
    b = ModelBuilder()
    x = b.add_tensor("x", [24])
    h = b.add_tensor("h", stored)
    b.add_op("RESHAPE", [x, b.add_constant("shape", np.array(shape, np.int32))], [h], options=options)
    y = b.add_tensor("y", [3, 4])
    bounds = [b.add_constant(n, np.array(v, np.int32)) for n, v in (("b", [-3, 0]), ("e", [100, 4]), ("s", [1, 1]))]
    b.add_op("STRIDED_SLICE", [h, *bounds], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def test_a_reshape_by_a_shape_that_is_not_a_vector_takes_its_options(forced):
    """reshape.cc takes its shape input only when it is 1-D (ShapeIsVector); else the options' new_shape.

    Here that is [-1, 4]: a resize of x changes h's rows, so the slice of
    h's last three rows is not fixed.  Counted as fixed (the 2-D [[6, 4]]
    read as a shape), the SLICE was written for [6, 4] and the allocation
    guard refused the resize the model itself runs.  (With XNNPACK, 2.17's
    delegate refuses the resize either way; TFLite's own RESHAPE shows it.)
    """
    data = _last_rows([6, 4], [[6, 4]], {"new_shape": [-1, 4]})
    assert _rewrite(data) == (data, ())
    for n in (24, 32):
        x = np.arange(n, dtype=np.float32)
        it = oo.Interpreter(model_content=data, use_xnnpack=False)
        assert "SLICE" not in _private_ops(it)
        got = _allocated_output(it, x)
        np.testing.assert_array_equal(got, x.reshape(-1, 4)[-3:])
        assert got.tobytes() == _allocated_output(_plain(data, use_xnnpack=False), x).tobytes()


def test_a_wrong_stored_shape_is_not_resolved_against(forced):
    """h is stored as [3, 8] but RESHAPE makes it [6, 4]; the slice takes h's last three rows.

    Resolved against the stored shape, the SLICE read rows [0, 3): with
    XNNPACK, RESHAPE and SLICE ran in one delegate partition, whose inner
    tensor h keeps its stored shape in TFLite's view, so the allocation
    guard saw [3, 8] and passed, and invoke returned the wrong rows.  The
    model's own STRIDED_SLICE (outside the partition) reads rows [3, 6).
    """
    data = _last_rows([3, 8], [6, 4])
    x = _input([24], np.float32)
    want = x.reshape(6, 4)[3:]
    np.testing.assert_array_equal(_litert(data, x), want)
    for xnnpack in (None, False):
        it = oo.Interpreter(model_content=data, use_xnnpack=xnnpack)
        assert "SLICE" not in _private_ops(it)
        got = _allocated_output(it, x)
        np.testing.assert_array_equal(got, want)
        assert got.tobytes() == _allocated_output(_plain(data, use_xnnpack=xnnpack), x).tobytes()
    # Where the stored shape is right, the same slice is rewritten.
    assert fixed_slices.plan_of(read_model(data)) == ()
    good = _last_rows([6, 4], [6, 4])
    assert _rewrite(good)[1] == ((1, (6, 4)),)


def test_a_copy_with_both_rewrites_gives_the_models_bytes(monkeypatch):
    """A slice before and after a BATCH_MATMUL by a constant, and a third sharing the first's bounds.

    Both rewrites on (matmul.py's copy is the one slices.py rewrites): the
    slices' new tensors follow the matmul's, the caller sees the model's
    own tensors only, and every output is the bytes of the same model with
    the slice rewrite off (both have the FULLY_CONNECTED).
    """
    from opaque_ops.interpreter import matmul

    monkeypatch.setattr(slices, "worth_it", lambda *a, **k: True)
    monkeypatch.setattr(matmul, "worth_it", lambda *a, **k: True)
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 24])
    h = b.add_tensor("h", [1, 4, 6])
    b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([1, 4, 6], np.int32))], [h])
    bounds = [
        b.add_constant(n, np.array(v, np.int32)) for n, v in (("b", [0, -3, 0]), ("e", [1, 4, 6]), ("s", [1] * 3))
    ]
    s1, z = b.add_tensor("s1", [1, 3, 6]), b.add_tensor("z", [1, 3, 6])
    b.add_op("STRIDED_SLICE", [h, *bounds], [s1])
    m = b.add_tensor("m", [1, 3, 5])
    b.add_op("BATCH_MATMUL", [s1, b.add_constant("w", RNG.standard_normal((6, 5)).astype(np.float32))], [m])
    y = b.add_tensor("y", [1, 2, 5])
    b.add_op("STRIDED_SLICE", [m, b.add_constant("b2", np.array([0, 1, 0], np.int32)), *bounds[1:]], [y])
    b.add_op("STRIDED_SLICE", [h, *bounds], [z])
    b.set_inputs([x])
    b.set_outputs([y, z])
    data = b.build()
    x = _input([1, 24], np.float32)
    it = oo.Interpreter(model_content=data)
    assert _private_ops(it) == ["RESHAPE", "SLICE", "FULLY_CONNECTED", "SLICE", "SLICE"]
    plain = _plain(data)
    assert _private_ops(plain) == ["RESHAPE", "STRIDED_SLICE", "FULLY_CONNECTED", "STRIDED_SLICE", "STRIDED_SLICE"]
    assert str(it.get_tensor_details()) == str(plain.get_tensor_details())
    for each in (it, plain):
        each.allocate_tensors()
        each.set_tensor(0, x)
        each.invoke()
    got = [it.get_tensor(d["index"]).tobytes() for d in it.get_output_details()]
    assert got == [plain.get_tensor(d["index"]).tobytes() for d in plain.get_output_details()]
    assert got[1] == x.reshape(1, 4, 6)[:, -3:].tobytes()


def test_the_copy_passes_tflites_verifier_and_hides_its_tensors(forced):
    data = _flag_model(signature=True)
    new, fixed = _rewrite(data)
    assert new is not data and (len(new) - len(data)) % 64 == 0 and new.endswith(data)
    assert fixed == ((1, (1, 6, 4)),)  # h
    op = read_model(new).subgraphs[0].operators[1]
    assert op.op_name == "SLICE"
    tensors = read_model(new).subgraphs[0].tensors
    assert [np.frombuffer(tensors[t].data, np.int32).tolist() for t in op.inputs[1:]] == [[0, 3, 1], [1, 3, 3]]
    ref = litert.Interpreter(model_content=new)  # TFLite verifies the flatbuffer in TfLiteModelCreate
    ref.allocate_tensors()
    x = _input([24], np.float32)
    seen = {}
    for name in ("rewritten", "plain"):
        mp = pytest.MonkeyPatch()
        if name == "plain":
            mp.setattr(slices, "rewrite_model", lambda d, plan: (d, ()))
        try:
            got, it = _run(data, x)
        finally:
            mp.undo()
        with pytest.raises(ValueError) as err:
            it.get_tensor(len(it.get_tensor_details()))
        runner = it.get_signature_runner("serving_default")
        seen[name] = (
            str(it.get_tensor_details()),
            str(it.get_input_details()) + str(it.get_output_details()),
            got.tobytes(),
            runner(x=x)["y"].tobytes(),
            (str(err.value), len(it.get_tensor_details())),
            _private_ops(it),
        )
    a, b = seen["rewritten"], seen["plain"]
    assert a[:4] == b[:4]
    assert a[3] == _reference(x, [1, 6, 4], [0, -3, 1], [1, 6, 4]).tobytes()
    if "SLICE" in a[5]:  # the copy's own tensors (begin, size) are never handed out
        message, n = a[4]
        assert message == f"tensor index {n} is out of range: the model has {n} tensors"
    assert "SLICE" not in b[5]


# okay_nabu's tensors the stream also compares: the twelve slices' outputs
# (six written back to the variables) and the FULLY_CONNECTED's output,
# made outputs of the model (its one output, a uint8 probability, stays 0
# for most inputs).
_OKAY_NABU_SLICES = (59, 63, 68, 71, 73, 79, 82, 84, 89, 92, 94, 99)
_OKAY_NABU_LOGITS = 102


def _okay_nabu() -> bytes:
    """okay_nabu with the tensors above as extra outputs (written with ai-edge-litert's schema module)."""
    path = package_file("pymicro_wakeword", "models") / "okay_nabu.tflite"
    if not path.exists():
        pytest.skip("pymicro-wakeword (a test dependency) is not installed")
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    sg = m.subgraphs[0]
    sg.outputs = [*sg.outputs, _OKAY_NABU_LOGITS, *_OKAY_NABU_SLICES]
    m.signatureDefs = []  # (its signature names the one output; this copy is read by index)
    fb = flatbuffers.Builder(0)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def _stream(it, frames) -> list[bytes]:
    """Every output's bytes after each call."""
    i = it.get_input_details()[0]["index"]
    outs = [d["index"] for d in it.get_output_details()]
    got = []
    for f in frames:
        it.set_tensor(i, f)
        it.invoke()
        got.append(b"".join(it.get_tensor(o).tobytes() for o in outs))
    return got


def test_okay_nabu_streams_bit_for_bit_as_the_model_itself_and_as_litert(monkeypatch):
    """microWakeWord's model: twelve STRIDED_SLICEs over concatenated state, six variables carried between calls.

    Every slice's output and the logits are compared after every call: a
    slice of the wrong rows changes the state, and the state every later
    call.  The peers are the same runtime and XNNPACK on the model's own
    STRIDED_SLICEs, and ai-edge-litert.  (Without XNNPACK, TFLite's own
    int8 convolutions round otherwise than XNNPACK's, so those bytes
    differ with or without the rewrite.)
    """
    data = _okay_nabu()
    frames = [_input([1, 3, 40], np.int8) for _ in range(400)]
    ours = oo.Interpreter(model_content=data)
    ours.allocate_tensors()
    rewritten = slices.worth_it(oo.runtime_info().version, ours.xnnpack)
    assert _private_ops(ours).count("SLICE") == (12 if rewritten else 0)
    assert {d["index"] for d in ours.get_output_details()} >= set(_OKAY_NABU_SLICES)
    got = _stream(ours, frames)
    with monkeypatch.context() as mp:
        mp.setattr(slices, "rewrite_model", lambda d, plan: (d, ()))
        plain = oo.Interpreter(model_content=data)
    plain.allocate_tensors()
    assert "SLICE" not in _private_ops(plain)
    ref = litert.Interpreter(model_content=data)
    ref.allocate_tensors()
    assert got == _stream(plain, frames) == _stream(ref, frames)
    assert len(set(got)) == len(got)  # every call differs: the comparison can fail
    # The same stream from copies: pickled (re-created, fresh state) and isolated.
    copy = pickle.loads(pickle.dumps(ours))
    copy.allocate_tensors()
    assert _private_ops(copy) == _private_ops(ours)
    with oo.Interpreter(model_content=data, isolate=True) as iso:
        iso.allocate_tensors()
        assert _stream(copy, frames[:100]) == _stream(iso, frames[:100]) == got[:100]


@pytest.mark.parametrize("assign_input", [False, True], ids=["constant-state", "state-from-input"])
def test_a_variable_varies_when_an_assignment_writes_what_a_resize_changes(assign_input, forced):
    data = variable_model(assign_input=assign_input)  # z = STRIDED_SLICE(READ_VARIABLE)[:, -3:]
    new, fixed = _rewrite(data)
    assert bool(fixed) != assign_input  # read's shape is fixed only when the state is a constant
    x = _input([2, 6], np.float32)
    got, it = _run(data, x)
    assert ("SLICE" in _private_ops(it)) == (not assign_input and _expect_rewrite(it, forced))
    state = x if assign_input else STATE
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[1]["index"]), state[:, -3:])


def test_a_start_from_the_models_record_rewrites_as_a_first_start_does(own_records, monkeypatch, forced):
    """A later start takes the slices from the model's record (model.cache.fixed_slices) and reads no
    operators for them: it must hand TFLite the same private copy, and give the same bytes."""
    data = fixed_slice_model()
    x = _input([24], np.float32)
    runs = []
    for start in ("first", "later"):
        cache.clear()  # (the second creation reads the record, as a new process does)
        if start == "later":
            monkeypatch.setattr(fixed_slices, "plan_of", lambda info: pytest.fail("worked out again"))
        got, it = _run(data, x)
        runs.append((_private_ops(it), it._native._model._bytes, got.tobytes()))
    assert runs[0] == runs[1]
    assert ("SLICE" in runs[0][0]) == _expect_rewrite(it, forced)
    assert runs[0][2] == _reference(x, [1, 6, 4], [0, -3, 1], [1, 6, 4]).tobytes()
