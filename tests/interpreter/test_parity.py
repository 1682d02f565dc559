"""tflite_runtime parity: the same situations through ai-edge-litert and opaque_ops.

ai-edge-litert (a test dependency) is the reference: every test here runs
the same model and calls through both, and compares results, details, and the
exception classes client code catches (``except RuntimeError`` /
``except ValueError``).  opaque_ops' errors must also be OpaqueOpsErrors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from ai_edge_litert import interpreter as litert

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from tests.helpers.locations import package_file

IMPLS = {"litert": litert.Interpreter, "ours": oo.Interpreter}


@pytest.fixture(scope="module")
def models():
    return {
        "mel": str(package_file("pyopen_wakeword", "models", "melspectrogram.tflite")),
        "emb": str(package_file("pyopen_wakeword", "models", "embedding_model.tflite")),
        "nabu": str(package_file("pymicro_wakeword", "models", "okay_nabu.tflite")),
    }


def rnn_model() -> bytes:
    """y_t = x_t + h_{t-1}: an RNN with identity weights keeps a running sum in a variable tensor."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 2], np.float32)
    w = b.add_constant("w", np.eye(2, dtype=np.float32))
    r = b.add_constant("r", np.eye(2, dtype=np.float32))
    bias = b.add_constant("b", np.zeros(2, np.float32))
    h = b.add_tensor("h", [1, 2], np.float32, is_variable=True)
    y = b.add_tensor("y", [1, 2], np.float32)
    b.add_op("RNN", [x, w, r, bias, h], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def gather_model() -> bytes:
    """y = params[i]: an out-of-range i fails at invoke, not before."""
    b = ModelBuilder()
    params = b.add_constant("params", np.arange(4, dtype=np.float32))
    i = b.add_tensor("i", [1], np.int32)
    y = b.add_tensor("y", [1], np.float32)
    b.add_op("GATHER", [params, i], [y])
    b.set_inputs([i])
    b.set_outputs([y])
    return b.build()


# ================================================================ variables


def test_reset_all_variables_restarts_the_state():
    data = rnn_model()
    x = np.array([[1, 2]], np.float32)
    seqs = {}
    for name, cls in IMPLS.items():
        it = cls(model_content=data)
        it.allocate_tensors()
        out = []
        for step in range(4):
            if step == 3:
                it.reset_all_variables()
            it.set_tensor(0, x)
            it.invoke()
            out.append(it.get_tensor(5).tolist())
        seqs[name] = out
    assert seqs["ours"] == seqs["litert"] == [[[1, 2]], [[2, 4]], [[3, 6]], [[1, 2]]]


def test_reset_all_variables_before_allocation_is_accepted_as_the_reference_does(models):
    # ai-edge-litert accepts it on a model whose variables live in resource
    # variables (nabu) or that has none (mel): the same here, and the state after
    # the allocation that follows is the fresh one, as there.
    for which in ("nabu", "mel"):
        for cls in IMPLS.values():
            assert cls(model_path=models[which]).reset_all_variables() is None
    # On a model with variable tensors the reference fails an internal check
    # ("tensor.data.raw != nullptr", a RuntimeError); here it is accepted too:
    # the variables have no memory yet, and allocate_tensors() resets them.
    data = rnn_model()
    x = np.array([[1, 2]], np.float32)
    it = oo.Interpreter(model_content=data)
    it.reset_all_variables()
    it.allocate_tensors()
    seq = []
    for step in range(4):
        if step == 2:
            # After a resize, before the next allocation: accepted, and the allocation resets.
            it.resize_tensor_input(0, [1, 2])
            it.allocate_tensors()
            it.invoke()  # state 3x
            it.resize_tensor_input(0, [2, 2])
            it.reset_all_variables()
            it.resize_tensor_input(0, [1, 2])
            it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
        seq.append(it.get_tensor(5).tolist())
    assert seq == [[[1, 2]], [[2, 4]], [[1, 2]], [[2, 4]]]


def test_reset_on_a_streaming_model_with_resource_variables(models):
    # microWakeWord keeps its state in resource variables (VAR_HANDLE), which
    # TfLiteInterpreterResetVariableTensors does not touch, in either
    # implementation: the outputs must agree frame by frame either way.
    rng = np.random.default_rng(5)
    frames = [rng.integers(100, 127, size=(1, 3, 40)).astype(np.int8) for _ in range(20)]
    seqs = {}
    for name, cls in IMPLS.items():
        it = cls(model_path=models["nabu"])
        it.allocate_tensors()
        i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
        out = []
        for _ in range(2):
            for f in frames:
                it.set_tensor(i, f)
                it.invoke()
                out.append(int(it.get_tensor(o).ravel()[0]))
            it.reset_all_variables()
        seqs[name] = out
    assert seqs["ours"] == seqs["litert"]
    assert any(seqs["ours"])  # the frames do move the output


# ================================================================= details


def _comparable(d):
    q = d["quantization_parameters"]
    return (
        d["name"],
        d["index"],
        d["shape"].tolist(),
        d["shape_signature"].tolist(),
        d["dtype"],
        d["quantization"],
        q["scales"].tolist(),
        q["zero_points"].tolist(),
        q["quantized_dimension"],
        q.get("block_size"),
    )


def test_tensor_details_of_every_subgraph_match(models):
    ref = litert.Interpreter(model_path=models["nabu"])
    ours = oo.Interpreter(model_path=models["nabu"])
    ref.allocate_tensors()
    ours.allocate_tensors()
    assert ours.num_subgraphs() == ref.num_subgraphs() == 2
    for sg in range(2):
        r = [_comparable(d) for d in ref.get_tensor_details(subgraph_index=sg)]
        o = [_comparable(d) for d in ours.get_tensor_details(subgraph_index=sg)]
        assert o == r, sg
    # Resource handles are numpy objects, as in the references.
    assert {d["dtype"] for d in ours.get_tensor_details(1)} >= {np.object_}
    for impl in (ref, ours):
        with pytest.raises(ValueError, match="subgraph_index is out of range"):
            impl.get_tensor_details(subgraph_index=2)


def test_sparsity_parameters_match():
    from tests.helpers import sparse_model

    data = sparse_model.build()
    ref = litert.Interpreter(model_content=data)
    ours = oo.Interpreter(model_content=data)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    for it in (ref, ours):
        it.allocate_tensors()
        it.set_tensor(2, x)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(3), x + sparse_model.DENSE)
    r, o = ref.get_tensor_details()[0]["sparsity_parameters"], ours.get_tensor_details()[0]["sparsity_parameters"]
    assert set(o) == set(r) == {"traversal_order", "dim_metadata"}
    np.testing.assert_array_equal(o["traversal_order"], r["traversal_order"])
    assert len(o["dim_metadata"]) == len(r["dim_metadata"]) == 2
    for od, rd in zip(o["dim_metadata"], r["dim_metadata"]):
        assert set(od) == set(rd)
        for k in od:
            np.testing.assert_array_equal(od[k], rd[k])
    assert o["dim_metadata"][1]["array_indices"].tolist() == sparse_model.INDICES
    assert all(d["sparsity_parameters"] == {} for d in ours.get_tensor_details()[1:])


