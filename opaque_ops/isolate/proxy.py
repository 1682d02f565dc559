"""``Interpreter(..., isolate=True)``: the whole Interpreter API, with the runtime in a worker process.

The parent never loads a model into TFLite.  It forwards every call to the
worker, except the per-inference ones, which never leave the parent:

- ``set_tensor`` / ``get_tensor`` on the model's inputs and outputs copy
  into / out of the shared buffers TFLite itself reads and writes, and
  ``tensor()`` views map them;
- ``invoke()`` is one request/reply through two shared semaphores.

Every other public method of :class:`opaque_ops.Interpreter` is forwarded
by name (this module adds a forwarding method for each one it does not
define), so the isolated API follows the in-process one.
"""

from __future__ import annotations

import inspect
import os
import pickle
import threading
import weakref

import numpy as np

from ..errors import (
    ClosedError,
    InvalidInputError,
    LiveViewsError,
    ModelError,
    RuntimeCrashError,
    RuntimeTimeoutError,
)
from ..interpreter import tensors as _tensors
from ..interpreter.call_lock import try_take
from ..interpreter.core import Interpreter, model_content_bytes, restore_interpreter
from ..interpreter.signature_runner import SignatureRunner
from . import protocol as P
from .shipping import pack_delegates, pack_ops
from .workers import Worker, check_timeout, parse_size

_INIT = inspect.signature(Interpreter.__init__)


class _View:
    """Owner of a ``tensor()`` view: keeps the shared mapping alive and counts as a live view."""

    __slots__ = ("__array_interface__", "_array", "__weakref__")

    def __init__(self, array):
        self.__array_interface__ = array.__array_interface__
        self._array = array  # keep-alive: its base is the mapping


_isolated: weakref.WeakSet = weakref.WeakSet()


