"""KeyboardInterrupt at every point of an interpreter call where Python could run a signal handler.

CPython runs a Python signal handler between bytecodes, and only at some of
them: where a Python function is entered, right after a call into C
returns, at a loop's backward jump.  A profile function (``sys.setprofile``)
is called at the first two ("call" and "c_return" events) and an exception
it raises rises from that very point, so raising KeyboardInterrupt from it
at the n-th event, for n = 1, 2, ... until the call finishes untouched,
puts Ctrl-C at each of those points of the call in turn.  (Backward jumps
are left out: no loop of a call holds the lock between acquiring it and
its ``try``.)  Only events in opaque_ops' own frames count: a handler's
exception in a test's or numpy's code is not the interpreter's business.

After each interrupted call the interpreter must still work, as a user
who caught the KeyboardInterrupt would use it: back to its first input
shape, ``allocate_tensors``, ``set_tensor``, ``invoke``, ``get_tensor``,
with the result equal, bit for bit, to the numpy reference.  A lock the
interrupted call left held fails that with ReentrantCallError.

Run as a script (``python -m tests.helpers.interrupted_calls``), it prints
the result of :func:`run_all` as JSON, for a child process with other
settings (the fast calls turned off).
"""

from __future__ import annotations

import gc
import json
import os
import sys

import numpy as np

import opaque_ops as oo
from tests.helpers.interpreter_models import pyop_model
from tests.helpers.reference_models import add_mul_model

_PACKAGE = os.path.dirname(oo.__file__) + os.sep


def _ours(frame) -> bool:
    return frame.f_code.co_filename.startswith(_PACKAGE)


def interrupt_at(n: int, call) -> tuple[bool, str | None]:
    """Run ``call()`` with KeyboardInterrupt raised at its n-th point; (whether it had one, where).

    An interrupt raised where Python reports and drops exceptions (a
    finalizer, ``__del__``, a generator's close()) does not reach the
    caller: ``where`` then ends in "(dropped)".  Any other exception that
    ``call()`` raises propagates.
    """
    seen = [0]
    where: list[str] = []

    def profile(frame, event, arg):
        if event in ("call", "c_return") and _ours(frame):
            seen[0] += 1
            if seen[0] == n:
                what = getattr(arg, "__qualname__", None) or getattr(arg, "__name__", "")
                code = frame.f_code
                where.append(
                    f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno} {event} {what}".strip()
                )
                raise KeyboardInterrupt

    sys.setprofile(profile)
    try:
        call()
    except KeyboardInterrupt:
        return True, where[0]
    finally:
        sys.setprofile(None)
    if where:
        return True, where[0] + " (dropped)"
    return False, None


class _Subject:
    """A model, how to make its interpreter, and its reference output."""

    def __init__(self, data, custom_ops, x, want, signature_input):
        self.data, self.custom_ops, self.x, self.want = data, custom_ops, x, want
        self.signature_input = signature_input

    def make(self):
        it = oo.Interpreter(model_content=self.data, custom_ops=self.custom_ops)
        it.allocate_tensors()
        inp = it.get_input_details()[0]
        out = it.get_output_details()[0]
        it.set_tensor(inp["index"], self.x)
        return it, inp["index"], out["index"], list(inp["shape"])

    def check(self, it, inp, out, shape) -> None:
        it.resize_tensor_input(inp, shape)
        it.allocate_tensors()
        it.set_tensor(inp, self.x)
        it.invoke()
        got = it.get_tensor(out)
        if got.tobytes() != self.want.tobytes():
            raise AssertionError(f"output {got!r}, reference {self.want!r}")


