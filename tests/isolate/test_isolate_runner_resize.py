"""A signature runner that resizes an isolated interpreter's inputs: the same rules and the same memory of it as in-process.

Two gaps found by a review's attack, where an isolated interpreter's runner
went past what its own ``resize_tensor_input`` is held to:

- a runner call that must resize an input ran while ``tensor()`` views of
  the shared tensors were alive, and left them silently disconnected (writes
  through the old input view no longer reached the model); in-process, and
  for ``resize_tensor_input``, the call raises ``LiveViewsError``, as the
  README says;
- the shapes a runner gave the inputs were forgotten by a pickle of the
  interpreter and by its re-creation in a forked child (which then could
  not be re-created at all).

Each test runs in-process and isolated and wants the same answer.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.interpreter_models import doubling_model


@pytest.fixture(params=[False, True], ids=["in-process", "isolated"])
def interpreter(request):
    it = oo.Interpreter(model_content=doubling_model([1, 3], [-1, 3]), isolate=request.param)
    it.allocate_tensors()
    yield it
    it.close()


def test_a_runner_that_must_resize_refuses_while_views_live(interpreter):
    it = interpreter
    run = it.get_signature_runner("s")
    view = it.tensor(0)()
    with pytest.raises(oo.LiveViewsError, match="view"):
        run(x=np.ones((4, 3), np.float32))
    with pytest.raises(oo.LiveViewsError, match="view"):
        run.resize_tensor_input("x", [5, 3])
    # Nothing moved: the view is still the model's input.
    assert it.get_input_details()[0]["shape"].tolist() == [1, 3]
    view[...] = 21.0
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(1), np.full((1, 3), 42.0, np.float32))
    # A call at the current shape moves nothing, so it runs with the view alive.
    np.testing.assert_array_equal(run(x=np.full((1, 3), 2.0, np.float32))["y"], np.full((1, 3), 4.0, np.float32))
    del view
    out = run(x=np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(out["y"], np.full((4, 3), 2.0, np.float32))


def test_shapes_a_runner_set_survive_pickle(interpreter):
    it = interpreter
    it.get_signature_runner("s")(x=np.ones((2, 3), np.float32))
    copy = pickle.loads(pickle.dumps(it))
    try:
        assert copy.get_input_details()[0]["shape"].tolist() == [2, 3]
        copy.set_tensor(0, np.full((2, 3), 3.0, np.float32))
        copy.invoke()
        np.testing.assert_array_equal(copy.get_tensor(1), np.full((2, 3), 6.0, np.float32))
    finally:
        copy.close()


def test_a_runners_resize_tensor_input_survives_pickle(interpreter):
    it = interpreter
    run = it.get_signature_runner("s")
    run.resize_tensor_input("x", [3, 3])
    run.allocate_tensors()
    copy = pickle.loads(pickle.dumps(it))
    try:
        assert copy.get_input_details()[0]["shape"].tolist() == [3, 3]
    finally:
        copy.close()


def test_shapes_a_runner_set_survive_fork(interpreter):
    it = interpreter
    it.get_signature_runner("s")(x=np.ones((2, 3), np.float32))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            it.set_tensor(0, np.full((2, 3), 3.0, np.float32))
            it.invoke()
            msg = repr(it.get_tensor(1).tolist())
        except BaseException as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {exc}"
        os.write(w, msg.encode()[:4000])
        os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            got = f.read().decode()
    finally:
        os.waitpid(pid, 0)
    assert got == repr([[6.0] * 3] * 2), got
