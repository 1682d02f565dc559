"""One-call isolated runs: ``run_op`` for C authors, ``run_model`` / ``run_models`` for vetting and fuzzing."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import numpy as np

from ..errors import OpaqueOpsError, RuntimeCrashError, RuntimeTimeoutError
from .shipping import pack_ops
from .workers import Worker, check_timeout


class _Token:
    """Stands in for an interpreter while a one-off call holds a worker."""


def run_op(ops: list, kwargs: dict, *, isolate=True, timeout=None) -> list:
    """Run :func:`opaque_ops.testing.run_op` in a worker (``isolate`` is True or a :class:`Worker`)."""
    timeout = check_timeout(timeout)
    specs, main_path = pack_ops(ops)
    worker = isolate if isinstance(isolate, Worker) else Worker()
    token = _Token()
    clean = False
    try:
        proc = worker._attach(token)
        reply = proc.call(
            "run_op", {"ops": specs, "kwargs": kwargs, "main_path": main_path}, stage="run_op", timeout=timeout
        )
        clean = reply.interrupt is None
    finally:
        if worker is isolate:
            worker._detach(token, keep=clean)
        else:
            worker.close()
    if reply.interrupt is not None:
        raise reply.interrupt
    if reply.error is not None:
        raise reply.error
    return reply.value


@dataclasses.dataclass
class Outcome:
    """How one model fared in an isolated worker.

    Attributes
    ----------
    status : str
        ``"ok"`` (created, allocated, invoked), ``"rejected"`` (an
        :class:`OpaqueOpsError` with a reason: the clean refusal),
        ``"crash"`` (:class:`RuntimeCrashError`), ``"timeout"``
        (:class:`RuntimeTimeoutError`), or ``"error"``: any other exception,
        which is a finding (the API should have raised an OpaqueOpsError).
    stage : str or None
        Where it stopped: ``create``, ``resize``, ``allocate``, ``set``, ``invoke``, ``read``.
    error : BaseException or None
    seconds : float
    """

    status: str
    stage: str | None = None
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def reason(self) -> str:
        """The first line of the error message (empty when ok)."""
        if self.error is None:
            return ""
        text = str(self.error).strip().splitlines()
        return f"{type(self.error).__name__}: {text[0] if text else ''}"


# Inputs and outputs above this size are left alone (not generated, not set,
# not copied back): a fuzzed resize can declare gigabytes, and the caller
# must not be the one to allocate them.
BIG = 64 << 20


def random_inputs(details, seed: int = 0) -> list:
    """``[(tensor index, array)]`` of deterministic random values for each input (none for huge ones)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        dt = np.dtype(d["dtype"]) if d["dtype"] is not None else None
        shape = tuple(int(s) for s in d["shape"])
        if dt is None or dt.hasobject or dt.kind == "S":  # (strings: np.bytes_, as litert reports them)
            continue
        if dt.itemsize * float(np.prod(shape, dtype=np.float64)) > BIG:
            continue
        if dt.kind == "f":
            a = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            a = rng.random(shape) < 0.5
        elif dt.kind == "c":
            a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(max(info.min, -128), min(info.max, 127), size=shape, endpoint=True).astype(dt)
        out.append((d["index"], a))
    return out


