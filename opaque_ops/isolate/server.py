"""The isolated worker: ``python -m opaque_ops.isolate.server`` (started by the parent, never by hand).

It hosts one in-process :class:`opaque_ops.Interpreter` at a time and serves
the parent's requests (see :mod:`opaque_ops.isolate.protocol`).  Everything
that can crash -- the TFLite runtime, the model, the kernels -- runs here.

What it sets up before anything else:

- ``faulthandler`` on fd 2 (the Python side of a crash) and, if it can be
  compiled, ``c/src/isolate_helper.c`` (the C backtrace, the crash record,
  and a profiler that knows which node is running);
- a *lifeline* thread: it reads a pipe whose write end only the parent
  holds.  A byte means "cancel the running invoke"; end of file means the
  parent is gone (closed, killed, crashed), and the worker exits at once,
  even in the middle of an invoke, so no worker outlives its parent;
- the memory cap (``RLIMIT_DATA``), once its own baseline is loaded.

This module is the request loop; the rest of the worker has one module per concern:
:mod:`.budget` (the memory cap), :mod:`.placement` (the hosted interpreter's
tensors in shared memory), :mod:`.instrumentation` (the hooks on the native
interpreters it creates: stages, placement) and :mod:`.shipping` (ops and
delegates re-created by their own ``__reduce__``).
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import mmap
import os
import pickle
import signal
import socket
import sys
import threading

from . import protocol as P
from .budget import Budget
from .instrumentation import HostedHooks, StageHooks
from .placement import NoMemory, Placement
from .shipping import unpack_delegates, unpack_ops


class Server:
    """The worker's side: serves one parent over a control page, a socket and a lifeline."""

    def __init__(self, sock: socket.socket, control: mmap.mmap, lifeline: int):
        from .._native.isolation_helper import SharedSemaphore

        self.sock = sock
        self.control = control
        self.words = memoryview(control).cast("i")
        self.req = SharedSemaphore(control, P.REQ_SEM)
        self.rep = SharedSemaphore(control, P.REP_SEM)
        self.ids = itertools.count(1)
        self.budget = Budget()
        self.channel = P.Channel(
            sock, copy_in=False, ids=self.ids, budget=lambda size, growth: self.budget.charge(growth)
        )
        self.it = None
        self.placement: Placement | None = None
        # The hosted interpreter's hooks, released when it is closed (see StageHooks).
        self.hooks: HostedHooks | None = None
        self.runners: dict = {}
        self.helper = None
        self.layout_sent = None
        self.main_loaded = None
        self._lifeline = lifeline
        self._cancel_lock = threading.Lock()
        threading.Thread(target=self._watch_lifeline, name="opaque_ops-lifeline", daemon=True).start()

    # ----------------------------------------------------------- lifeline
    def _watch_lifeline(self) -> None:
        # SIGUSR1 (the parent's "where are you?") must reach the main thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        while True:
            try:
                data = os.read(self._lifeline, 64)
            except InterruptedError:  # pragma: no cover
                continue
            except OSError:
                data = b""
            if not data:
                # The parent is gone: nobody will read a result.  Leave now,
                # without running Python's shutdown (which would wait for the
                # main thread, possibly stuck in a kernel).
                os._exit(0)
            for _ in range(data.count(b"c")):
                with self._cancel_lock:
                    it = self.it
                    if it is not None:
                        try:
                            it.cancel()
                        except Exception:  # noqa: BLE001 - a closed interpreter: nothing to cancel
                            pass
                self.words[P.CANCEL_ACK // 4] += 1

    def stage(self, name: str) -> None:
        self.words[P.STAGE // 4] = P.STAGE_CODES[name]

    # --------------------------------------------------------------- loop
    def serve(self) -> None:
        """Answer requests until the parent goes (the lifeline thread then ends the process)."""
        words = self.words
        while True:
            while not self.req.wait():
                pass
            op = words[P.OP // 4]
            if op == P.OP_INVOKE:
                words[P.STATUS // 4] = self.fast_invoke()
            else:
                self.message()
                words[P.STATUS // 4] = P.ST_MESSAGE
            self.rep.post()

    def fast_invoke(self) -> int:
        self.stage("invoke")
        try:
            self.it.invoke()
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            self.reply(("err", P.pack_exception(exc)))
            return P.ST_MESSAGE
        p = self.placement
        if p.moved() or (p.watch and p.reshaped()):
            p.changed = True
        if p.changed:
            layout = self.current_layout()
            if layout is not None:
                self._send(("ok", None), layout)
                return P.ST_MESSAGE
        return P.ST_OK

    def message(self) -> None:
        try:
            cmd, args = self.channel.recv()
        except Exception as exc:  # noqa: BLE001 - e.g. a python_op that cannot be unpickled here
            self.reply(("err", P.pack_exception(exc)))
            return
        try:
            result = getattr(self, "do_" + cmd)(**args)
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            self.reply(("err", P.pack_exception(exc)))
            return
        self.reply(("ok", result))

    def reply(self, body) -> None:
        """Send ``body`` plus the tensor layout if it changed (and any new segments)."""
        self._send(body, self.current_layout())

    def _send(self, body, layout) -> None:
        share = self.placement.take_new_segments() if self.placement is not None else []
        try:
            self.channel.send((body, layout), share=share)
        except MemoryError as exc:  # the outbox would pass memory_limit
            self.channel.send((("err", P.pack_exception(exc)), layout), share=share)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result: say so instead
            self.channel.send(
                (
                    (
                        "err",
                        P.pack_exception(
                            TypeError(f"the result cannot cross the process boundary: {type(exc).__name__}: {exc}")
                        ),
                    ),
                    layout,
                ),
                share=share,
            )

    def current_layout(self):
        """The tensor layout, if it changed since it was last sent (else None)."""
        p = self.placement
        if p is None or not p.changed:
            return None
        p.changed = False
        layout = {
            "tensors": p.layout(),
            "allocated": self._planned(),
            "segments": sorted({seg.id for seg, _o, _c in p.slots.values()}),
            "shapes": [shape for _t, shape in p.watch],
        }
        if layout == self.layout_sent:
            return None
        self.layout_sent = layout
        return layout

    def _planned(self) -> bool:
        """Whether the hosted interpreter's subgraph 0 is planned, as it decides it itself.

        The parent uses the shared buffers directly (its set/get fast path)
        only then; otherwise every call comes here and gets the in-process
        answer.  The shared buffers' existence says nothing about it: they
        are custom allocations, which keep their memory across a resize.
        """
        it = self.it
        native = getattr(it, "_native", None)
        return native is not None and bool(it._is_planned(0, native))

    # ----------------------------------------------------------- commands
    def do_init(self, sys_path, library, memory_limit):
        sys.path[:] = list(dict.fromkeys(sys_path + sys.path))
        from .. import _native

        self.stage("start")
        _native.load_runtime(library)
        # SIGUSR1 from the parent (before it kills a worker that overran its
        # timeout): the helper's C backtrace (installed next, it calls this), then the Python stacks.
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
        self.helper, why = _load_helper()
        if self.helper is not None:
            self.helper.install(self.control, P.CRASH, self.rep)
            if _profiler_supported(_native.load_runtime().version):
                self.helper.attach_profiler()
        self.budget.set(memory_limit)
        return {
            "pid": os.getpid(),
            "runtime": _native.load_runtime().version,
            "where": True,
            "helper": self.helper is not None,
            "helper_missing": why,
            "helper_path": self.helper.path if self.helper is not None else None,
        }

    def do_create(self, kwargs, ops, main_path, name=None):
        from ..interpreter.core import Interpreter

        self.close_interpreter()
        self._main(main_path)
        if self.helper is not None:
            self.helper.reset_profiler()
        # Re-created by their classes' own restore, as any pickle would (see .shipping).
        custom_ops = unpack_ops(ops)
        if kwargs.get("experimental_delegates"):
            kwargs["experimental_delegates"] = unpack_delegates(kwargs["experimental_delegates"])
        self.stage("create")
        # The hosted interpreter's native objects get the shared buffers and
        # the crash record's stages; no other interpreter is touched.
        hooks = HostedHooks(self)
        try:
            it = Interpreter._with_hooks(hooks, **kwargs, custom_ops=custom_ops or None)
        except Exception as exc:
            hooks.release()
            # The parent read the model file and sent its bytes: name the file, as in-process.
            if name is not None and exc.args and isinstance(exc.args[0], str):
                exc.args = (exc.args[0].replace("<model_content>", name),) + exc.args[1:]
            raise
        if name is not None:
            it._model_name = name
        self.placement = hooks.placement
        self.hooks = hooks
        with self._cancel_lock:
            self.it = it
        self.layout_sent = None
        return {
            "api": _public_api(it),
            "attrs": _public_values(it),
            "stateful": _stateful(it),
            # What the model file says, which an in-process interpreter answers after close() too.
            "model": {"signature_list": it.get_signature_list(), "num_subgraphs": it.num_subgraphs()},
        }

    def do_call(self, name, args, kwargs, stage="call"):
        self.stage(stage)
        if name == "set_tensor" and len(args) > 1 and isinstance(args[1], P.ObjectArray):
            args = (args[0], args[1].array(), *args[2:])
        try:
            if name in ("set_tensor", "get_tensor") and self._stale(args, kwargs):
                return self._unplanned(name, args)
            return getattr(self.it, name)(*args, **kwargs)
        finally:
            self._recheck()

    def _stale(self, args, kwargs) -> bool:
        """A shared tensor of an interpreter resized but not yet allocated.

        In-process, TFLite drops a resized arena tensor's memory, so
        set_tensor/get_tensor on it refuse until allocate_tensors(); a custom
        allocation keeps its (now possibly too small) buffer.  The same
        refusal is given here, which also keeps a write inside the buffer.
        """
        p = self.placement
        return (
            p is not None
            and bool(args)
            and args[0] in p.resized
            and args[0] in p.slots
            and not kwargs.get("subgraph_index", 0)
        )

    def _unplanned(self, name, args):
        from ..errors import NotAllocatedError
        from ..interpreter import tensors as _tensors

        t = self.placement.native.tensor(args[0])
        what = f"tensor {args[0]} ({t.name!r})"  # as the Interpreter names it
        if name == "set_tensor":
            return _tensors.write(NoMemory(t), args[1], what)
        if name == "view":  # (the in-process tensor() view's words)
            raise NotAllocatedError(f"tensor {args[0]} has no data yet: call allocate_tensors() first")
        return _tensors.read(NoMemory(t), what)

    def _recheck(self) -> None:
        """After a call that may have resized or re-planned tensors: send the layout if it changed
        (a resize without an allocation leaves the interpreter unplanned: no fast path until then)."""
        if self.placement is not None:
            self.placement.changed = True

    def do_getattr(self, name):
        return getattr(self.it, name)

    def do_probe_tensor(self, index, view=False):
        """Validate ``index`` as the in-process ``tensor()`` does; with ``view``, also take (and drop) a view.

        The parent asks with ``view`` when a ``tensor()`` view it has no
        shared buffer for is called: the in-process view's refusal
        (NotAllocatedError before allocate_tensors(), or for an input
        resized since) is then the parent's too.
        """
        get = self.it.tensor(index)
        if view:
            if self._stale((index,), {}):
                self._unplanned("view", (index,))
            # (Dropped at once: a view kept here would count as a live view
            # and refuse the next allocate_tensors().)
            get()
        return None

    def do_runner(self, key):
        runner = self.it.get_signature_runner(key)
        rid = len(self.runners) + 1
        self.runners[rid] = runner
        return {"id": rid, "key": runner.key, "api": _public_api(runner)}

    def do_runner_call(self, rid, name, args, kwargs, views=0):
        """A signature runner's call: ``(its result, the main inputs' shapes if the call changed them, else None)``.

        ``views``: how many ``tensor()`` views the parent holds over the
        shared tensors; a call that would move the memory refuses while there
        are any, as in-process (``Interpreter._foreign_views``).  The shapes
        let the parent re-create the interpreter as it is now (pickle, fork),
        as it does after its own ``resize_tensor_input``.
        """
        self.stage("invoke" if name in ("__call__", "invoke") else "call")
        it = self.it
        before = dict(it._input_shapes)
        it._foreign_views = views
        try:
            value = getattr(self.runners[rid], name)(*args, **kwargs)
        finally:
            it._foreign_views = 0
            self._recheck()
        after = it._input_shapes
        return value, (dict(after) if after != before else None)

    def do_close(self):
        self.close_interpreter()
        return None

    def close_interpreter(self) -> None:
        with self._cancel_lock:
            it, self.it = self.it, None
        self.runners.clear()
        self.placement = None
        self.layout_sent = None
        hooks, self.hooks = self.hooks, None
        if it is not None:
            self.stage("close")
            it.close()
        if hooks is not None:
            hooks.release()

    def do_run_op(self, ops, kwargs, main_path):
        from ..interpreter.one_op import run_one_op

        self._main(main_path)
        self.stage("run_op")
        hooks = StageHooks(self)
        try:
            return run_one_op(unpack_ops(ops), **kwargs, hooks=hooks)
        finally:
            hooks.release()

    def _main(self, main_path) -> None:
        if main_path and main_path != self.main_loaded:
            _load_main(main_path)
            self.main_loaded = main_path


# ------------------------------------------------------------------ helpers
def _public_api(obj) -> dict:
    """Names of ``obj``'s public methods and properties (what the parent forwards)."""
    out = {}
    for name in dir(type(obj)):
        if name.startswith("_") and name != "__call__":
            continue
        attr = getattr(type(obj), name, None)
        if isinstance(attr, property):
            out[name] = "property"
        elif callable(attr):
            out[name] = "method"
    return out


# Operators whose effect outlives an invoke: a copy re-created from the model would start afresh.
_STATEFUL_OPS = frozenset(
    {"VAR_HANDLE", "ASSIGN_VARIABLE", "HASHTABLE", "HASHTABLE_IMPORT", "HASHTABLE_INSERT", "CALL_ONCE"}
)


def _stateful(it) -> bool:
    """Whether the hosted model keeps state between invokes (resource or variable tensors)."""
    info = getattr(it, "_info", None)
    if info is None:
        return True
    for sg in info.subgraphs:
        if any(op.op_name in _STATEFUL_OPS for op in sg.operators):
            return True
        if any(t.is_variable for t in sg.tensors):
            return True
    return False


def _public_values(obj) -> dict:
    """Public instance attributes that can travel (e.g. ``xnnpack``)."""
    out = {}
    for k, v in vars(obj).items():
        if k.startswith("_"):
            continue
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001
            continue
        out[k] = v
    return out


def _load_main(path: str) -> None:
    """Import the parent's ``__main__`` script as ``__mp_main__`` (as multiprocessing's spawn does),
    so python_op functions defined in it can be unpickled here."""
    import multiprocessing.spawn as spawn

    try:
        spawn.prepare({"init_main_from_path": path})
    except (Exception, SystemExit) as exc:  # (SystemExit: the script called sys.exit())
        from ..errors import OpaqueOpsError

        raise OpaqueOpsError(
            f"the isolated worker imports your script {path} to load the python_op functions defined in "
            "it (as multiprocessing's spawn does), which runs the script's top-level code, and that "
            f"failed ({type(exc).__name__}: {exc}). Put the code that should run once, in your process, "
            'under `if __name__ == "__main__":`, or define the functions in a module of their own'
        ) from exc


def _load_helper():
    """Compile (once; cached) and load ``c/src/isolate_helper.c``.  Returns ``(helper, reason)``.

    It goes through ``compile_ops``, the kernels' one build path (cached,
    verified, the compiler in a child process); it declares no ops.
    """
    from .._native.isolation_helper import load_helper
    from ..build import paths as _paths
    from ..ops.library import compile_ops

    src = _paths.c_dir() / "src" / "isolate_helper.c"
    try:
        return load_helper(str(compile_ops(src).path)), None
    except Exception as exc:  # noqa: BLE001 - no compiler: crashes still report, without a C backtrace
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _profiler_supported(version: str) -> bool:
    # TFLite marks its telemetry profiler struct as not ABI-stable; attach the
    # helper's only to runtimes whose layout was checked (2.17).
    return version.startswith(("2.17.", "2.23."))


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this worker when its parent dies, whatever the worker's Python
    is doing (the lifeline thread needs the GIL, which a spinning python_op may not give up).

    ``parent`` is the pid that started it: if it is already gone (it died
    before the request was made), leave now.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - the lifeline still ends it
            pass
    if os.getppid() != parent:
        os._exit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m opaque_ops.isolate.server",
        description="opaque_ops' isolated worker (started by opaque_ops itself)",
    )
    ap.add_argument("--socket", type=int, required=True)
    ap.add_argument("--control", type=int, required=True)
    ap.add_argument("--lifeline", type=int, required=True)
    ap.add_argument("--parent", type=int, default=None)
    args = ap.parse_args(argv)
    if args.parent is not None:
        _die_with_parent(args.parent)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # The parent turns Ctrl-C into a cancel; the worker never sees the terminal's signals
    # (it runs in its own session), but ignore SIGINT in case someone sends one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = mmap.mmap(args.control, P.PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(args.control)
    sock = socket.socket(fileno=args.socket)
    Server(sock, control, args.lifeline).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
