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

import numpy as np

from . import protocol as P


def _vm_data() -> int:
    """This process's private writable memory (VmData), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0  # pragma: no cover


class _Budget:
    """The memory cap: ``RLIMIT_DATA`` above the worker's baseline, minus the shared segments.

    Shared (memfd) mappings are not counted by ``RLIMIT_DATA``, so every
    segment the worker creates is charged here and the limit is lowered by
    as much: the model's heap plus its shared tensors stay under the cap.
    """

    def __init__(self):
        self.limit = None
        self.base = 0
        self.shared = 0

    def set(self, limit: int | None) -> None:
        import resource

        self.limit = limit
        if limit is None:
            return
        self.base = _vm_data()
        self._apply(resource)

    def _apply(self, resource) -> None:
        value = max(self.base + self.limit - self.shared, 0)
        resource.setrlimit(resource.RLIMIT_DATA, (value, value))

    def charge(self, nbytes: int) -> None:
        if self.limit is None:
            return
        if self.shared + nbytes > self.limit:
            raise MemoryError(
                f"shared tensor memory of {self.shared + nbytes} bytes would exceed the isolated "
                f"worker's memory_limit of {self.limit} bytes"
            )
        import resource

        self.shared += nbytes
        self._apply(resource)


class _Placement:
    """Puts the hosted interpreter's input and output tensors in shared segments.

    Each one gets a ``TfLiteInterpreterSetCustomAllocationForTensor`` buffer
    in a segment the parent maps too, so ``set_tensor`` / ``get_tensor`` /
    ``tensor()`` in the parent read and write the very memory TFLite uses:
    no copy and no message per call.

    TFLite checks a custom buffer's size only when it allocates, after every
    kernel's Prepare has computed the shapes.  So :meth:`wrap` goes around
    each native ``allocate`` of the hosted interpreter (its own, and its
    signature runners'): if it failed because a shared buffer is now too
    small (an input was resized), the tensor gets a larger one and allocation
    runs again; after a success, inputs and outputs not yet shared get a
    buffer (and allocation runs again, as TFLite requires after setting one).
    The wrappers are put in place as the native objects are created, so
    every path of the Interpreter that allocates goes through them.
    Tensors TFLite will not place in a custom buffer (dynamic ones, strings)
    stay in its arena and are reached through messages instead.
    """

    def __init__(self, worker, native):
        self.w = worker
        self.native = native
        self.slots: dict[int, tuple] = {}  # index -> (segment, offset, capacity)
        # Inputs and outputs left in TFLite's arena (dynamic ones): their
        # shapes may change in invoke, which the parent's details must follow.
        self.watch: list = []  # (TensorRef, shape when last reported)
        self.moved = _never  # did a shared output leave its buffer during invoke? (see layout)
        self.resized: set = set()  # inputs resized since the last allocation (see Server._stale)
        self.new_segments: list = []
        self.changed = True

    def wrap(self, orig):
        """``orig`` (a native allocate) with the shared buffers kept in place around it."""
        sink = self.native.sink

        def allocate() -> int:
            self.resized.clear()
            status = orig()
            if status != 0 and self._grow():
                sink.take()  # "Custom allocation is too small": handled here
                status = orig()
            if status == 0 and self._place():
                status = orig()
            self.changed = True
            return status

        return allocate

    def wrap_resize(self, orig):
        """``orig`` (the native resize_input) noting which input it resized."""
        def resize_input(position, shape) -> int:
            status = orig(position, shape)
            if status == 0:
                self.resized.add(self.native.input_indices()[position])
            return status

        return resize_input

    def _io(self) -> list[int]:
        seen = []
        for i in self.native.input_indices() + self.native.output_indices():
            if i >= 0 and i not in seen:
                seen.append(i)
        return seen

    def _grow(self) -> bool:
        small = [i for i, (_s, _o, cap) in self.slots.items() if self.native.tensor(i).nbytes > cap]
        return bool(small) and self._assign(small)

    def _place(self) -> bool:
        fresh = []
        for i in self._io():
            if i in self.slots:
                continue
            t = self.native.tensor(i)
            if t is None or t.nbytes == 0 or t.dtype is None or t.dtype.hasobject or t.is_dynamic():
                continue
            # Only tensors whose byte size is their shape's: a model may declare otherwise.
            if t.nbytes != t.dtype.itemsize * int(np.prod(t.shape, dtype=np.int64)):
                continue
            fresh.append(i)
        return bool(fresh) and self._assign(fresh)

    def _assign(self, indices) -> bool:
        sizes = {i: P.align(self.native.tensor(i).nbytes) for i in indices}
        total = sum(sizes.values())
        try:
            self.w.budget.charge(total)
        except MemoryError:
            return False  # they stay in TFLite's arena, under RLIMIT_DATA
        seg = P.Segment(next(self.w.ids), max(total, 1))
        self.new_segments.append(seg)
        off = 0
        done = False
        for i in indices:
            buf = np.frombuffer(seg.map, np.uint8, sizes[i], off)
            if self.native.set_custom_allocation(i, buf) == 0:
                self.slots[i] = (seg, off, sizes[i])
                done = True
            else:
                self.native.sink.take()
                self.slots.pop(i, None)
            off += sizes[i]
        return done

    def layout(self) -> dict:
        """``{tensor index: (segment id, offset, dtype, shape)}`` of the tensors that live in a shared buffer now."""
        from .._native.isolation_helper import moved_probe

        out, placed = {}, []
        for i, (seg, off, cap) in self.slots.items():
            t = self.native.tensor(i)
            try:
                v = t.view() if t is not None else None
            except Exception:  # noqa: BLE001 - a tensor whose bytes do not match its shape: not shared
                v = None
            if v is None or v.nbytes > cap or v.ctypes.data != _address(seg, off):
                continue
            out[i] = (seg.id, off, v.dtype.str, v.shape)
            placed.append((t, v.ctypes.data, v.nbytes))
        self.watch = [(t, t.shape) for t in (self.native.tensor(i) for i in self._io() if i not in out)
                      if t is not None]
        outputs = set(self.native.output_indices())
        self.moved = moved_probe([p for p, i in zip(placed, out) if i in outputs]) if outputs & set(out) else _never
        return out

    def reshaped(self) -> bool:
        """True if an input or output outside the shared buffers changed shape (after an invoke)."""
        return any(t.shape != shape for t, shape in self.watch)

    def take_new_segments(self) -> list:
        segs, self.new_segments = self.new_segments, []
        return segs


class _NoMemory:
    """A tensor presented as having no memory (see Server._stale); everything else is the tensor's."""

    def __init__(self, t):
        self._t = t

    def __getattr__(self, name):
        return getattr(self._t, name)

    def has_data(self) -> bool:
        return False

    def read(self):
        return None


def _never() -> bool:
    return False


def _address(seg, off) -> int:
    return np.frombuffer(seg.map, np.uint8, 1, off).ctypes.data


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
        self.budget = _Budget()
        self.channel = P.Channel(sock, copy_in=False, ids=self.ids,
                                 budget=lambda size, growth: self.budget.charge(growth))
        self.it = None
        self.placement: _Placement | None = None
        self.runners: dict = {}
        self.helper = None
        self.layout_sent = None
        self.main_loaded = None
        self.hosting = False
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
            self.channel.send((("err", P.pack_exception(TypeError(
                f"the result cannot cross the process boundary: {type(exc).__name__}: {exc}"))), layout),
                share=share)

    def current_layout(self):
        """The tensor layout, if it changed since it was last sent (else None)."""
        p = self.placement
        if p is None or not p.changed:
            return None
        p.changed = False
        layout = {"tensors": p.layout(), "allocated": bool(getattr(self.it, "_allocated", True)),
                  "segments": sorted({seg.id for seg, _o, _c in p.slots.values()}),
                  "shapes": [shape for _t, shape in p.watch]}
        if layout == self.layout_sent:
            return None
        self.layout_sent = layout
        return layout

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
            _instrument(self)
            if _profiler_supported(_native.load_runtime().version):
                self.helper.attach_profiler()
        else:
            _instrument(self)
        self.budget.set(memory_limit)
        return {"pid": os.getpid(), "runtime": _native.load_runtime().version, "where": True,
                "helper": self.helper is not None, "helper_missing": why,
                "helper_path": self.helper.path if self.helper is not None else None}

    def do_create(self, kwargs, ops, main_path):
        from ..interpreter.core import Interpreter

        self.close_interpreter()
        self._main(main_path)
        if self.helper is not None:
            self.helper.reset_profiler()
        custom_ops = _ops_from_specs(ops)
        if kwargs.get("experimental_delegates"):
            from ..ops.delegates import load_delegate

            # The parent's delegates are objects of its process: the same plugin,
            # with the same options, makes this process's own.
            kwargs["experimental_delegates"] = [load_delegate(lib, opts)
                                                for _, lib, opts in kwargs["experimental_delegates"]]
        self.stage("create")
        self.hosting = True  # the native interpreter created now is the hosted one (see _instrument)
        try:
            it = Interpreter(**kwargs, custom_ops=custom_ops or None, isolate=False)
        except BaseException:
            self.placement = None
            raise
        finally:
            self.hosting = False
        with self._cancel_lock:
            self.it = it
        self.layout_sent = None
        return {"api": _public_api(it), "attrs": _public_values(it)}

    def do_call(self, name, args, kwargs, stage="call"):
        self.stage(stage)
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
        return (p is not None and bool(args) and args[0] in p.resized and args[0] in p.slots
                and not kwargs.get("subgraph_index", 0))

    def _unplanned(self, name, args):
        from ..interpreter import tensors as _tensors

        t = self.placement.native.tensor(args[0])
        what = f"tensor {args[0]} ({t.name!r})"  # as the Interpreter names it
        if name == "set_tensor":
            return _tensors.write(_NoMemory(t), args[1], what)
        return _tensors.read(_NoMemory(t), what)

    def _recheck(self) -> None:
        """After a call that may have resized or re-planned tensors: send the layout if it changed
        (a resize without an allocation leaves the interpreter unplanned: no fast path until then)."""
        if self.placement is not None:
            self.placement.changed = True

    def do_getattr(self, name):
        return getattr(self.it, name)

    def do_probe_tensor(self, index):
        self.it.tensor(index)  # validates the index as the in-process API does
        return None

    def do_runner(self, key):
        runner = self.it.get_signature_runner(key)
        rid = len(self.runners) + 1
        self.runners[rid] = runner
        return {"id": rid, "key": runner.key if hasattr(runner, "key") else key, "api": _public_api(runner)}

    def do_runner_call(self, rid, name, args, kwargs):
        self.stage("invoke" if name in ("__call__", "invoke") else "call")
        try:
            return getattr(self.runners[rid], name)(*args, **kwargs)
        finally:
            self._recheck()

    def do_close(self):
        self.close_interpreter()
        return None

    def close_interpreter(self) -> None:
        with self._cancel_lock:
            it, self.it = self.it, None
        self.runners.clear()
        self.placement = None
        self.layout_sent = None
        if it is not None:
            self.stage("close")
            it.close()

    def do_run_op(self, ops, kwargs, main_path):
        from ..testing import run_op

        self._main(main_path)
        self.stage("run_op")
        return run_op(_ops_from_specs(ops), **kwargs, isolate=False)

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


def _ops_from_specs(specs) -> list:
    """Rebuild ``custom_ops`` from what the parent sent (see ``_spec.op_specs``)."""
    from ..ops.library import load_ops
    from ..ops.python_op import python_op

    ops = []
    for spec in specs:
        if spec[0] == "path":
            ops.append(load_ops(spec[1]))
        elif spec[0] == "kernel":
            ops.append(_bundled_kernel(spec[1], spec[2]))
        else:
            _, name, version, blob = spec
            try:
                fns = pickle.loads(blob)
            except Exception as exc:  # noqa: BLE001 - reported with the fix
                from ..errors import OpaqueOpsError

                raise OpaqueOpsError(
                    f"python_op {name!r}: its functions could not be loaded in the isolated worker "
                    f"({type(exc).__name__}: {exc}). Define them at module level in a module the "
                    "worker can import (it gets the parent's sys.path)."
                ) from None
            ops.append(python_op(name, version=version, **fns))
    return ops


def _bundled_kernel(name: str, path: str):
    """``opaque_ops.kernels.kernel(name)`` as the parent had it; its library file if that fails.

    The worker normally finds the same prebuilt library or compile-cache
    entry; the parent's file still serves a worker that cannot (no compiler
    in its environment, another cache directory).
    """
    from .. import kernels
    from ..errors import OpaqueOpsError
    from ..ops.library import load_ops

    try:
        return kernels.kernel(name)
    except (OpaqueOpsError, OSError):
        lib = load_ops(path)
        lib._origin = ("kernel", name)
        return lib


def _load_main(path: str) -> None:
    """Import the parent's ``__main__`` script as ``__mp_main__`` (as multiprocessing's spawn does),
    so python_op functions defined in it can be unpickled here."""
    import multiprocessing.spawn as spawn

    spawn.prepare({"init_main_from_path": path})


def _load_helper():
    """Compile (once; cached) and load ``c/src/isolate_helper.c``.  Returns ``(helper, reason)``.

    It goes through ``compile_ops``, the kernels' one build path (cached,
    verified, the compiler in a child process); it declares no ops.
    """
    from ..build import paths as _paths
    from .._native.isolation_helper import load_helper
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


def _instrument(worker: Server) -> None:
    """Hook the native objects of this process as they are created.

    - Every native interpreter and signature runner records its stage
      (create / allocate / invoke) in the crash record, including the ones
      ``run_op`` builds.
    - The interpreter created while ``worker.hosting`` is the hosted one: it
      gets the shared-buffer :class:`_Placement` around its ``allocate``, and
      so do its signature runners.  Hooking at creation means the
      Interpreter holds the wrapped functions from the start, whichever of
      its paths allocates.
    """
    from .._native import native_interpreter as interp

    ni, nr = interp.NativeInterpreter, interp.NativeSignatureRunner
    init, runner_init, runner_alloc, runner_invoke = ni.__init__, nr.__init__, nr.allocate, nr.invoke
    stage = worker.stage
    words = worker.words

    def staged_allocate(alloc):
        def allocate():
            # invoke() may allocate first: put its stage back afterwards.
            before = words[P.STAGE // 4]
            stage("allocate")
            status = alloc()
            words[P.STAGE // 4] = before
            return status

        return allocate

    def __init__(self, *args, **kwargs):
        stage("create")
        init(self, *args, **kwargs)
        if worker.hosting and self.ok:
            # The hosted interpreter's invoke is marked by fast_invoke itself.
            worker.placement = _Placement(worker, self)
            self.allocate = worker.placement.wrap(self.allocate)
            self.resize_input = worker.placement.wrap_resize(self.resize_input)
        else:
            inner = self.invoke

            def invoke():
                stage("invoke")
                return inner()

            self.invoke = invoke
        self.allocate = staged_allocate(self.allocate)

    def runner_init_hook(self, *args, **kwargs):
        runner_init(self, *args, **kwargs)
        p = worker.placement
        if p is not None and getattr(self, "_interp", None) is p.native:
            self.allocate = staged_allocate(p.wrap(lambda: runner_alloc(self)))

    def allocate(self):
        stage("allocate")
        return runner_alloc(self)

    def invoke(self):
        stage("invoke")
        return runner_invoke(self)

    ni.__init__ = __init__
    nr.__init__ = runner_init_hook
    nr.allocate = allocate
    nr.invoke = invoke


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opaque_ops.isolate.server",
                                 description="opaque_ops' isolated worker (started by opaque_ops itself)")
    ap.add_argument("--socket", type=int, required=True)
    ap.add_argument("--control", type=int, required=True)
    ap.add_argument("--lifeline", type=int, required=True)
    args = ap.parse_args(argv)
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