def run_model(
    model,
    *,
    worker: Worker | None = None,
    custom_ops=None,
    use_xnnpack=None,
    num_threads=None,
    resize=None,
    runner: bool = False,
    seed: int = 0,
    timeout: float | None = 10.0,
    **kwargs,
) -> Outcome:
    """Create, allocate and invoke a model once in an isolated worker, and say how it went.

    Parameters
    ----------
    model : bytes or path-like
        The model (bytes are ``model_content``, anything else ``model_path``).
    worker : Worker, optional
        Reuse this worker (a fuzzer's loop); by default a private one.
    custom_ops, use_xnnpack, num_threads
        As for :class:`opaque_ops.Interpreter`.
    resize : dict or list, optional
        ``{input tensor index: shape}`` applied before allocation; a list is
        the shape of the first input.
    runner : bool
        Run through the first signature's runner (twice) instead of
        ``allocate_tensors`` + ``invoke``, when the model has signatures.
    seed : int
        For the random inputs.
    timeout : float or None
        Per call, in seconds.
    **kwargs
        Other :class:`opaque_ops.Interpreter` arguments.

    Returns
    -------
    Outcome
        Never raises for what the model or its kernels do, except
        KeyboardInterrupt.
    """
    t0 = time.perf_counter()
    stage = "create"
    it = None
    src = {"model_content": model} if isinstance(model, (bytes, bytearray, memoryview)) else {"model_path": model}
    own = worker is None
    if own:
        worker = Worker(memory_limit=kwargs.pop("memory_limit", None))
    try:
        from ..interpreter.core import Interpreter

        it = Interpreter(
            **src,
            custom_ops=custom_ops,
            use_xnnpack=use_xnnpack,
            num_threads=num_threads,
            isolate=worker,
            timeout=timeout,
            **kwargs,
        )
        if runner and it.get_signature_list():
            stage = "invoke"
            _run_signature(it, resize, seed)
            return _finish(Outcome("ok", None), t0)
        if isinstance(resize, (list, tuple)):
            details = it.get_input_details()
            resize = {details[0]["index"]: resize} if details else {}
        stage = "resize"
        for index, shape in (resize or {}).items():
            it.resize_tensor_input(index, shape)
        stage = "allocate"
        it.allocate_tensors()
        stage = "set"
        for index, arr in random_inputs(it.get_input_details(), seed):
            it.set_tensor(index, arr)
        stage = "invoke"
        it.invoke()
        stage = "read"
        for d in it.get_output_details():
            dt = np.dtype(d["dtype"]) if d["dtype"] is not None else np.dtype(np.uint8)
            if dt.itemsize * float(np.prod(d["shape"], dtype=np.float64)) <= BIG:
                it.get_tensor(d["index"])
        result = Outcome("ok", None)
    except RuntimeCrashError as exc:
        result = Outcome("crash", exc.stage or stage, exc)
    except RuntimeTimeoutError as exc:
        result = Outcome("timeout", exc.stage or stage, exc)
    except OpaqueOpsError as exc:
        result = Outcome("rejected", stage, exc)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a finding: reported, not raised
        result = Outcome("error", stage, exc)
    finally:
        if it is not None:
            it.close()
        if own:
            worker.close()
    return _finish(result, t0)


def _finish(outcome: Outcome, t0: float) -> Outcome:
    outcome.seconds = time.perf_counter() - t0
    if outcome.error is not None:
        # The traceback's frames hold the model, its inputs and the worker's
        # objects; an outcome kept by a long fuzz run must not.
        outcome.error.__traceback__ = None
        if outcome.error.__context__ is not None:
            outcome.error.__context__.__traceback__ = None
    return outcome


def _run_signature(it, resize, seed: int) -> None:
    """Call the first signature twice with random inputs (the first one resized to ``resize``)."""
    runner = it.get_signature_runner(next(iter(it.get_signature_list())))
    details = [dict(d, index=name) for name, d in runner.get_input_details().items()]
    if isinstance(resize, (list, tuple)) and details:
        details[0]["shape"] = list(resize)
    inputs = dict(random_inputs(details, seed))
    if len(inputs) == len(details):
        for _ in range(2):
            runner(**inputs)


@dataclasses.dataclass
class Summary:
    """Totals of :func:`run_models`."""

    cases: int = 0
    counts: dict = dataclasses.field(default_factory=dict)
    reasons: dict = dataclasses.field(default_factory=dict)
    findings: list = dataclasses.field(default_factory=list)  # (case, Outcome) for crash/timeout/error
    worker_starts: int = 0
    seconds: float = 0.0


def run_models(
    models: Iterable, *, worker: Worker | None = None, on_outcome=None, keep_findings: int = 1000, **defaults
) -> Summary:
    """Run every model of ``models`` through :func:`run_model`, reusing one worker.

    Parameters
    ----------
    models : iterable
        Each item is model bytes, or ``(bytes, options)`` where ``options``
        are :func:`run_model` keyword arguments for that case (e.g.
        ``use_xnnpack``, ``custom_ops``, ``resize``).
    worker : Worker, optional
        Default: a new one, closed at the end.  It is restarted after each crash.
    on_outcome : callable, optional
        ``on_outcome(index, model_bytes, options, outcome)``, e.g. to save crashers.
    **defaults
        :func:`run_model` arguments for every case.

    Returns
    -------
    Summary
    """
    own = worker is None
    if own:
        worker = Worker(memory_limit=defaults.pop("memory_limit", None), forward_stderr=False)
    summary = Summary()
    t0 = time.perf_counter()
    try:
        for index, item in enumerate(models):
            data, options = item if isinstance(item, tuple) else (item, {})
            outcome = run_model(data, worker=worker, **{**defaults, **options})
            summary.cases += 1
            summary.counts[outcome.status] = summary.counts.get(outcome.status, 0) + 1
            if outcome.status != "ok":
                key = f"{outcome.status} at {outcome.stage}: {outcome.reason[:120]}"
                summary.reasons[key] = summary.reasons.get(key, 0) + 1
            if outcome.status in ("crash", "timeout", "error") and len(summary.findings) < keep_findings:
                summary.findings.append((index, outcome))
            if on_outcome is not None:
                on_outcome(index, data, options, outcome)
    finally:
        summary.worker_starts = worker.starts
        if own:
            worker.close()
        summary.seconds = time.perf_counter() - t0
    return summary
