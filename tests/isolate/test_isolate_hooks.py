"""The isolated worker's instrumentation hooks in by composition (_native.NativeHooks).

The hooks given to one Interpreter see that interpreter and its signature
runners, and no other: nothing is patched at class level.
"""

from __future__ import annotations

import numpy as np

import opaque_ops as oo
from opaque_ops import _native
from opaque_ops.interpreter.core import Interpreter
from opaque_ops.model import ModelBuilder


def _double(inputs, outputs):
    np.multiply(inputs[0], 2, out=outputs[0])


def _model() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32, shape_signature=[-1])
    y = b.add_tensor("y", [4], np.float32, shape_signature=[-1])
    b.add_custom_op("Double", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("run", {"x": x}, {"y": y})
    return b.build()


class Recording(_native.NativeHooks):
    def __init__(self):
        self.calls = []

    def creating(self):
        self.calls.append("creating")

    def created(self, native):
        self.calls.append("created")
        inner = native.allocate

        def allocate():
            self.calls.append("allocate")
            return inner()

        native.allocate = allocate

    def runner_created(self, runner):
        self.calls.append("runner")
        inner = runner.allocate

        def allocate():
            self.calls.append("runner allocate")
            return inner()

        runner.allocate = allocate


def test_hooks_wrap_one_interpreter_and_its_runners_and_nothing_else():
    op = oo.python_op("Double", invoke=_double)
    hooks = Recording()
    hooked = Interpreter._with_hooks(hooks, model_content=_model(), custom_ops=[op])
    assert type(hooked) is Interpreter and hooked._native.hooks is hooks
    plain = oo.Interpreter(model_content=_model(), custom_ops=[op])
    assert hooks.calls == ["creating", "created"]
    # The wrappers are on the hooked instance only; the class and the other interpreter keep their methods.
    assert "allocate" in vars(hooked._native)
    assert "allocate" not in vars(plain._native) and plain._native.hooks is None
    assert _native.NativeInterpreter.allocate.__qualname__ == "NativeInterpreter.allocate"
    hooked.allocate_tensors()
    plain.allocate_tensors()
    assert hooks.calls == ["creating", "created", "allocate"]
    # Every path that allocates goes through the hooked function: a signature runner's too.
    out = hooked.get_signature_runner("run")(x=np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(out["y"], [0, 2, 4])
    assert hooks.calls[3:] == ["runner", "runner allocate"]
    plain.get_signature_runner("run")(x=np.arange(3, dtype=np.float32))
    assert hooks.calls[3:] == ["runner", "runner allocate"]


def test_the_worker_stages_run_op_and_hosted_interpreters_through_hooks_not_patches():
    # The hosted interpreter's stages and shared buffers work (a round trip
    # through shared memory), and the worker module no longer patches classes.
    import opaque_ops.isolate.server as server

    assert not hasattr(server, "_instrument")
    op = oo.python_op("Double", invoke=_double)
    with oo.Interpreter(model_content=_model(), custom_ops=[op], isolate=True) as it:
        it.allocate_tensors()
        it.set_tensor(0, np.arange(4, dtype=np.float32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), [0, 2, 4, 6])
        assert it._slots  # inputs and outputs live in shared buffers (HostedHooks' Placement)
    (y,) = oo.testing.run_op([op], "Double", inputs=[np.ones(3, np.float32)], isolate=True)
    np.testing.assert_array_equal(y, [2, 2, 2])


def test_released_hooks_leave_no_cycle_and_a_reused_worker_keeps_its_threads():
    """The worker's hooks wrap the native interpreter's methods with closures over them: left in
    place, each closed interpreter's native objects, and TFLite's threads with them, lived until the
    next garbage collection (a worker that had run 60 interpreters held 28 threads; in-process, 3).
    Released on close, the native interpreter is freed at once, without a collection, and a worker
    reused for 40 interpreters keeps the thread count it had after the first."""
    import gc
    import os
    import weakref

    from opaque_ops.isolate import Worker, run_model
    from opaque_ops.isolate.instrumentation import StageHooks
    from tests.helpers.locations import package_file

    class Server:  # what the hooks use of the worker's server
        words = [0] * 4096

        def stage(self, _name):
            pass

    # The mechanism, in this process: no collection runs, the native object still goes.
    gc.disable()
    try:
        hooks = StageHooks(Server())
        it = Interpreter._with_hooks(hooks, model_content=_model(), custom_ops=[oo.python_op("Double", _double)])
        it.allocate_tensors()
        native = weakref.ref(it._native)
        it.close()
        del it
        assert native() is not None, "the wrappers hold it (the cycle this test is about)"
        hooks.release()
        assert native() is None
    finally:
        gc.enable()

    # The effect, in a reused worker: TFLite's threads do not pile up.
    data = package_file("mediapipe", "modules", "face_detection", "face_detection_short_range.tflite").read_bytes()
    with Worker(forward_stderr=False) as w:
        counts = []
        for i in range(40):
            assert run_model(data, worker=w, use_xnnpack=bool(i % 2), seed=i).status == "ok"
            counts.append(len(os.listdir(f"/proc/{w.pid}/task")))
        assert max(counts) <= counts[0] + 2, counts
