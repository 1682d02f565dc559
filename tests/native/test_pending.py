"""Exceptions parked by C callbacks (opaque_ops._native.pending): the frames' locals are dropped, the lines kept."""

from __future__ import annotations

import threading

import numpy as np

from opaque_ops._native import pending


def _raise_with_a_view(buf):
    view = buf[1:]  # what a Python op's frame holds: a view of tensor memory
    raise ValueError(f"bad value {view[0]}")


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def test_parked_exception_keeps_its_lines_and_drops_its_locals():
    buf = np.arange(4, dtype=np.float32)
    try:
        _raise_with_a_view(buf)
    except ValueError as exc:
        pending.stash_exception(exc)
    exc = pending.pop_pending_exception()
    assert isinstance(exc, ValueError) and str(exc) == "bad value 1.0"
    frames = list(_frames(exc.__traceback__))
    names = [f.f_code.co_name for f in frames]
    assert names[-1] == "_raise_with_a_view"
    # The raising frame no longer holds the view (or the buffer); this test's
    # own frame, still running, is left as it is.
    assert frames[-1].f_locals == {}
    assert "buf" in frames[0].f_locals
    assert pending.pop_pending_exception() is None


def test_first_parked_exception_wins_and_threads_are_apart():
    pending.stash_exception(KeyError("first"))
    pending.stash_exception(KeyError("second"))
    seen = []
    t = threading.Thread(target=lambda: seen.append(pending.pop_pending_exception()))
    t.start()
    t.join()
    assert seen == [None]
    assert str(pending.pop_pending_exception()) == "'first'"