class IsolatedInterpreter(Interpreter):
    """An :class:`opaque_ops.Interpreter` whose TFLite runtime runs in a worker process.

    Create it as ``opaque_ops.Interpreter(..., isolate=True)``.  Arguments are
    those of :class:`opaque_ops.Interpreter`, plus:

    Parameters
    ----------
    isolate : True or Worker
        True: a private worker process, ended by ``close()``.  A
        :class:`Worker`: run in that (reusable) worker.
    timeout : float, optional
        Seconds any call may take in the worker (``invoke(timeout=)``
        overrides it per call).  A late ``invoke`` is cancelled, then the
        worker killed if it does not stop; see :class:`RuntimeTimeoutError`.
    memory_limit : int or str, optional
        For a private worker: see :class:`Worker`.

    Raises
    ------
    RuntimeCrashError
        The worker crashed (here or in any later call); the interpreter is then closed.

    After ``fork()``, the child's copy gets a worker of its own on first use,
    re-created as unpickling would (model bytes, ops, resized inputs,
    allocation) with the input and output values it had at the fork, those
    in shared memory: string tensors, and outputs TFLite allocates only
    while it runs, are not there, so the child sets such inputs again (its
    ``invoke`` says so) and reads such outputs after its own invoke.  A copy
    that cannot be re-created faithfully -- a model with variables that has
    already run, or one another thread was using at the fork -- raises
    :class:`ClosedError` saying why.  ``tensor()`` views taken before the
    fork keep, in the child, the values they had at the fork (private copies);
    they cannot follow the child's new worker, so while one lives the child's
    ``invoke``, ``set_tensor``, ``get_tensor``, signature runs,
    ``allocate_tensors`` and ``resize_tensor_input`` raise
    :class:`LiveViewsError`.
    """

    _after_fork = None
    _fork_views = None  # in a forked child: the views taken before the fork, while any lives
    _invoked = False
    _stateful = False

    def __init__(self, *args, isolate=True, timeout=None, memory_limit=None, **kwargs):
        self._closed = True
        self._lock = threading.RLock()
        self._views: weakref.WeakSet = weakref.WeakSet()
        self._slots: dict = {}
        self._allocated = False
        self._details: dict = {}
        self._proc = None
        self._worker = None
        bound = _INIT.bind(self, *args, **kwargs)
        params = {k: v for k, v in bound.arguments.items() if k not in ("self", "isolate")}
        timeout = check_timeout(timeout)
        # What pickling re-creates (__reduce__): the model bytes loaded here, the
        # caller's own arguments (op libraries, python_ops and delegates pickle
        # themselves), and the inputs resized since.  A shared Worker cannot
        # travel; its memory cap does.
        self._pickled_args = {k: v for k, v in params.items() if k not in ("model_path", "model_content")}
        self._pickled_limits = {
            "timeout": timeout,
            "memory_limit": (isolate.memory_limit if isinstance(isolate, Worker) else memory_limit),
        }
        self._resized: dict = {}
        # The model is read here, once, as in-process: the worker, a pickled
        # copy and a re-created worker after fork() all run these bytes, even
        # if the file changes later.
        name = None
        if params.get("model_path") is not None and params.get("model_content") is None:
            model_path = params.pop("model_path")
            name = os.fspath(model_path)
            try:
                with open(model_path, "rb") as f:
                    params["model_content"] = f.read()
            except OSError as exc:
                raise ModelError(f"cannot read model file {name!r}: {exc.strerror}") from None
        elif params.get("model_content") is not None:
            params["model_content"] = model_content_bytes(params["model_content"])  # (the in-process rule)
        self._model_bytes = params.get("model_content")
        # Ops and delegates cross by their own __reduce__, as in any pickle (see .shipping).
        if params.get("experimental_delegates"):
            params["experimental_delegates"] = pack_delegates(params["experimental_delegates"])
        specs, main_path = pack_ops(params.pop("custom_ops", None))
        # Everything the worker needs to create it: kept, so that a fork()ed
        # child can give its copy a worker of its own (see _after_fork_in_child).
        self._create_args = {"kwargs": params, "ops": specs, "main_path": main_path, "name": name}
        self._timeout = timeout
        if isinstance(isolate, Worker):
            if memory_limit is not None and parse_size(memory_limit) != isolate.memory_limit:
                raise ValueError("memory_limit= belongs to the Worker when isolate=Worker(...)")
            self._worker, self._owns = isolate, False
        else:
            self._worker = Worker(memory_limit=memory_limit, library=params.get("library"))
            self._owns = True
        self._start()
        _isolated.add(self)

    def _start(self) -> None:
        """Create the interpreter in a worker (at creation, and again in a forked child)."""
        self._invoked = False
        try:
            self._proc = self._worker._attach(self)
            reply = self._request("create", self._create_args, stage="create", raw=True)
        except BaseException:
            self._end(keep=False)
            raise
        if reply.error is not None or reply.interrupt is not None:
            # A refusal (bad model, missing op...): the worker is fine, the interpreter never existed.
            self._end(keep=reply.interrupt is None)
            raise reply.interrupt or reply.error
        self._stateful = bool(reply.value.get("stateful"))
        self._model_facts = reply.value["model"]
        for k, v in reply.value["attrs"].items():
            if not isinstance(getattr(type(self), k, None), property):
                setattr(self, k, v)
        self._closed = False
        self._apply(reply)

    def _restart_after_fork(self) -> None:
        """In a forked child, on first use: the same interpreter in a worker of its own.

        Re-created as unpickling re-creates it (model bytes, ops, resized
        inputs, allocation), then given the input and output values it had
        at the fork.
        """
        state, self._after_fork = self._after_fork, None
        try:
            self._start()
            for index, shape in state["resized"]:
                self._call("resize_tensor_input", (index, shape))
            if state["allocated"]:
                self._call("allocate_tensors", stage="allocate")
            for index, value in state["values"].items():
                self._call("set_tensor", (index, value))
        except BaseException as exc:
            self._closed = True
            self._closed_why = (
                f"this isolated Interpreter reached this process through a fork and could not be "
                f"re-created in a worker of its own ({type(exc).__name__}: {exc}); create it in this process"
            )
            self._end(keep=False)
            raise ClosedError(self._closed_why) from exc

    # ------------------------------------------------------------ plumbing
    def _no_fork_views(self, what: str) -> None:
        """Refuse ``what`` while a view taken before fork() lives (it cannot follow the new worker)."""
        views = self._fork_views
        if views is None:
            return
        n = len(views)
        if n == 0:
            self._fork_views = None
            return
        raise LiveViewsError(
            f"cannot {what}: {n} numpy view(s) from tensor() were taken before fork(); in this "
            "process they keep the values they had at the fork and cannot follow this process's "
            "own worker, so they would silently go stale. Drop them (del) or take new ones with "
            "tensor() after the fork (or use get_tensor(), which copies, once they are gone)."
        )

    def _live(self):
        if self._after_fork is not None and not self._closed:
            self._restart_after_fork()
        if self._closed or self._proc is None:
            raise ClosedError(getattr(self, "_closed_why", None) or "this Interpreter is closed; create a new one")
        return self._proc

    def _refuse_reentry(self, what: str) -> None:
        # The shared tensors' fast paths: a signal handler of a thread that
        # waits for this worker would read or write them while the worker
        # runs (the worker's calls refuse it themselves: WorkerProcess.call).
        proc = self._proc
        if proc is not None:
            proc.refuse_reentry(what)

    def _request(self, cmd: str, args: dict, *, stage: str, timeout=None, raw: bool = False):
        """Send a command; apply the layout it brings back; return its value (or the Reply)."""
        proc = self._proc
        if proc is None:
            raise ClosedError("this Interpreter is closed; create a new one")
        try:
            reply = proc.call(cmd, args, stage=stage, timeout=self._timeout if timeout is None else timeout)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            if proc.closed:
                raise
            raise TypeError(f"the arguments cannot be sent to the isolated worker: {exc}") from None
        except MemoryError as exc:  # past the worker's memory_limit: nothing was sent
            raise InvalidInputError(str(exc)) from None
        except (RuntimeCrashError, RuntimeTimeoutError, ClosedError) as exc:
            self._dead(exc)
            raise
        except KeyboardInterrupt as exc:
            if proc.closed:  # Ctrl-C and the worker did not stop: it was killed
                self._dead(exc)
            raise
        if raw:
            return reply
        self._apply(reply)
        if reply.interrupt is not None:
            raise reply.interrupt
        if reply.error is not None:
            raise reply.error
        return reply.value

    def _call(self, name: str, args=(), kwargs=None, stage: str = "call"):
        with self._lock:
            self._live()
            return self._request(
                "call", {"name": name, "args": tuple(args), "kwargs": dict(kwargs or {}), "stage": stage}, stage=stage
            )

    def _apply(self, reply) -> None:
        """Adopt a new tensor layout: the fast-path views over the shared buffers."""
        layout = reply.layout
        if layout is None:
            return
        segs = reply.segments
        slots = {}
        for index, (seg_id, off, dtype, shape) in layout["tensors"].items():
            arr = segs[seg_id].array(off, dtype, tuple(shape))
            slots[index] = (arr, arr.dtype, arr.shape)
        for seg_id in list(segs):
            if seg_id not in layout["segments"]:
                del segs[seg_id]  # the mapping goes when the last view of it does
        # Not planned (resized, not yet allocated): every call goes to the worker, which
        # answers as the in-process interpreter does (NotAllocatedError).
        self._slots = slots if layout["allocated"] else {}
        self._allocated = layout["allocated"]
        self._details = {}

    def _dead(self, exc) -> None:
        """The worker crashed, was killed, or the interpreter was closed under a running call."""
        if not self._closed:
            self._closed_why = (
                f"this isolated Interpreter is closed: its worker {'crashed' if isinstance(exc, RuntimeCrashError) else 'was stopped'} "
                f"({type(exc).__name__}); create a new one"
            )
        self._closed = True
        self._slots = {}
        self._end(keep=False)

    def _end(self, keep: bool) -> None:
        """Let go of the worker (and everything shared with it but live views)."""
        worker = getattr(self, "_worker", None)
        self._proc = None
        self._details = {}
        if worker is None:
            return
        if self._owns:
            worker.close()
        else:
            worker._detach(self, keep=keep)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """End the interpreter and its private worker.  Idempotent; ``tensor()`` views stay valid.

        From another thread while a call runs, that call raises :class:`ClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        self._slots = {}
        # If a call is running (another thread holds the lock), the worker is
        # ended under it; otherwise a shared worker is kept for the next interpreter.
        idle = try_take(self._lock)
        try:
            self._end(keep=idle)
        finally:
            if idle:
                self._lock.release()

    def __reduce__(self):
        # Re-created as an isolated interpreter with its own worker, like
        # Interpreter.__reduce__: model bytes, arguments (ops and delegates by
        # their own __reduce__), resized inputs and whether it was allocated;
        # not tensor contents.
        with self._lock:
            self._live()
            kwargs = dict(self._pickled_args)
            data = self._model_bytes
            kwargs.update(isolate=True, **self._pickled_limits)
            state = {"allocated": bool(self._allocated), "resized": list(self._resized.items())}
        return restore_interpreter, (data, kwargs, state)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        proc = self._proc
        state = "closed" if self._closed or proc is None else f"worker pid {proc.pid}"
        return f"<opaque_ops.Interpreter isolate=True, {state}>"

    @property
    def worker_pid(self) -> int | None:
        """The worker's process id (None once closed)."""
        proc = self._proc
        return None if self._closed or proc is None else proc.pid

    # ----------------------------------------------------------- execution
    def allocate_tensors(self) -> None:
        """Plan and allocate tensor memory in the worker (see :meth:`Interpreter.allocate_tensors`)."""
        with self._lock:
            self._no_fork_views("allocate_tensors")
            self._live()
            self._no_views("allocate_tensors")
            self._request(
                "call", {"name": "allocate_tensors", "args": (), "kwargs": {}, "stage": "allocate"}, stage="allocate"
            )

    def invoke(self, timeout: float | None = None) -> None:
        """Run the model in the worker.

        Parameters
        ----------
        timeout : float, optional
            Seconds; overrides the interpreter's ``timeout``.  See
            :class:`opaque_ops.RuntimeTimeoutError`.

        Raises
        ------
        KernelError
            A kernel reported an error (as in-process).
        RuntimeCrashError
            The worker crashed; the interpreter is now closed.
        RuntimeTimeoutError
            The invoke ran past its timeout.
        """
        if timeout is not None:
            timeout = check_timeout(timeout)
        with self._lock:
            self._no_fork_views("invoke")
            proc = self._live()
            self._invoked = True
            try:
                reply = proc.invoke(self._timeout if timeout is None else timeout)
            except (RuntimeCrashError, RuntimeTimeoutError, ClosedError) as exc:
                self._dead(exc)
                raise
            except KeyboardInterrupt as exc:
                if proc.closed:
                    self._dead(exc)
                raise
            if reply is None:
                return
            self._apply(reply)
            if reply.interrupt is not None:
                raise reply.interrupt
            if reply.error is not None:
                raise reply.error

    # -------------------------------------------------------------- tensors
    def set_tensor(self, tensor_index: int, value) -> None:
        """Copy ``value`` into a tensor (see :meth:`Interpreter.set_tensor`).

        For the model's inputs this is a copy into shared memory, with no
        message to the worker; anything else is checked and done there.
        """
        # (An exact int only, as in-process: 1.0 and True would find tensor 1's entry too.)
        slot = self._slots.get(tensor_index) if type(tensor_index) is int else None
        if (
            slot is not None
            and type(value) is np.ndarray
            and value.shape == slot[2]
            and (value.dtype is slot[1] or value.dtype == slot[1])
        ):
            with self._lock:
                if self._slots.get(tensor_index) is slot and self._fork_views is None:
                    self._refuse_reentry("set_tensor")
                    slot[0][...] = value
                    return
        self._no_fork_views("set_tensor")
        self._call("set_tensor", (tensor_index, _sendable(value)))

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """Return a copy of a tensor (see :meth:`Interpreter.get_tensor`)."""
        slot = self._slots.get(tensor_index) if type(tensor_index) is int else None  # (as in set_tensor)
        if slot is not None and subgraph_index == 0:
            with self._lock:
                if self._slots.get(tensor_index) is slot and self._fork_views is None:
                    self._refuse_reentry("get_tensor")
                    return slot[0].copy()
        self._no_fork_views("get_tensor")
        return self._call(
            "get_tensor", (tensor_index,), {"subgraph_index": subgraph_index} if subgraph_index != 0 else None
        )

    def tensor(self, tensor_index: int):
        """Return a function that gives a zero-copy view of an input or output tensor.

        The view maps the shared buffer TFLite reads and writes in the
        worker.  Only the model's inputs and outputs live in shared memory;
        for other tensors use :meth:`get_tensor`.  As in-process, while a view
        exists ``allocate_tensors`` and ``resize_tensor_input`` refuse to run,
        and the view of a tensor with no memory yet (before
        ``allocate_tensors()``, or an input resized since) raises
        :class:`~opaque_ops.NotAllocatedError`.
        """
        _tensors.check_index(tensor_index)
        with self._lock:
            self._live()
            if tensor_index not in self._slots:
                self._request("probe_tensor", {"index": tensor_index}, stage="call")

        def view():
            slot = self._slots.get(tensor_index)
            if slot is None:
                if self._closed:
                    raise ClosedError("this Interpreter is closed; views taken before close() stay valid")
                # Where the in-process view refuses (no memory yet: before
                # allocate_tensors(), or an input resized since), so does
                # this one, with its error; the worker's interpreter decides.
                with self._lock:
                    self._live()
                    self._request("probe_tensor", {"index": tensor_index, "view": True}, stage="call")
                raise ValueError(
                    f"tensor {tensor_index} is not in shared memory: an isolated interpreter maps the "
                    "model's inputs and outputs once allocate_tensors() has run; use get_tensor() "
                    "for other tensors (it copies)"
                )
            holder = _View(slot[0])
            self._views.add(holder)
            return np.asarray(holder)

        return view

    def resize_tensor_input(self, input_index: int, tensor_size, strict: bool = False) -> None:
        """Change an input's shape in the worker (see :meth:`Interpreter.resize_tensor_input`)."""
        with self._lock:
            self._no_fork_views("resize_tensor_input")
            self._live()
            self._no_views("resize_tensor_input")
            self._request(
                "call",
                {
                    "name": "resize_tensor_input",
                    "args": (input_index, tensor_size),
                    "kwargs": {"strict": strict},
                    "stage": "resize",
                },
                stage="resize",
            )
            self._details = {}
            self._resized[input_index] = tuple(int(n) for n in tensor_size)

    # ------------------------------------------------------------- details
    def _cached(self, name: str):
        with self._lock:
            self._live()
            got = self._details.get(name)
            if got is None:
                got = self._call(name)
                self._details[name] = got
        return [{k: (v.copy() if isinstance(v, np.ndarray) else _copy_nested(v)) for k, v in d.items()} for d in got]

    def get_input_details(self) -> list[dict]:
        """Details of the model's inputs (same keys as tflite_runtime)."""
        return self._cached("get_input_details")

    def get_output_details(self) -> list[dict]:
        """Details of the model's outputs (same keys as tflite_runtime)."""
        return self._cached("get_output_details")

    # ---------------------------------------------------------- signatures
    def get_signature_list(self) -> dict:
        """``{signature key: {"inputs": [names], "outputs": [names]}}``, as the worker read them at creation.

        Kept here, as the model is in-process: it answers after ``close()`` too.
        """
        return {
            k: {part: list(names) for part, names in v.items()} for k, v in self._model_facts["signature_list"].items()
        }

    def _get_ops_details(self) -> list[dict]:
        """:meth:`Interpreter._get_ops_details`, asked of the worker (private, so not forwarded by name)."""
        return _interp_forward(self, "_get_ops_details", (), {})

    def num_subgraphs(self) -> int:
        """How many subgraphs the model has (kept from creation, as :meth:`get_signature_list`)."""
        return self._model_facts["num_subgraphs"]

    def get_signature_runner(self, signature_key: str | None = None) -> IsolatedSignatureRunner:
        """Return a runner for one signature; its calls run in the worker."""
        with self._lock:
            self._live()
            info = self._request("runner", {"key": signature_key}, stage="call")
        return IsolatedSignatureRunner(self, info["id"], info["key"])

    def _runner_call(self, rid: int, name: str, args, kwargs):
        stage = "invoke" if name in ("__call__", "invoke") else "call"
        with self._lock:
            self._no_fork_views("run a signature runner")
            self._live()
            self._invoked = self._invoked or stage == "invoke"
            out, shapes = self._request(
                "runner_call",
                {"rid": rid, "name": name, "args": tuple(args), "kwargs": dict(kwargs), "views": len(self._views)},
                stage=stage,
            )
            self._details = {}
            if shapes is not None:  # the call resized inputs: what pickle and fork re-create
                self._resized = shapes
            return out

    def cancel(self) -> None:
        """Ask a running ``invoke()`` (in another thread) to stop; it raises KeyboardInterrupt."""
        proc = self._proc
        if proc is not None and not self._closed:
            proc.cancel()