# ================================================================== errors


def _strict(it):
    it.resize_tensor_input(0, [1, 76, 32, 2], strict=True)


SITUATIONS = {
    # name: (model, call)
    "strict resize of a fixed dimension": ("emb", _strict),
    "resize of a tensor that is not an input": ("emb", lambda it: it.resize_tensor_input(5, [1])),
    "allocate that cannot succeed": ("mel", lambda it: it.allocate_tensors()),
    "invoke failure": (
        "gather",
        lambda it: (it.allocate_tensors(), it.set_tensor(1, np.array([10], np.int32)), it.invoke()),
    ),
    "invoke before allocate_tensors": ("emb", lambda it: it.invoke()),
    "invoke after a resize, before allocate_tensors": (
        "emb",
        lambda it: (it.allocate_tensors(), it.resize_tensor_input(0, [2, 76, 32, 1]), it.invoke()),
    ),
    "get_tensor before allocate_tensors": ("emb", lambda it: it.get_tensor(0)),
    "set_tensor before allocate_tensors": ("emb", lambda it: it.set_tensor(0, np.zeros((1, 76, 32, 1), np.float32))),
    "set_tensor with the wrong dtype": (
        "emb",
        lambda it: (it.allocate_tensors(), it.set_tensor(0, np.zeros((1, 76, 32, 1)))),
    ),
    "set_tensor with the wrong shape": (
        "emb",
        lambda it: (it.allocate_tensors(), it.set_tensor(0, np.zeros((1, 76, 32, 2), np.float32))),
    ),
    "get_tensor of a tensor that does not exist": ("emb", lambda it: (it.allocate_tensors(), it.get_tensor(10**6))),
}


