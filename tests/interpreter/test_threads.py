"""Threads: interpreters on four threads give correct results, and Python ops under threads do not deadlock."""

from __future__ import annotations

import threading

import numpy as np

import opaque_ops as oo
from tests.helpers.atan import OFFSET
from tests.helpers.atan import reference as atan_ref


def test_four_threads_four_interpreters_give_correct_results(atan_model_bytes, guide_atan):
    errors, done = [], []

    def work(k):
        try:
            it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
            it.allocate_tensors()
            rng = np.random.default_rng(k)
            for _ in range(300):
                x = rng.uniform(-50, 50, 5).astype(np.float32)
                it.set_tensor(0, x)
                it.invoke()
                got = it.get_tensor(it.get_output_details()[0]["index"])
                if not np.allclose(got, atan_ref(x), rtol=1e-6, atol=0):
                    errors.append((k, x, got))
            done.append(k)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((k, exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(done) == [0, 1, 2, 3] and errors == []


def test_python_ops_under_threads_do_not_deadlock(atan_model_bytes):
    # Python ops take the GIL inside invoke (which runs without it); several
    # threads doing that at once, on separate and on shared interpreters,
    # must all finish.
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    shared = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[op])
    shared.allocate_tensors()
    errors, done = [], []

    def work(k):
        try:
            own = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[op])
            own.allocate_tensors()
            x = np.full(5, k, np.float32)
            for _ in range(200):
                for it in (own, shared):
                    it.set_tensor(0, x)
                    it.invoke()
                own_out = own.get_tensor(own.get_output_details()[0]["index"])
                if not np.allclose(own_out, np.arctan(x + OFFSET), rtol=1e-6):
                    errors.append(own_out)
            done.append(k)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish in 60 s"
    assert sorted(done) == [0, 1, 2, 3] and errors == []
