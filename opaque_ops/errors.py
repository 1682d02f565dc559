"""The exception tree of opaque_ops.

Every error the library raises on purpose derives from :class:`OpaqueOpsError`.
Each class also derives from the standard exception that ``tflite_runtime``
and ``ai-edge-litert`` raise in the same situation, so client code written
for them (``except RuntimeError:`` around ``allocate_tensors()``,
``except ValueError:`` around ``set_tensor()``) keeps working.  Where the
references raise different types for one situation (``get_tensor`` before
allocation is a ``ValueError`` there, ``invoke`` before allocation a
``RuntimeError``), the class derives from both.
"""

from __future__ import annotations

from collections.abc import Iterable


class OpaqueOpsError(Exception):
    """Base class of every error raised by opaque_ops."""


class RuntimeNotFoundError(OpaqueOpsError, OSError):
    """The TFLite runtime cannot be loaded.

    Either the one the user named is unusable (the message says why), or the
    automatic lookup found none (the message lists where it looked).
    """


class UnknownRuntimeWarning(UserWarning):
    """The automatic lookup loaded a TFLite runtime that is not one of the builds opaque_ops was tested with."""


class TFLiteError(OpaqueOpsError, RuntimeError):
    """The TFLite runtime returned an error status.

    Attributes
    ----------
    status : int
        The ``TfLiteStatus`` value (1 = error, 7 = unresolved ops, 8 = cancelled).
    messages : list of str
        What the runtime and the kernels reported while the call ran.
    """

    def __init__(self, message: str, status: int = 1, messages: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.messages = list(messages or [])


class KernelError(TFLiteError):
    """A kernel (one of yours or a builtin) reported an error during prepare or invoke."""


class UnresolvedOpsError(TFLiteError):
    """The model uses custom ops that no registered library provides.

    Attributes
    ----------
    missing : list of tuple(str, int)
        ``(op name, version)`` for every op the model needs and nobody provides.
    registered : list of tuple(str, int)
        What the interpreter's op libraries do provide.
    """

    def __init__(
        self,
        message: str,
        missing: Iterable[str],
        registered: Iterable[tuple[str, int]],
        messages: list[str] | None = None,
    ):
        super().__init__(message, status=7, messages=messages)
        self.missing = list(missing)
        self.registered = list(registered)


class ModelError(OpaqueOpsError, ValueError, RuntimeError):
    """The model is not one the runtime can safely run.

    Raised when the model bytes are not a valid TFLite flatbuffer (corrupt,
    truncated, hostile), where the references raise ``ValueError``, and when
    the shapes planned by ``allocate_tensors()`` would crash the runtime,
    where the references raise ``RuntimeError`` (or crash).
    """


class ShapeError(ModelError):
    """The operator's input shapes do not fit together (:mod:`opaque_ops.model.shapes`).

    Defined here, not beside the shape rules, so that a verdict kept on disk
    can be loaded without importing the rules (a later start never runs them).
    """


class CompileError(OpaqueOpsError):
    """A C kernel source failed to compile; the message holds the compiler's ``file:line: message``."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


class CacheError(OpaqueOpsError, OSError):
    """The compile cache (or another directory opaque_ops writes) cannot be used safely.

    Raised when the directory is a file, cannot be written, or is owned by
    another user or writable by others; the message says how to fix it.
    """


class OpLibraryError(OpaqueOpsError):
    """A kernel library could not be loaded or does not provide what was asked of it."""


class ClosedError(OpaqueOpsError, ValueError):
    """The object was used after ``close()``."""


class InvalidInputError(OpaqueOpsError, ValueError):
    """An input array does not match the tensor (dtype, shape or size); the message says both."""


class ResizeError(InvalidInputError, RuntimeError):
    """``resize_tensor_input`` refused a shape (strict mode, not an input, a rank the runtime cannot take).

    The references raise ``RuntimeError`` here; earlier opaque_ops releases
    raised ``ValueError``, so it is both.
    """


class NotAllocatedError(OpaqueOpsError, ValueError, RuntimeError):
    """A call needs ``allocate_tensors()`` first (after creation or after a resize).

    The references raise ``RuntimeError`` from ``invoke()`` and ``ValueError``
    from ``get_tensor()``/``set_tensor()`` in this situation; this is both.
    """


class InvalidArgumentError(OpaqueOpsError, ValueError):
    """An argument is outside what the runtime can take (``num_threads`` out of range, say); the message gives the range."""


class ReadOnlyTensorError(InvalidInputError):
    """``set_tensor`` on a constant (a weight stored in the model), which the runtime reads in place."""


class LiveViewsError(OpaqueOpsError, RuntimeError):
    """A call that may move tensor memory was refused because ``tensor()`` views still point into it."""


class ReentrantCallError(OpaqueOpsError, RuntimeError):
    """An Interpreter was called from inside one of its own calls.

    A ``python_op`` callback (or a signal handler) that runs during
    ``invoke()`` or ``allocate_tensors()`` and calls back into the same
    interpreter would otherwise wait for itself forever.
    """


class UnsupportedError(OpaqueOpsError, NotImplementedError):
    """What was asked is not reachable through the TFLite C API (the message says what instead)."""


class DelegateError(OpaqueOpsError, ValueError):
    """A delegate plugin could not be loaded or created (the references raise ``ValueError``)."""


class RuntimeCrashError(OpaqueOpsError):
    """The TFLite runtime, the model or a kernel crashed the isolated worker process.

    Raised only by interpreters created with ``isolate=True``: the crash took
    down the child process, not yours.  The interpreter is closed afterwards
    (any use raises :class:`ClosedError`); a new one starts a fresh worker.

    Attributes
    ----------
    signal : str or None
        The signal by name (``"SIGSEGV"``, ``"SIGABRT"``, ...), or None if
        the worker exited without one.
    signum : int or None
    exitcode : int or None
        The worker's exit status when it exited without a signal.
    stage : str or None
        What the worker was doing: ``"create"``, ``"allocate"``, ``"invoke"``,
        ``"resize"``, ``"call"``, ``"run_op"``...
    node : int or None
        The node being invoked, when known (from TFLite's op profiler).
    op : str or None
        That node's op name.
    backtrace : list of str
        The C backtrace the worker printed, symbolized where possible.
    stderr : str
        The tail of the worker's stderr (C backtrace, Python traceback, and
        whatever the kernels printed).
    pid : int or None
        The worker's process id.
    """

    def __init__(
        self,
        message: str,
        *,
        signal: str | None = None,
        signum: int | None = None,
        exitcode: int | None = None,
        stage: str | None = None,
        node: int | None = None,
        op: str | None = None,
        backtrace: Iterable[str] = (),
        stderr: str = "",
        pid: int | None = None,
    ):
        super().__init__(message)
        self.signal = signal
        self.signum = signum
        self.exitcode = exitcode
        self.stage = stage
        self.node = node
        self.op = op
        self.backtrace = list(backtrace)
        self.stderr = stderr
        self.pid = pid


class MemoryLimitError(OpaqueOpsError, MemoryError):
    """The isolated worker ran out of memory under its ``memory_limit``.

    Raised by interpreters created with ``isolate=True`` when code in the
    worker (a python_op, a kernel's allocation that Python sees) raised
    :class:`MemoryError` there: the message names the cap, which is the likely
    cause.  It is a :class:`MemoryError` too, so code that catches that still
    does.  The worker stays usable.
    """


class TensorMemoryError(OpaqueOpsError, MemoryError):
    """The runtime could not get the memory its tensors need.

    TFLite does not report a failed allocation of its tensor arena: its
    ``AllocateTensors`` succeeds and every tensor points at address 0 plus its
    offset, where the first ``invoke`` would write.  opaque_ops checks for
    that after each allocation, closes the interpreter (its arena cannot be
    used again) and raises this.  It is a :class:`MemoryError` too.
    """


class RuntimeTimeoutError(OpaqueOpsError, TimeoutError):
    """An isolated interpreter's call ran past its ``timeout``.

    The worker is first asked to cancel (``TfLiteInterpreterCancel``, which
    stops between nodes).  If it stops, the interpreter stays usable and
    ``killed`` is False.  If not (a kernel that never returns), the worker is
    killed, ``killed`` is True, and the interpreter is closed.

    Attributes
    ----------
    stage : str
    timeout : float
    killed : bool
    stderr : str
        The tail of the worker's stderr, including where it was stuck (a C
        backtrace printed on request just before it was killed).
    """

    def __init__(
        self,
        message: str,
        *,
        stage: str | None = None,
        timeout: float | None = None,
        killed: bool = False,
        stderr: str = "",
    ):
        super().__init__(message)
        self.stage = stage
        self.timeout = timeout
        self.killed = killed
        self.stderr = stderr