def _subjects() -> dict[str, _Subject]:
    data, offset, scale = add_mul_model(with_signature=True)
    x = np.arange(5, dtype=np.float32).reshape(1, 5) - 2.5
    add_mul = _Subject(data, [], x, (x + offset) * scale, "input_x")
    # A Python op: its glue runs while the C invoke holds the lock.
    twice = oo.python_op("Twice", invoke=lambda inputs, outputs: np.multiply(inputs[0], 2, out=outputs[0]))
    xp = np.array([1.5, -2.0, 3.25, 0.0], np.float32)
    pyop = _Subject(pyop_model(), [twice], xp, xp * 2, None)
    return {"add_mul": add_mul, "python_op": pyop}


# (subject, call name, call(it, inp, out, subject)): every public call of an in-process interpreter.
CALLS = (
    ("add_mul", "invoke", lambda it, i, o, s: it.invoke()),
    ("add_mul", "set_tensor", lambda it, i, o, s: it.set_tensor(i, s.x)),
    ("add_mul", "get_tensor", lambda it, i, o, s: it.get_tensor(o)),
    ("add_mul", "allocate_tensors", lambda it, i, o, s: it.allocate_tensors()),
    ("add_mul", "resize_tensor_input, same shape", lambda it, i, o, s: it.resize_tensor_input(i, [1, 5])),
    (
        "add_mul",
        "resize_tensor_input, allocate_tensors",
        lambda it, i, o, s: (it.resize_tensor_input(i, [3, 5]), it.allocate_tensors()),
    ),
    ("add_mul", "get_input_details", lambda it, i, o, s: it.get_input_details()),
    ("add_mul", "get_tensor_details", lambda it, i, o, s: it.get_tensor_details()),
    ("add_mul", "tensor() view", lambda it, i, o, s: it.tensor(o)().copy()),
    ("add_mul", "signature runner", lambda it, i, o, s: it.get_signature_runner()(**{s.signature_input: s.x})),
    ("python_op", "invoke", lambda it, i, o, s: it.invoke()),
    # A whole life, creation to deletion, in the call: then a new interpreter
    # must work (and the process be as before).  The C interpreter goes with
    # the last reference to the Interpreter (at the collection, for a cycle),
    # which runs the Python ops' free() callbacks: the points of
    # NativeInterpreter.close are among these.
    ("add_mul", "a whole life", lambda it, i, o, s: _whole_life(s)),
    ("python_op", "a whole life", lambda it, i, o, s: _whole_life(s)),
)


def _whole_life(subject: _Subject) -> None:
    it, inp, out, _shape = subject.make()
    it.invoke()
    it.get_tensor(out)
    it.close()
    del it
    gc.collect()


def run_all() -> dict:
    """Every call of :data:`CALLS`, interrupted at each of its points.

    Returns
    -------
    dict
        ``points``: call -> how many points it has; ``failures``: one line per
        interrupted call after which the interpreter did not work (or that
        raised something else than KeyboardInterrupt); ``sites``: where the
        interruptions landed, "function:line event callee".
    """
    subjects = _subjects()
    points: dict[str, int] = {}
    failures: list[str] = []
    sites: set[str] = set()
    before = process_state()
    for subject_name, name, call in CALLS:
        subject = subjects[subject_name]
        label = f"{subject_name}: {name}"
        n = 1
        while True:
            it, inp, out, shape = subject.make()
            # No garbage of the runs before: a collection inside this run
            # would run its finalizers at a point that varies from run to
            # run (the "close" calls interrupt those deletions on purpose).
            gc.collect()
            try:
                raised, where = interrupt_at(n, lambda: call(it, inp, out, subject))
            except Exception as exc:  # noqa: BLE001 - reported, not hidden
                failures.append(f"{label}, point {n}: the call raised {exc!r}")
                raised, where = True, None
            if where:
                sites.add(where)
            try:
                subject.check(it, inp, out, shape)
            except Exception as exc:  # noqa: BLE001 - the finding
                failures.append(f"{label}, Ctrl-C at point {n} ({where}), then: {type(exc).__name__}: {exc}"[:400])
            try:
                it.close()
            except Exception as exc:  # noqa: BLE001 - the finding
                failures.append(f"{label}, Ctrl-C at point {n} ({where}), then close(): {exc!r}"[:400])
            if not raised:
                break
            n += 1
        points[label] = n - 1
    after = process_state(before)
    if after != before:
        failures.append(f"the process's state changed: {before} before, {after} after")
    return {"points": points, "failures": failures, "sites": sorted(sites)}