@pytest.mark.parametrize("situation", list(SITUATIONS))
def test_errors_are_caught_by_what_catches_the_references(situation, models):
    which, call = SITUATIONS[situation]
    data = {"gather": gather_model()}.get(which)
    raised = {}
    for name, cls in IMPLS.items():
        it = cls(model_content=data) if data is not None else cls(model_path=models[which])
        with pytest.raises(Exception) as err:
            call(it)
        raised[name] = err.value
    ref_type = type(raised["litert"])
    assert ref_type in (RuntimeError, ValueError), raised["litert"]
    assert isinstance(raised["ours"], ref_type), (situation, raised)
    assert isinstance(raised["ours"], oo.OpaqueOpsError), (situation, raised)


def test_strict_resize_message_names_plain_numbers(models):
    it = oo.Interpreter(model_path=models["emb"])
    with pytest.raises(oo.ResizeError) as err:
        _strict(it)
    msg = str(err.value)
    assert "np.int" not in msg
    assert "Attempting to resize dimension 3 of tensor 0 with value 1 to 2" in msg
    assert "[-1, 76, 32, 1]" in msg


@pytest.mark.parametrize("value", [-1, 0, 1.0, "2"])
def test_num_threads_is_validated_like_the_references(value, models):
    for cls in IMPLS.values():
        with pytest.raises(ValueError):
            cls(model_path=models["emb"], num_threads=value)


def test_num_threads_accepts_what_the_references_accept(models):
    # Accepted, and the interpreter it makes runs: the same output as the reference on one thread.
    x = np.random.default_rng(3).standard_normal((1, 76, 32, 1)).astype(np.float32)
    want = None
    for value in (1, 2, True):
        for name, cls in IMPLS.items():
            it = cls(model_path=models["emb"], num_threads=value)
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            got = it.get_tensor(it.get_output_details()[0]["index"])
            if want is None:
                want = got
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name}, num_threads={value!r}")


# ========================================================== constructor args


def test_constructor_takes_the_references_arguments_in_their_order(models):
    import inspect

    ref = list(inspect.signature(litert.Interpreter.__init__).parameters)[1:8]
    ours = list(inspect.signature(oo.Interpreter.__init__).parameters)[1:8]
    assert ours == ref


@pytest.mark.parametrize(
    "resolver",
    [oo.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES],
)
def test_op_resolver_without_default_delegates_turns_xnnpack_off(resolver, models):
    it = oo.Interpreter(model_path=models["emb"], experimental_op_resolver_type=resolver)
    assert it.xnnpack is False
    assert oo.Interpreter(model_path=models["emb"], experimental_op_resolver_type=litert.OpResolverType.AUTO).xnnpack
    with pytest.raises(ValueError, match="contradicts"):
        oo.Interpreter(model_path=models["emb"], experimental_op_resolver_type=resolver, use_xnnpack=True)


