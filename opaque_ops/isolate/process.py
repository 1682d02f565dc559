"""The parent's side of one worker process: starting it, calling it, and noticing its death.

A worker is started with ``subprocess`` (fork+exec in C, or vfork: no Python
code runs between them), so starting one from a threaded parent is safe,
and it is a fresh interpreter that inherits nothing but the file
descriptors it is given.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path

from ..errors import ClosedError, MemoryLimitError, OpaqueOpsError, RuntimeTimeoutError
from ..interpreter.call_lock import get_ident, reentered_error, try_take
from . import crash as _crash
from . import protocol as P
from . import stderr_drain as _stderr

# How long a worker may take to start (import numpy, load the runtime, maybe
# compile its helper once).
STARTUP_TIMEOUT = 120.0
# After a timeout, how long a cancelled invoke may take to stop between nodes.
CANCEL_GRACE = 1.0
# How often a waiting parent looks at the worker when nothing wakes it.
_POLL = 0.5


class _Liveness:
    """Shared between the process object and the stderr pump (which must not keep the former alive)."""

    __slots__ = ("dead", "rep")

    def __init__(self, rep):
        self.dead = False
        self.rep = rep

    def on_exit(self) -> None:
        self.dead = True
        rep = self.rep
        if rep is not None:  # None once the process object has let go of its control page
            rep.post()  # wake a parent waiting for a reply that will never come


class Reply:
    """What a call returned: ``value`` (or ``error``), the new tensor layout if it changed,
    and ``interrupt``: an exception to raise once the layout is applied (Ctrl-C, a cancelled timeout)."""

    __slots__ = ("value", "error", "layout", "interrupt", "segments")

    def __init__(self, value=None, error=None, layout=None, segments=None):
        self.value = value
        self.error = error
        self.layout = layout
        self.interrupt = None
        self.segments = segments


def _reap(proc, lifeline_w_box) -> None:
    """Finalizer: close the lifeline (the worker exits by itself), then make sure and reap."""
    fd = lifeline_w_box[0]
    lifeline_w_box[0] = -1
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()
    except Exception:  # pragma: no cover - interpreter shutdown
        pass


class WorkerProcess:
    """One worker process.

    Parameters
    ----------
    memory_limit : int or None
        Bytes the hosted model may use beyond the worker's own baseline.
    library : path-like or None
        The ``libtensorflowlite_c`` the worker loads (the parent's lookup order otherwise).
    forward_stderr : bool
        Copy the worker's stderr to this process's fd 2 as it comes.
    """

    def __init__(self, *, memory_limit=None, library=None, forward_stderr=True):
        from .._native.isolation_helper import SharedSemaphore

        self.memory_limit = memory_limit
        self.lock = threading.RLock()
        # The thread waiting for the worker's reply in call() or invoke()
        # (None when none is).  The wait runs Python signal handlers, in the
        # waiting thread; one that called into an interpreter of this worker
        # would take the RLock again and send its own command, or touch the
        # shared tensors, while the worker is still on the first (see
        # refuse_reentry).
        self.waiting = None
        # True from the moment a request starts on its way to the worker to
        # the moment its reply is read in full (see _turn); and, once an
        # exception cut an exchange short, what it was (the worker is then
        # stopped: _check says why).
        self.owed = False
        self.cut_short: str | None = None
        ctrl_fd = os.memfd_create("opaque_ops-isolate-control", os.MFD_CLOEXEC)
        os.ftruncate(ctrl_fd, P.PAGE)
        self.control = mmap.mmap(ctrl_fd, P.PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.words = memoryview(self.control).cast("i")
        self.req = SharedSemaphore(self.control, P.REQ_SEM, create=True)
        self.rep = SharedSemaphore(self.control, P.REP_SEM, create=True)
        self.live = _Liveness(self.rep)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        life_r, life_w = os.pipe()
        err_r, err_w = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "opaque_ops.isolate.server",
            "--socket",
            str(child_sock.fileno()),
            "--control",
            str(ctrl_fd),
            "--lifeline",
            str(life_r),
            "--parent",
            str(os.getpid()),
        ]
        try:
            self.proc = _spawner.popen(
                cmd,
                pass_fds=(child_sock.fileno(), ctrl_fd, life_r),
                stdin=subprocess.DEVNULL,
                stderr=err_w,
                env=_worker_env(),
                close_fds=True,
                # Its own session: the terminal's Ctrl-C reaches only the parent,
                # which turns it into a cancel.
                start_new_session=True,
            )
        except BaseException:
            for fd in (err_r, life_w):
                os.close(fd)
            parent_sock.close()
            raise
        finally:
            child_sock.close()
            for fd in (ctrl_fd, life_r, err_w):
                os.close(fd)
        self.pid = self.proc.pid
        self.forked_from = None
        _procs.add(self)
        self.sock = parent_sock
        self._lifeline = [life_w]
        self.tail = _stderr.watch(err_r, self.proc.pid, forward_stderr, self.live.on_exit)
        self._finalizer = weakref.finalize(self, _reap, self.proc, self._lifeline)
        self.channel = P.Channel(parent_sock, copy_in=True, ids=iter(range(1, 1 << 62)), budget=self._outbox_budget)
        self.closed = False
        self.cancels = 0
        self.info = {}
        try:
            reply = self.call(
                "init",
                {
                    "sys_path": list(sys.path),
                    "library": os.fspath(library) if library is not None else None,
                    "memory_limit": memory_limit,
                },
                stage="start",
                timeout=STARTUP_TIMEOUT,
            )
        except OpaqueOpsError as exc:
            self.kill()
            if memory_limit is None or isinstance(exc, RuntimeTimeoutError):
                raise
            raise OpaqueOpsError(f"the isolated worker could not start{_cap_text(memory_limit)}: {exc}") from exc
        except BaseException:
            self.kill()
            raise
        if reply.error is not None:
            self.kill()
            what = str(reply.error) or type(reply.error).__name__
            raise OpaqueOpsError(
                f"the isolated worker could not start{_cap_text(memory_limit)}: {what}"
            ) from reply.error
        self.info = reply.value

    def _outbox_budget(self, size: int, growth: int) -> None:
        """Arrays sent to the worker land in its memory too: not more than its memory_limit."""
        if self.memory_limit is not None and size > self.memory_limit:
            raise MemoryError(
                f"{size} bytes of arrays cannot be sent to an isolated worker with "
                f"memory_limit={self.memory_limit} bytes"
            )

    # -------------------------------------------------------------- state
    @property
    def alive(self) -> bool:
        return not self.closed and not self.live.dead and self.proc.poll() is None

    def _check(self) -> None:
        if self.forked_from is not None:
            raise ClosedError(
                f"this isolated worker belongs to process {self.forked_from}, from which this process was "
                "forked; it cannot be used here (a new worker is started for each interpreter)"
            )
        if self.closed:
            if self.cut_short is not None:
                raise ClosedError(
                    f"the isolated worker was stopped: an exception (Ctrl-C) interrupted {self.cut_short} "
                    "between its request and its reply, and the next call would have read that reply as its "
                    "own. Create a new Interpreter"
                )
            raise ClosedError("the isolated worker is closed")

    # -------------------------------------------------------------- calls
    def refuse_reentry(self, what: str) -> None:
        """Raise ReentrantCallError if this thread is waiting for this worker (a signal handler of it).

        Called under :attr:`lock` by every way to the worker and its shared
        tensors: an in-process interpreter refuses such a call as well.
        """
        if self.waiting == get_ident():
            raise reentered_error(what)

    @contextmanager
    def _turn(self, what: str):
        """This thread's turn with the worker: one request and its reply, under :attr:`lock`.

        Refuses this thread's own signal handler (:meth:`refuse_reentry`),
        then marks the thread as :attr:`waiting` until the reply is in.  The
        call marks :attr:`owed` while the exchange is under way; an exception
        that leaves it marked stops the worker (:meth:`_cut_short`).
        """
        me = get_ident()  # (before: a call between the mark and the try is a point where Ctrl-C lands)
        with self.lock:
            self.refuse_reentry(what)
            self._check()
            self.waiting = me
            try:
                yield
            finally:
                self.waiting = None
                if self.owed:
                    self._cut_short(what)

    def _cut_short(self, what: str) -> None:
        """An exception left an exchange half done: stop the worker, or the next call reads a stale reply.

        The one exception a wait is ready for, Ctrl-C while the worker runs
        (see :meth:`_wait`), keeps the exchange whole: it cancels the invoke
        and still reads the reply.  Anywhere else (a KeyboardInterrupt that
        lands in the microseconds around the wait, while sending, or while
        reading) part of a request may sit in the channel or a reply may be
        on its way; there is no telling which, so the worker goes.
        """
        self.owed = False
        if not self.closed:
            self.cut_short = what
            self.kill()

    def call(self, cmd: str, args: dict, *, stage: str, timeout=None) -> Reply:
        """Send one command and wait for its reply."""
        with self._turn(f"{args.get('name', cmd)}()"):
            message = self.channel.pack((cmd, args))  # (its errors leave the worker in step: nothing was sent)
            self.owed = True
            try:
                self.channel.transmit(message)
            except (BrokenPipeError, ConnectionError):
                raise self._died(stage) from None
            self.words[P.OP // 4] = P.OP_MESSAGE
            self.req.post()
            interrupt = self._wait(stage, timeout)
            reply = self._read_reply()
            self.owed = False
            reply.interrupt = interrupt
            return reply

    def invoke(self, timeout=None) -> Reply | None:
        """The fast path: None if the invoke succeeded and nothing else changed."""
        with self._turn("invoke()"):
            self.words[P.OP // 4] = P.OP_INVOKE
            self.owed = True
            self.req.post()
            interrupt = self._wait("invoke", timeout)
            if interrupt is None and self.words[P.STATUS // 4] == P.ST_OK:
                self.owed = False
                return None
            reply = self._read_reply() if self.words[P.STATUS // 4] == P.ST_MESSAGE else Reply()
            self.owed = False
            reply.interrupt = interrupt
            return reply

    def _read_reply(self) -> Reply:
        try:
            (body, layout) = self.channel.recv()
        except P.PeerGone:
            raise self._died("call") from None
        except (OSError, RuntimeError):
            if self.closed:  # close() from another thread, just as the reply came
                raise ClosedError("the isolated interpreter was closed while a call was running") from None
            raise
        if body[0] == "ok":
            return Reply(value=body[1], layout=layout, segments=self.channel.shared)
        error = P.unpack_exception(body[1])
        if self.memory_limit is not None and isinstance(error, MemoryError) and not isinstance(error, OpaqueOpsError):
            # Past the cap set on this worker, the likeliest cause: say so (issue 17 item 12).
            capped = MemoryLimitError(
                f"{error or 'MemoryError'} (in the isolated worker, whose memory_limit is {self.memory_limit} "
                "bytes: raise memory_limit, or use less memory)"
            )
            capped.__cause__ = error.__cause__
            error = capped
        return Reply(error=error, layout=layout, segments=self.channel.shared)

    def _wait(self, stage: str, timeout):
        """Wait for the reply.  Returns None, or an exception for the caller to raise after
        reading the reply (KeyboardInterrupt, a timeout that was cancelled in time).

        Without a timeout the wait is untimed: the stderr thread posts the
        reply semaphore when the worker dies, so a crash still wakes it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        interrupt = None
        while True:
            try:
                if deadline is None:
                    got = self.rep.wait()
                else:
                    now = time.monotonic()
                    if now >= deadline:
                        if interrupt is not None:  # Ctrl-C, then no reply within the grace period
                            self._where()
                            self.kill()
                            raise interrupt
                        return self._timed_out(stage, timeout)
                    got = self.rep.acquire(min(_POLL, deadline - now))
                if got:
                    if self.live.dead:
                        raise self._died(stage)
                    return interrupt
                if self.live.dead or self.proc.poll() is not None:
                    raise self._died(stage)
            except KeyboardInterrupt as exc:
                if interrupt is not None:
                    # A second Ctrl-C: stop waiting; the reply would arrive out of step.
                    self.kill()
                    raise
                # Ctrl-C: cancel the worker's invoke and give it a moment to
                # stop; the reply is still read so the channel stays in step.
                interrupt = exc
                self.cancel()
                deadline = time.monotonic() + CANCEL_GRACE

    def _timed_out(self, stage: str, timeout) -> BaseException:
        if stage == "invoke":
            acks = self.cancels + 1
            self.cancel()
            if self.rep.acquire(CANCEL_GRACE):
                if self.live.dead:
                    raise self._died(stage)
                # Stopped between nodes: the interpreter stays usable.
                self._await_cancel(acks)
                return RuntimeTimeoutError(
                    f"invoke() ran longer than its timeout of {timeout} s and was cancelled; "
                    "the interpreter is still usable",
                    stage=stage,
                    timeout=timeout,
                    killed=False,
                )
        self._where()
        stderr = self.tail.text()
        self.kill()
        raise RuntimeTimeoutError(
            f"{stage} ran longer than its timeout of {timeout} s"
            + (" and did not stop when cancelled" if stage == "invoke" else "")
            + "; the isolated worker was killed and the interpreter is closed."
            + _where_text(stderr),
            stage=stage,
            timeout=timeout,
            killed=True,
            stderr=stderr,
        )

    def _await_cancel(self, acks: int) -> None:
        """Wait until the worker has acted on every cancel sent, so a late one cannot
        hit the next invoke."""
        end = time.monotonic() + CANCEL_GRACE
        while self.words[P.CANCEL_ACK // 4] < acks and time.monotonic() < end:
            time.sleep(0.0005)

    def _where(self) -> None:
        """Ask the worker to print where it is (C backtrace and Python stacks) before it is killed."""
        if not self.info.get("where") or self.proc.poll() is not None:
            return
        mark = len(self.tail.text())
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            return
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            new = self.tail.text()[mark:]
            if "end of C backtrace" in new or (not self.info.get("helper") and "File " in new):
                time.sleep(0.05)
                return
            time.sleep(0.01)

    def cancel(self) -> None:
        """Ask the worker to cancel a running invoke (TfLiteInterpreterCancel)."""
        fd = self._lifeline[0]
        if fd >= 0:
            try:
                os.write(fd, b"c")
                self.cancels += 1
            except OSError:
                pass

    # ------------------------------------------------------------ endings
    def _died(self, stage: str):
        """The worker is gone: reap it and build the error."""
        try:
            rc = self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            # The crash handler posted but the process is stuck dying.
            self.proc.kill()
            rc = self.proc.wait()
        self.tail.eof.wait(2.0)
        closing = self.closed
        record = P.read_crash_record(self.control)
        self._shutdown()
        if closing:
            return ClosedError("the isolated interpreter was closed while a call was running")
        return _crash.crash_error(
            returncode=rc,
            record=record,
            stage=stage,
            stderr=self.tail.text(),
            pid=self.pid,
            helper_path=self.info.get("helper_path"),
            helper_missing=self.info.get("helper_missing"),
            memory_limit=self.memory_limit,
        )

    def kill(self) -> None:
        """Kill the worker now and reap it."""
        if self.forked_from is not None:
            return  # the parent's worker: never ours to kill
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        self._shutdown()

    def close(self) -> None:
        """End the worker: it exits as soon as its lifeline closes, even mid-invoke."""
        self.closed = True
        self._finalizer()  # closes the lifeline and reaps (killing it if it lingers)
        self._shutdown()

    def _shutdown(self) -> None:
        self.closed = True
        self._finalizer()
        try:
            self.sock.close()
        except OSError:  # pragma: no cover
            pass
        # Let go of the shared segments now: an exception that keeps this
        # object alive (through its traceback) must not keep them too.
        # tensor() views keep their own mapping.
        self.channel.release()
        # And of the control page (its mmap holds a descriptor): an exception
        # kept by the caller holds this object through its traceback.  Not
        # under a call another thread is still making: it lets go when done.
        if try_take(self.lock):
            try:
                self.words.release()
                self.control = _DEAD_PAGE
                self.words = memoryview(_DEAD_PAGE).cast("i")
                self.req = self.rep = self.live.rep = None
            finally:
                self.lock.release()

    def _forsake(self, parent: int) -> None:
        """In a forked child: this is the parent's worker.  Let go of this process's copies of
        its descriptors (the lifeline above all: the worker must end with the parent alone),
        and never signal or reap it."""
        self.forked_from = parent
        self.closed = True
        self._finalizer.detach()
        fd, self._lifeline[0] = self._lifeline[0], -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:  # pragma: no cover
            pass
        self.lock = threading.RLock()


# What a shut-down process's control page reads as (no crash record, stage "idle").
_DEAD_PAGE = bytearray(P.PAGE)
_procs: weakref.WeakSet = weakref.WeakSet()


class _Spawner:
    """Starts every worker from one long-lived thread.

    The worker asks the kernel to kill it when its parent dies
    (``PR_SET_PDEATHSIG``, see the server), and Linux counts the *thread*
    that forked it as the parent: a worker started from a short-lived thread
    would be killed when that thread ends.  This thread lives as long as the
    process.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._queue = None
        self._thread = None

    def popen(self, cmd, **kwargs) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                import queue

                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._loop, args=(self._queue,), name="opaque_ops-spawner", daemon=True
                )
                self._thread.start()
            q = self._queue
        done = threading.Event()
        box: list = []
        q.put((cmd, kwargs, box, done))
        try:
            done.wait()
        except BaseException:  # Ctrl-C while it starts: end what was started
            done.wait()
            if box and isinstance(box[0], subprocess.Popen):
                box[0].kill()
                box[0].wait()
            raise
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @staticmethod
    def _loop(q) -> None:
        while True:
            cmd, kwargs, box, done = q.get()
            try:
                box.append(subprocess.Popen(cmd, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                box.append(exc)
            done.set()
            del cmd, kwargs, box, done


_spawner = _Spawner()


def _after_fork_in_child() -> None:
    global _spawner
    _spawner = _Spawner()  # its thread (and maybe its lock's holder) did not come along
    parent = os.getppid()
    for p in list(_procs):
        p._forsake(parent)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _cap_text(memory_limit) -> str:
    if memory_limit is None:
        return ""
    return (
        f" under its memory_limit={memory_limit} bytes ({memory_limit / 2**20:.3g} MiB), which may be too "
        "small for the worker itself (Python, numpy and the runtime); raise memory_limit"
    )


def _worker_env() -> dict:
    """The parent's environment, plus the directory this opaque_ops comes from when it is not
    a site directory (a source checkout): the worker must run this very code."""
    import site

    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])
    sites = {str(Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if pkg_parent not in sites:
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _where_text(stderr: str) -> str:
    """Where a worker was when it was killed: the C backtrace it printed on SIGUSR1, or the Python stack."""
    frames = _crash.extract_backtrace(stderr, last=True)
    if frames:
        return "\nWhere it was (C backtrace, most recent call first):\n" + "\n".join(
            f"  #{i} {f}" for i, f in enumerate(frames[:30])
        )
    lines = stderr.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Current thread") or lines[i].startswith("Thread "):
            return "\nWhere it was (Python):\n" + "\n".join("  " + l for l in lines[i : i + 20])
    return ""