def process_state(before: dict | None = None) -> dict:
    """What an interrupted call could leave changed for the whole process.

    The collector off (``model.gc_pause``), threads (a Ctrl-C watcher that
    did not end: ``_thread._count()`` counts threads started without
    ``threading`` too), an exception parked by a callback (``_native.pending``)
    that no call picked up: the next call of any interpreter on this thread
    would raise it.  With ``before``, threads get two seconds to end.
    """
    import _thread
    import time

    from opaque_ops._native import pending
    from opaque_ops.model import gc_pause

    deadline = time.monotonic() + 2.0
    while before is not None and _thread._count() > before["threads"] and time.monotonic() < deadline:
        time.sleep(0.005)  # a watcher ends when its pipe closes: give it a moment
    return {
        "collector on": gc.isenabled(),
        "gc sections open": gc_pause._open,
        "threads": _thread._count(),
        "parked exception": repr(getattr(pending._pending, "exc", None)),
    }


# The calls of an isolated interpreter: each is a request to its worker and a reply.
ISOLATED_CALLS = (
    ("invoke", lambda it, i, o, s: it.invoke()),
    ("set_tensor", lambda it, i, o, s: it.set_tensor(i, s.x)),
    ("get_tensor", lambda it, i, o, s: it.get_tensor(o)),
    ("allocate_tensors", lambda it, i, o, s: it.allocate_tensors()),
    ("get_input_details", lambda it, i, o, s: it.get_input_details()),
)


def run_isolated() -> dict:
    """:data:`ISOLATED_CALLS` on an ``isolate=True`` interpreter, interrupted at each point.

    After an interruption the interpreter either works (the reference output,
    bit for bit) or is closed, every call raising ClosedError that says its
    worker was stopped: an exchange cut short in the microseconds around the
    wait for the reply cannot be resumed (process.WorkerProcess._cut_short).
    One interpreter serves until it is closed, then a new one is made.

    Returns
    -------
    dict
        ``points``: call -> points; ``stopped``: call -> how many of them
        stopped the worker; ``failures``: anything else (a wrong output, another
        error).  A stale reply read by the next call shows as a wrong output,
        or as a hang (the caller's timeout).
    """
    subject = _subjects()["add_mul"]

    def make():
        it = oo.Interpreter(model_content=subject.data, isolate=True)
        it.allocate_tensors()
        return it

    it = make()
    inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    points: dict[str, int] = {}
    stopped: dict[str, int] = {}
    failures: list[str] = []
    for name, call in ISOLATED_CALLS:
        n, stops = 1, 0
        while True:
            it.set_tensor(inp, subject.x)
            try:
                raised, where = interrupt_at(n, lambda: call(it, inp, out, subject))
            except oo.ClosedError as exc:  # the worker was stopped by this very interruption's handling
                raised, where = True, f"(raised {exc})"
            try:
                subject.check(it, inp, out, [1, 5])
            except oo.ClosedError as exc:
                if "stopped" not in str(exc):
                    failures.append(f"{name}, Ctrl-C at point {n} ({where}), then: {exc}")
                stops += 1
                it.close()
                it = make()
            except Exception as exc:  # noqa: BLE001 - the finding
                failures.append(f"{name}, Ctrl-C at point {n} ({where}), then: {type(exc).__name__}: {exc}"[:400])
                it.close()
                it = make()
            if not raised:
                break
            n += 1
        points[name], stopped[name] = n - 1, stops
    it.close()
    return {"points": points, "stopped": stopped, "failures": failures}


if __name__ == "__main__":
    print(json.dumps(run_isolated() if sys.argv[1:] == ["isolated"] else run_all()))