def _sendable(value):
    """``set_tensor``'s value as the worker can receive it, refused there as in-process.

    In-process, ``set_tensor`` takes anything ``np.asarray`` takes (a
    memoryview, a list...): converted here the same way.  An array of Python
    objects other than strings cannot cross, and in-process it is always
    refused (by the tensor's type, or as the wrong dtype): a stand-in of its
    shape brings the same refusal.  One of bytes/str (a string tensor's
    value) crosses as it is.
    """
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value)
        except Exception:  # noqa: BLE001 - the worker's np.asarray raises it, in its place
            return value
    bad = P.first_non_string(value) if value.dtype.hasobject else None
    if bad is not None:
        return P.ObjectArray(value.shape, bad)
    return value


def _after_fork_in_child() -> None:
    """In a forked child: every isolated interpreter lets go of the parent's worker.

    The parent's worker, its shared buffers and its socket belong to the
    parent: used from here, the two processes' calls and tensors would mix.
    Each copy is re-created in a worker of its own on first use
    (:meth:`IsolatedInterpreter._restart_after_fork`), or refused with the
    reason where a re-created one could differ from the parent's.
    """
    P.detach_segments()  # the views held across the fork: the values at the fork, never the parent's worker's
    parent = os.getppid()
    for it in list(_isolated):
        busy = not it._lock.acquire(blocking=False)  # held by a thread the fork did not copy
        it._lock = threading.RLock()
        proc, slots = it._proc, it._slots
        it._proc, it._slots, it._details = None, {}, {}
        if it._owns and it._worker is not None:
            it._worker = Worker(
                memory_limit=it._worker.memory_limit,
                library=it._worker.library,
                forward_stderr=it._worker.forward_stderr,
            )
        if it._closed or proc is None:
            continue
        why = None
        if busy:
            why = "another thread was using it at the fork, so its state is unknown"
        elif it._stateful and it._invoked:
            why = (
                "its model keeps state between invokes (variables), which a new worker would not "
                "have, so its results could differ"
            )
        if why is not None:
            it._closed = True
            it._closed_why = (
                f"this isolated Interpreter was created in process {parent} and reached this process "
                f"through a fork; {why}. Create the interpreter in this process (a pool's initializer), "
                "or send it pickled (multiprocessing.get_context('spawn') or 'forkserver')"
            )
            continue
        values = {}
        for index, (arr, _dtype, _shape) in slots.items():
            values[index] = arr.copy()  # the values at the fork (a private copy now, see detach_segments)
        if len(it._views):  # they cannot follow the new worker: see _no_fork_views
            views = weakref.WeakSet(it._views)
            if it._fork_views is not None:
                views |= it._fork_views
            it._fork_views, it._views = views, weakref.WeakSet()
        it._after_fork = {"resized": list(it._resized.items()), "allocated": bool(it._allocated), "values": values}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _copy_nested(v):
    if isinstance(v, dict):
        return {k: (x.copy() if isinstance(x, np.ndarray) else _copy_nested(x)) for k, x in v.items()}
    return v


