"""A fork while another thread holds one of opaque_ops' locks: does the child still get through?

A forked child has only the thread that called ``fork()``; a lock another
thread held at that moment stays held in the child, by nobody, unless the
module re-creates it there (or takes it around the fork).
:func:`fork_while_held` builds that moment with the real code path: a
thread calls it, and a trace function stops that thread for a while at the
first line it runs, inside the named function, with the lock held.  The main
thread then forks, and the child calls the API that takes the same lock.  A
child that is still running after a few seconds is killed and reported as
``"HUNG"``.

All of it runs in a fresh process (:func:`run_child`), which forks again: a
regression hangs a grandchild, which is killed, and fails one test.
"""

from __future__ import annotations

import textwrap

from tests.helpers.child_process import run_child_json

PRELUDE = """
import json, os, signal, sys, threading, time

HOLD = 1.5  # seconds the thread stays inside the locked region

def _owned(get_lock):
    lock = get_lock()
    # A reentrant lock says whether this thread holds it; a plain one whether anyone does.
    return lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked()

def hold_inside(code, get_lock, call):
    # Run call() on a new thread; return once that thread, inside `code`,
    # holds the lock get_lock() returns.  It stays there HOLD seconds.
    held = threading.Event()
    failed = []
    def lines(frame, event, arg):
        if event == "line" and not held.is_set() and _owned(get_lock):
            held.set()
            time.sleep(HOLD)
        return lines
    def tracer(frame, event, arg):
        return lines if frame.f_code is code else None
    def run():
        sys.settrace(tracer)
        try:
            call()
        except BaseException as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
        finally:
            sys.settrace(None)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not held.wait(0.05):
        if not thread.is_alive():
            raise SystemExit(f"the thread never held the lock: {failed}")
    return thread, failed

def in_fork(fn, timeout):
    # fn()'s repr in a forked child, its exception, or "HUNG" if it is still running after `timeout` s.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = "ok " + repr(fn())
        except BaseException as exc:
            out = f"{type(exc).__name__}: {exc}"
        os.write(w, out.encode("utf-8", "replace")[:60000])
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return "HUNG"
        time.sleep(0.02)
    with os.fdopen(r, "rb") as f:
        return f.read().decode("utf-8", "replace") or "no answer"
"""

RUN = """
thread, failed = hold_inside({code}, lambda: {lock}, lambda: {worker})
got = in_fork(lambda: {child}, {child_timeout})
thread.join(60)
print(json.dumps({{"child": got, "thread": failed, "thread_done": not thread.is_alive()}}))
"""


def fork_while_held(
    setup: str,
    *,
    code: str,
    lock: str,
    worker: str,
    child: str,
    args=(),
    child_timeout: float = 8,
    env=None,
) -> str:
    """What the forked child's ``child`` expression gave, or ``"HUNG"``.

    Parameters
    ----------
    setup : str
        Code run first in the fresh process (imports, objects to use).
    code : str
        An expression for the code object of the function that holds the
        lock (``module.function.__code__``); the thread stops in it.
    lock : str
        An expression for the lock itself (read again at each line, so an
        instance's lock can be named before the instance exists).
    worker : str
        An expression the thread evaluates: the real call that takes the lock.
    child : str
        An expression the forked child evaluates: a call that takes the same lock.
    args : sequence, optional
        ``sys.argv[1:]`` of the fresh process.
    child_timeout : float, optional
        Seconds the forked child gets before it counts as hung.
    env : mapping, optional
        Extra environment variables of the fresh process.

    Returns
    -------
    str
        ``"ok <repr of the result>"``, ``"<ExceptionName>: <message>"`` or ``"HUNG"``.
        The thread's own call must have finished without an exception.
    """
    body = RUN.format(code=code, lock=lock, worker=worker, child=child, child_timeout=child_timeout)
    _, out = run_child_json(PRELUDE + textwrap.dedent(setup) + body, *args, timeout=180, env=env)
    assert out["thread_done"] and not out["thread"], f"the thread holding the lock failed: {out}"
    return out["child"]


def assert_child_returns(want, setup: str, **kwargs) -> None:
    """Assert that :func:`fork_while_held`'s forked child got through, and that its ``child`` expression returned ``want``.

    Parameters
    ----------
    want : object
        What the child's expression must return, compared by its ``repr``
        (the child reports that).
    setup : str
        As for :func:`fork_while_held`.
    **kwargs
        The other arguments of :func:`fork_while_held` (``code``, ``lock``,
        ``worker``, ``child``...).
    """
    got = fork_while_held(setup, **kwargs)
    assert got == f"ok {want!r}", got
