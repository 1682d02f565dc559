"""What opaque_ops.isolate needs from C: shared semaphores and the worker's helper.

- :class:`SharedSemaphore`: a process-shared POSIX semaphore living in a
  shared-memory mapping.  A request/reply round trip through two of them
  costs a few microseconds, several times less than a pipe; waiting releases
  the GIL (every cffi call does), so other Python threads run meanwhile.
- :func:`load_helper` / :class:`Helper`: ``c/src/isolate_helper.c``, the
  worker's fatal-signal handler and its telemetry profiler.
"""

from __future__ import annotations

import os
import time

from . import native_interpreter as interp
from .ffi import dlopen, ffi
from .runtime_loader import load_runtime

_CLOCK_MONOTONIC = 1

# How long a waiter polls before it sleeps in sem_wait (seconds).  A sleeping
# waiter is woken through the kernel's scheduler; on an idle virtual machine
# that wake-up costs tens of microseconds (the vCPU halts and must be woken by
# the hypervisor), while the other side of a tiny-model round trip answers in
# a few.  Polling a little first turns most round trips into no sleep at all;
# the cap bounds what it wastes when the answer is slow (a long invoke) or the
# CPUs are oversubscribed.  One CPU: never poll, the other side cannot run.
# OPAQUE_OPS_ISOLATE_SPIN_US=0 turns it off.
_SPIN_S = float(os.environ.get("OPAQUE_OPS_ISOLATE_SPIN_US", "20")) * 1e-6
if (os.cpu_count() or 1) < 2:
    _SPIN_S = 0.0

_libc = dlopen(None)
try:
    _clockwait = _libc.sem_clockwait  # glibc >= 2.30: immune to wall-clock jumps
except AttributeError:  # pragma: no cover - older glibc
    _clockwait = None


class SharedSemaphore:
    """A semaphore at ``offset`` in a shared, writable ``buffer`` (an mmap).

    Parameters
    ----------
    buffer : mmap.mmap
        A ``MAP_SHARED`` mapping; it is kept alive by this object.
    offset : int
        Where the 32 bytes of the ``sem_t`` are; 8-byte aligned.
    create : bool
        Initialise it (value 0).  Exactly one process does this, before the
        other one maps the memory.
    """

    __slots__ = ("_buf", "_ptr", "post", "_ts", "_trywait", "_wait")

    def __init__(self, buffer, offset: int, create: bool = False):
        if offset % 8:
            raise ValueError("a semaphore must be 8-byte aligned")
        self._buf = ffi.from_buffer(buffer, require_writable=True)  # keep-alive: the mapping
        self._ptr = self._buf + offset
        if create and _libc.sem_init(self._ptr, 1, 0) != 0:
            raise OSError(ffi.errno, "sem_init failed")
        # Prebound C calls: the round trip is the hot path of an isolated invoke.
        self.post = _bind(_libc.sem_post, self._ptr)
        self._trywait = _bind(_libc.sem_trywait, self._ptr)
        self._wait = _bind(_libc.sem_wait, self._ptr)
        self._ts = ffi.new("struct timespec*")

    def _poll(self) -> bool:
        """Poll for up to ``_SPIN_S`` before a blocking wait; True if acquired."""
        trywait = self._trywait
        if trywait() == 0:
            return True
        if _SPIN_S:
            clock = time.perf_counter
            end = clock() + _SPIN_S
            while clock() < end:
                if trywait() == 0:
                    return True
        return False

    def wait(self) -> bool:
        """Wait until posted; False if a signal interrupted the wait.

        The fast path: a short poll, then an untimed wait, which wakes up
        faster than a timed one (no timer to arm and cancel); use
        :meth:`acquire` when a deadline matters.
        """
        return self._poll() or self._wait() == 0

    def try_acquire(self) -> bool:
        """Take the semaphore if it is posted; never blocks."""
        return self._trywait() == 0

    def acquire(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if acquired.

        False means the time ran out or a signal interrupted the wait (the
        caller's loop runs Python's signal handlers and decides).
        """
        if self._poll():
            return True
        if _clockwait is not None:
            now = time.clock_gettime(time.CLOCK_MONOTONIC)
        else:  # pragma: no cover
            now = time.time()
        deadline = now + max(timeout, 0.0)
        sec = int(deadline)
        self._ts.tv_sec = sec
        self._ts.tv_nsec = int((deadline - sec) * 1e9)
        if _clockwait is not None:
            rc = _clockwait(self._ptr, _CLOCK_MONOTONIC, self._ts)
        else:  # pragma: no cover
            rc = _libc.sem_timedwait(self._ptr, self._ts)
        return rc == 0


def _bind(fn, ptr):
    import functools

    return functools.partial(fn, ptr)


def moved_probe(native, tensors):
    """A function telling whether any of ``tensors`` of ``native`` (a NativeInterpreter) left its place.

    ``tensors`` holds ``(tensor index, address, nbytes)``: where each
    tensor's data was and how big it was.  TFLite may reallocate a tensor
    during ``invoke`` (an op that resizes its output makes it dynamic), even
    one placed in a custom allocation; and it may move the TfLiteTensor
    structs themselves (2.23 grows its tensor table while it prepares a
    dynamic model's ops), so each is looked up again by index.  Three C calls
    per tensor, no Python objects made: this runs after every isolated invoke.
    """
    lib = load_runtime().lib
    get, data, size = lib.TfLiteInterpreterGetTensor, lib.TfLiteTensorData, lib.TfLiteTensorByteSize
    interp = native._interp  # native outlives the probe: the placement that keeps both holds it
    checks = [(int(i), ffi.cast("void*", address), nbytes) for i, address, nbytes in tensors]

    def moved() -> bool:
        for index, address, nbytes in checks:
            t = get(interp, index)
            if t == ffi.NULL or data(t) != address or size(t) != nbytes:
                return True
        return False

    return moved


class Helper:
    """The loaded ``isolate_helper`` library of one worker process."""

    def __init__(self, path: str):
        load_runtime()  # its runtime glue resolves TfLite* symbols against the loaded runtime
        self._lib = dlopen(path)  # never closed: its handlers stay installed
        self.path = path

    def install(self, buffer, record_offset: int, wake: SharedSemaphore) -> None:
        """Install the fatal-signal handlers; they write the crash record at
        ``record_offset`` of ``buffer`` and post ``wake``."""
        base = ffi.from_buffer(buffer, require_writable=True)
        # Keep-alive: the handler writes through these pointers until the process ends.
        self._record_buf = base
        self._wake = wake
        if self._lib.OoIsolate_Install(base + record_offset, wake._ptr) != 0:
            raise OSError(ffi.errno, "sigaction failed while installing the crash handler")

    def attach_profiler(self) -> None:
        """Give every interpreter created from now on the helper's op tracker."""
        interp.PROCESS_PROFILER = self._lib.OoIsolate_Profiler()

    def reset_profiler(self) -> None:
        self._lib.OoIsolate_ResetProfiler()


def load_helper(path: str) -> Helper:
    """Load the compiled ``isolate_helper`` library at ``path``."""
    return Helper(path)
