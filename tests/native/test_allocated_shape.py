"""NativeInterpreter.allocated_shape (the model checks' view of the planned shapes) against TensorRef.

allocated_shape reads the C API directly, without a TensorRef per tensor (it
runs for every tensor after each allocation); it must answer exactly as the
TensorRef path does: None for a dynamic tensor or a missing index, else the shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops import _native
from opaque_ops.errors import ModelError
from opaque_ops.model import ModelBuilder, read_model
from opaque_ops.model.shapes import infer_shapes
from tests.helpers.reference_models import wheel_models


def _by_tensor_ref(native, index):
    t = native.tensor(index)
    return None if t is None or t.is_dynamic() else t.shape


def _dynamic_reshape_model() -> bytes:
    # RESHAPE whose new shape is an input: its output is dynamic until invoke.
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    s = b.add_tensor("s", [2], np.int32)
    y = b.add_tensor("y", [3, 2], np.float32)
    b.add_op("RESHAPE", [x, s], [y])
    b.set_inputs([x, s])
    b.set_outputs([y])
    return b.build()


def _scalar_and_empty_model() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [], np.float32)
    c = b.add_constant("c", np.float32(2.0))
    y = b.add_tensor("y", [], np.float32)
    b.add_op("MUL", [x, c], [y])
    e = b.add_tensor("e", [0, 3], np.float32)
    f = b.add_tensor("f", [0, 3], np.float32)
    b.add_op("RELU", [e], [f])
    b.set_inputs([x, e])
    b.set_outputs([y, f])
    return b.build()


MODELS = {
    "dynamic reshape": _dynamic_reshape_model,
    "scalar and empty": _scalar_and_empty_model,
    **{p.rsplit("/", 1)[-1]: (lambda p=p: open(p, "rb").read()) for p in wheel_models()},
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("xnnpack", [False, True])
def test_allocated_shape_answers_as_the_tensor_ref_path(name, xnnpack):
    native = _native.NativeInterpreter(_native.NativeModel(MODELS[name]()), [], use_xnnpack=xnnpack)
    assert native.ok
    n = 0
    while native.tensor(n) is not None:
        n += 1
    indices = [*range(n), n, n + 7, -1]
    for phase in ("before allocation", "after allocation"):
        if phase == "after allocation":
            native.allocate()  # (a failed allocation leaves shapes to compare too)
        got = [native.allocated_shape(i) for i in indices]
        want = [_by_tensor_ref(native, i) for i in indices]
        assert got == want, phase
        assert all(s is None or all(type(d) is int for d in s) for s in got)
        # is_planned, which the checks ask where only that matters, says the same with fewer calls.
        assert [native.is_planned(i) for i in indices] == [s is not None for s in got], phase
    assert native.has_dynamic_tensor() == any(native.tensor(i).is_dynamic() for i in range(n))
    if name == "dynamic reshape":
        # Dynamic on 2.17.1 (the shape is an input); 2.23 plans it from the
        # model's declared shape.  Either way both paths agree (above).
        out = native.output_indices()[0]
        assert (native.allocated_shape(out) is None) == native.tensor(out).is_dynamic()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_infer_shapes_gives_the_same_shapes_when_it_asks_is_planned(name):
    data = MODELS[name]()
    native = _native.NativeInterpreter(_native.NativeModel(data), [], use_xnnpack=True)
    native.allocate()
    info = read_model(data)

    def shapes(*planned):
        try:
            return infer_shapes(info, native.allocated_shape, *planned)
        except ModelError as exc:  # (a model refused at its declared shapes: the same refusal)
            return type(exc), str(exc)

    assert shapes(native.is_planned) == shapes()


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("xnnpack", [False, True])
def test_planned_tensors_in_one_call_answer_as_is_planned(name, xnnpack):
    # The fast calls module's one-call answer (what an Interpreter's checks
    # use after each allocation) against the per-tensor path above, before
    # and after an allocation, and after a resize of every input.
    from opaque_ops.interpreter import fast_calls
    from tests.helpers.fast_module import required_fast_calls

    required_fast_calls()
    native = _native.NativeInterpreter(_native.NativeModel(MODELS[name]()), [], use_xnnpack=xnnpack)
    assert native.ok
    for phase in ("before allocation", "after allocation", "after a resize"):
        if phase == "after allocation":
            native.allocate()
        elif phase == "after a resize":
            for pos, idx in enumerate(native.input_indices()):
                shape = native.tensor(idx).shape
                native.resize_input(pos, [2 * d if d else 1 for d in shape] if shape else [])
            native.allocate()
        n = 0  # (an allocation may add tensors: a kernel's temporaries)
        while native.tensor(n) is not None:
            n += 1
        planned, dynamic = fast_calls.planned_tensors(native)
        assert type(planned) is frozenset
        assert planned == {i for i in range(n) if native.is_planned(i)}, phase
        assert dynamic is native.has_dynamic_tensor(), phase
        # What the checks are given in place of is_planned.
        assert [i in planned for i in (*range(n), n, n + 7, -1)] == [
            native.is_planned(i) for i in (*range(n), n, n + 7, -1)
        ]
    native.close()
    assert fast_calls.planned_tensors(native) is None  # no interpreter left to ask
