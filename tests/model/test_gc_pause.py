"""opaque_ops.model.gc_pause: the collector off while a model is read and checked, and back as it was.

What a user can observe is the collector's state after the library returns,
whatever threads and forks did meanwhile; that is what is checked here.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from opaque_ops.model.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _tiny() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    y = b.add_tensor("y", [4], np.float32)
    b.add_op("ABS", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def test_the_collector_is_off_inside_and_back_after():
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # a check inside a read
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off():
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
    oo.Interpreter(model_content=_tiny()).allocate_tensors()
    assert not gc.isenabled()


def test_an_exception_inside_still_restores_it():
    with pytest.raises(oo.ModelError):
        oo.Interpreter(model_content=b"TFL3" + bytes(60))
    assert gc.isenabled()
    it = oo.Interpreter(model_content=_tiny())
    it.allocate_tensors()
    assert gc.isenabled()


@contextlib.contextmanager
def _another_thread_inside():
    """Another thread holds a pause section open for the ``with`` body, then ends it."""
    entered, release = threading.Event(), threading.Event()

    def other():
        with gc_paused():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    entered.wait(10)
    try:
        yield
    finally:
        release.set()
        t.join(10)


def test_overlapping_sections_in_two_threads_end_with_the_last():
    with _another_thread_inside():
        with gc_paused():
            pass
        assert not gc.isenabled(), "the other thread's section is still open"
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_fork_while_another_thread_is_inside_leaves_the_child_collecting():
    with _another_thread_inside():
        pid = os.fork()
        if pid == 0:  # the child: the other thread is gone, its section with it
            code = 0
            try:
                code |= 1 if not gc.isenabled() else 0
                with gc_paused():  # must not deadlock on a lock held at the fork
                    pass
                code |= 2 if not gc.isenabled() else 0
                it = oo.Interpreter(model_content=_tiny())
                it.allocate_tensors()
                code |= 4 if not gc.isenabled() else 0
            except BaseException:  # noqa: BLE001
                code |= 8
            sys.stdout.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert not gc.isenabled(), "the parent's other thread is still inside its section"
    assert gc.isenabled()


@pytest.mark.parametrize("collector_on", [True, False])
def test_ctrl_c_at_any_point_of_a_section_leaves_the_collector_as_it_was(collector_on):
    # A KeyboardInterrupt right after gc.disable() returned, or as the lock's
    # with ended, left the collector off for the rest of the process (the
    # section never counted, or never ended).  tests/helpers/interrupted_calls
    # raises one at each point where Python runs signal handlers, in turn.
    from opaque_ops.model import gc_pause
    from tests.helpers.interrupted_calls import interrupt_at

    def section():
        with gc_paused():
            assert not gc.isenabled()

    if not collector_on:
        gc.disable()
    n, left = 1, []
    while True:
        raised, where = interrupt_at(n, section)
        if gc.isenabled() != collector_on or gc_pause._open != 0:
            left.append(f"point {n} ({where}): collector on {gc.isenabled()}, sections open {gc_pause._open}")
            gc_pause._open = 0
            (gc.enable if collector_on else gc.disable)()
        if not raised:
            break
        n += 1
    assert n > 3 and left == [], left
    # And sections still work.
    section()
    assert gc.isenabled() == collector_on