def test_op_resolver_types_that_cannot_be_honoured_say_so(models):
    with pytest.raises(oo.UnsupportedError, match="BUILTIN_REF"):
        oo.Interpreter(model_path=models["emb"], experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    for cls in IMPLS.values():
        with pytest.raises(ValueError, match="Unrecognized"):
            cls(model_path=models["emb"], experimental_op_resolver_type="FASTEST")


def _all_tensors(it):
    out = {}
    for d in it.get_tensor_details():
        try:
            out[d["index"]] = it.get_tensor(d["index"])
        except ValueError:
            pass
    return out


def test_preserve_all_tensors_keeps_every_intermediate(models):
    x = (np.random.default_rng(0).standard_normal((1, 1760)) * 1000).astype(np.float32)
    got = {}
    for name, cls, kw in (
        ("litert", litert.Interpreter, {"experimental_preserve_all_tensors": True}),
        ("ours", oo.Interpreter, {"experimental_preserve_all_tensors": True}),
        ("ours_shared_arena", oo.Interpreter, {"use_xnnpack": False}),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # litert's "for debugging only" warning
            it = cls(model_path=models["mel"], **kw)
        it.resize_tensor_input(0, [1, 1760])
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
        got[name] = _all_tensors(it)
        if name == "ours":
            assert it.xnnpack is False
    ref = got["litert"]
    assert set(got["ours"]) == set(ref) and len(ref) > 30

    def differing(vals):
        return [
            k for k in ref if vals[k].shape != ref[k].shape or not np.allclose(vals[k], ref[k], rtol=1e-3, atol=1e-3)
        ]

    assert differing(got["ours"]) == []
    assert len(differing(got["ours_shared_arena"])) > 5  # without it, the arena reuses memory


def test_preserve_all_tensors_follows_a_resize(models):
    it = oo.Interpreter(model_path=models["mel"], experimental_preserve_all_tensors=True)
    ref = litert.Interpreter(model_path=models["mel"])  # outputs need no preserving
    for n in (1760, 16000, 3200):
        x = np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)
        for impl in (it, ref):
            impl.resize_tensor_input(0, [1, n])
            impl.allocate_tensors()
            impl.set_tensor(0, x)
            impl.invoke()
        np.testing.assert_allclose(
            it.get_tensor(it.get_output_details()[0]["index"]),
            ref.get_tensor(ref.get_output_details()[0]["index"]),
            rtol=1e-4,
            atol=1e-3,
        )


def test_disable_delegate_clustering_runs_without_xnnpack(models):
    x = np.random.default_rng(1).standard_normal((1, 76, 32, 1)).astype(np.float32)
    outs = []
    for cls in IMPLS.values():
        it = cls(model_path=models["emb"], experimental_disable_delegate_clustering=True)
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        if cls is oo.Interpreter:
            assert it.xnnpack is False
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def test_get_tensor_of_another_subgraph_says_why_not(models):
    ours = oo.Interpreter(model_path=models["nabu"])
    ours.allocate_tensors()
    with pytest.raises(oo.UnsupportedError, match="signature runner"):
        ours.get_tensor(0, subgraph_index=1)
    with pytest.raises(ValueError):
        ours.get_tensor(0, subgraph_index=5)


# ============================================================ ops details


def _fc_without_bias() -> bytes:
    """y = x @ w.T by FULLY_CONNECTED with its bias omitted (input -1)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 3], np.float32)
    w = b.add_constant("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.add_tensor("y", [1, 2], np.float32)
    b.add_op("FULLY_CONNECTED", [x, w, -1], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


_OP_KEYS = ["index", "op_name", "inputs", "outputs", "operand_types", "result_types"]


@pytest.mark.parametrize("flavour", ["in-process", "isolated", "compat"])
def test_ops_details_match(models, flavour):
    # _get_ops_details() was missing (AttributeError); model explorers call it.
    # The reference is read before allocate_tensors(): after it, the node
    # list also holds the DELEGATE nodes XNNPACK added, which the C API does
    # not show (the docstring says so).
    if flavour == "compat":
        import opaque_ops.compat as compat

        make = compat._interpreter_class()
    else:
        make = lambda **kw: oo.Interpreter(isolate=flavour == "isolated", **kw)  # noqa: E731
    for model in (models["mel"], models["nabu"], _fc_without_bias()):
        kw = {"model_content": model} if isinstance(model, bytes) else {"model_path": model}
        ref = litert.Interpreter(**kw)._get_ops_details()
        ours_it = make(**kw)
        ours = ours_it._get_ops_details()
        assert len(ours) == len(ref) > 0
        for o, r in zip(ours, ref):
            assert sorted(o) == sorted(r) == sorted(_OP_KEYS)
            assert (o["index"], o["op_name"]) == (r["index"], r["op_name"])
            assert type(o["index"]) is int
            for k in ("inputs", "outputs"):
                assert o[k].dtype == r[k].dtype == np.int32
                np.testing.assert_array_equal(o[k], r[k])
            assert o["operand_types"] == r["operand_types"] and o["result_types"] == r["result_types"]
        # The same after allocation (the model's operators do not change;
        # melspectrogram needs a resize first).
        if model is not models["mel"]:
            ours_it.allocate_tensors()
        assert [d["op_name"] for d in ours_it._get_ops_details()] == [d["op_name"] for d in ref]
    fc = make(model_content=_fc_without_bias())._get_ops_details()
    assert fc[0]["op_name"] == "FULLY_CONNECTED" and fc[0]["inputs"].tolist() == [0, 1, -1]
    assert fc[0]["operand_types"] == [np.float32, np.float32]
