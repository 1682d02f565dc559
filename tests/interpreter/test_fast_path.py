"""The set_tensor / get_tensor / invoke hot paths: every guard kept, results bit for bit.

The fast paths copy through cached views of the tensors (``Interpreter._slots``);
these tests hold them to the slow path's results and errors, and to the call
lock's owner rule (re-entry is refused, never a deadlock).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import add_model

# Re-entry from inside set_tensor / get_tensor: the value's __array__ or the
# index's __int__ runs while the call holds the lock.  Before the owner was
# recorded on these paths each waited for itself forever, so they run in a
# child with a timeout.  (The index was a class whose __hash__ called back,
# run by the cached views' dict; only an exact int is looked up there now, and
# an int subclass reaches int() under the lock instead.)
REENTRY = {
    "set_tensor via value.__array__": "it.set_tensor(0, Hostile(lambda: it.get_tensor(2)))",
    "set_tensor via index.__int__": "it.set_tensor(Index(lambda: it.invoke()), np.zeros((2, 3), np.float32))",
    "get_tensor via index.__int__": "it.get_tensor(Index(lambda: it.set_tensor(0, x)))",
    "get_tensor via subgraph_index.__eq__": "it.get_tensor(2, Sub(lambda: it.get_tensor(2)))",
}


def test_reentry_into_set_and_get_is_refused_not_deadlocked():
    code = """
        import json, numpy as np, opaque_ops as oo
        from tests.helpers.interpreter_models import add_model

        class Hostile:
            def __init__(self, call):
                self.call = call
            def __array__(self, dtype=None, copy=None):
                self.call()
                return np.zeros((2, 3), np.float32)

        class Index(int):
            def __new__(cls, call):
                self = super().__new__(cls, 2)
                self.call = call
                return self
            def __int__(self):
                self.call()
                return 2

        class Sub:
            def __init__(self, call):
                self.call = call
            def __eq__(self, other):
                self.call()
                return other == 0
            __hash__ = None

        x = np.ones((2, 3), np.float32)
        results = {}
        for name, stmt in json.loads(%r).items():
            it = oo.Interpreter(model_content=add_model())
            it.allocate_tensors()
            it.set_tensor(0, x)
            it.invoke()
            it.get_tensor(2)          # both tensors on the cached-view path
            try:
                exec(stmt)
                results[name] = "no error"
            except oo.ReentrantCallError as e:
                results[name] = "ReentrantCallError: " + str(e)
            except Exception as e:
                results[name] = type(e).__name__ + ": " + str(e)
            it.set_tensor(0, x)       # usable afterwards: the lock and its owner were released
            it.invoke()
            assert it.get_tensor(2).tolist() == [[1, 2, 3], [4, 5, 6]]
        print(json.dumps(results))
    """ % (json.dumps(REENTRY),)
    p = run_child(code, timeout=60)
    assert p.returncode == 0, crashed(p)
    results = json.loads(p.stdout.strip().splitlines()[-1])
    for name in REENTRY:
        msg = results[name]
        assert msg.startswith("ReentrantCallError: ") and "from inside one of its own calls" in msg, (name, msg)


def _fresh():
    it = oo.Interpreter(model_content=add_model())
    it.allocate_tensors()
    return it


def _outcome(fn):
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the class and message are what is compared
        return ("raised", type(e), str(e))
    return ("ok", None if out is None else (out.dtype.str, out.shape, out.tobytes()))


VALUES = {
    "exact": lambda: np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5,
    "fortran order": lambda: np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "strided": lambda: np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2],
    "big-endian": lambda: np.arange(6, dtype=">f4").reshape(2, 3),
    "float64": lambda: np.zeros((2, 3)),
    "flat": lambda: np.zeros(6, np.float32),
    "broadcastable": lambda: np.zeros((1, 3), np.float32),
    "extra dim": lambda: np.zeros((1, 2, 3), np.float32),
    "list": lambda: [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
    "matrix subclass": lambda: np.asmatrix(np.ones((2, 3), np.float32)),
    "nan and -0": lambda: np.array([[np.nan, -0.0, np.inf], [1e-45, -1e38, 3]], np.float32),
}


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.asmatrix
@pytest.mark.parametrize("name", sorted(VALUES))
def test_cached_view_path_matches_the_first_slow_call(name):
    """The first set/get of a tensor takes the slow path (and caches a view);
    later ones take the fast path: both give the same bytes or the same error."""
    outcomes = []
    for cached in (False, True):
        it = _fresh()
        it.set_tensor(0, np.zeros((2, 3), np.float32))
        it.invoke()
        it.get_tensor(2)
        assert set(it._slots) == {0, 2}
        if not cached:
            it._slots.clear()  # the next calls take the slow path
        value = VALUES[name]()
        set_result = _outcome(lambda: it.set_tensor(0, value))
        it.invoke()
        outcomes.append((set_result, _outcome(lambda: it.get_tensor(2)), _outcome(lambda: it.get_tensor(0))))
    assert outcomes[0] == outcomes[1]


def test_fast_paths_keep_the_closed_and_constant_guards():
    it = _fresh()
    x = np.ones((2, 3), np.float32)
    it.set_tensor(0, x)
    it.invoke()
    it.get_tensor(2)
    with pytest.raises(oo.ReadOnlyTensorError):
        it.set_tensor(1, x)  # the constant: never cached, always refused
    it.close()
    for call in (lambda: it.set_tensor(0, x), it.invoke, lambda: it.get_tensor(2)):
        with pytest.raises(oo.ClosedError):
            call()
    assert it._calls.owner is None and not it._lock.locked()