class IsolatedSignatureRunner(SignatureRunner):
    """A signature runner of an isolated interpreter; every call runs in the worker."""

    def __init__(self, interpreter: IsolatedInterpreter, rid: int, key: str):
        self._interpreter = interpreter  # keep-alive: the worker holds the runner for it
        self._rid = rid
        self.key = key

    def __call__(self, **inputs) -> dict:
        """Run the signature (see :meth:`SignatureRunner.__call__`); arrays travel through shared memory."""
        return self._interpreter._runner_call(self._rid, "__call__", (), inputs)


def _forward_public(cls, base, call) -> None:
    """Give ``cls`` a forwarding method for each public method and property of ``base``
    that it does not define itself, so new API in ``base`` works isolated too."""
    for name, attr in vars(base).items():
        if name.startswith("_") or name in vars(cls):
            continue
        if isinstance(attr, property):
            setattr(cls, name, property(lambda self, _n=name: call(self, "__getattr__", (_n,), {}), doc=attr.__doc__))
        elif callable(attr):

            def method(self, *args, _n=name, **kwargs):
                return call(self, _n, args, kwargs)

            method.__name__ = name
            method.__qualname__ = f"{cls.__name__}.{name}"
            method.__doc__ = attr.__doc__
            setattr(cls, name, method)


def _interp_forward(self, name, args, kwargs):
    if name == "__getattr__":
        with self._lock:
            self._live()
            return self._request("getattr", {"name": args[0]}, stage="call")
    try:
        return self._call(name, args, kwargs)
    finally:
        self._details = {}  # a method this module does not know may change shapes


def _runner_forward(self, name, args, kwargs):
    if name == "__getattr__":
        return self._interpreter._runner_call(self._rid, "__getattribute__", args, {})
    return self._interpreter._runner_call(self._rid, name, args, kwargs)


_forward_public(IsolatedInterpreter, Interpreter, _interp_forward)
_forward_public(IsolatedSignatureRunner, SignatureRunner, _runner_forward)
