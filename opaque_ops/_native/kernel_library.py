"""Kernel libraries (compiled by ``compile_ops`` or ``build.py``) and their operators."""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")

from .._records import renew_after_fork, renew_each_after_fork
from ..errors import OpLibraryError
from . import elf
from .ffi import dlopen, ffi
from .runtime_loader import load_runtime

# Bumped together with OPAQUE_OPS_ABI_VERSION in c/include/opaque_ops.h.
ABI_VERSION = 1


def parse_stamp(stamp: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in stamp.split(";") if "=" in p)


class KernelLibrary:
    """A loaded kernel library (compiled by ``compile_ops`` or ``build.py``).

    The handle is never closed: TFLite may call into the library for as long
    as any interpreter that was given one of its operators exists, and
    Python cannot prove when that ends.
    """

    def __init__(self, path: str, host_arch: str = "<this machine's architecture>"):
        runtime = load_runtime()
        runtime.require_custom_ops(f"kernel library {path}")
        # Compared with the running executable's own ELF header, not by
        # name: a 32-bit Python on a 64-bit ARM kernel reports "aarch64".
        problem = elf.load_problem(path)
        if problem:
            raise OpLibraryError(
                f"cannot load kernel library {path}: it {problem}; rebuild it for this machine "
                f"with `opaque-ops build SOURCE.c --target {host_arch}` "
                "(or compile the source here with opaque_ops.compile_ops)"
            )
        try:
            self._lib = dlopen(path, ffi.RTLD_NOW | ffi.RTLD_LOCAL)
        except OSError as exc:
            raise OpLibraryError(f"could not load kernel library {path}: {exc}") from None
        try:
            stamp = ffi.string(self._lib.OpaqueOps_Stamp()).decode()
        except AttributeError:
            raise OpLibraryError(
                f"{path} is not an opaque_ops kernel library (no OpaqueOps_Stamp); build it "
                "with opaque_ops.compile_ops() or build.py, which add the runtime glue"
            ) from None
        fields = parse_stamp(stamp)
        if fields.get("abi") != str(ABI_VERSION):
            raise OpLibraryError(
                f"{path} was built with opaque_ops header ABI {fields.get('abi')} "
                f"(header {fields.get('header')}), but this opaque_ops expects ABI {ABI_VERSION}; "
                "rebuild the library with this version of opaque_ops"
            )
        self.path = path
        self.stamp = fields
        self.runtime = runtime
        self._ops: dict[int, Operator] = {}
        self._ops_lock = _thread.allocate_lock()

    def op_defs(self) -> list[tuple[str, int]]:
        """Return the ``(name, version)`` of every op the library declares (version 0 = from the factory)."""
        out = []
        for i in range(self._lib.OpaqueOps_NumOps()):
            out.append((ffi.string(self._lib.OpaqueOps_OpName(i)).decode(), self._lib.OpaqueOps_OpVersion(i)))
        return out

    def simd_level(self) -> str | None:
        """The SIMD clone the library's kernels run (``opaque_ops/simd.h``), or None without one."""
        try:
            fn = self._lib.OpaqueOps_SimdLevel
        except AttributeError:  # a library none of whose kernels includes simd.h
            return None
        return ffi.string(fn()).decode()

    def make_operator(self, index: int) -> Operator:
        """The operator of op number ``index``, built on first request and then reused."""
        with self._ops_lock:
            op = self._ops.get(index)
            if op is None:
                ptr = self._lib.OpaqueOps_MakeOperator(index)
                if ptr == ffi.NULL:
                    raise OpLibraryError(
                        f"{self.path}: could not create op #{index}: "
                        + ffi.string(self._lib.OpaqueOps_LastError()).decode()
                    )
                op = self._ops[index] = Operator(ptr, owner=self)
            return op


# One KernelLibrary per file for the life of the process: dlopen returns the
# same handle for the same path anyway, and its operators are never freed
# (see Operator), so building them once per file bounds what is kept.
_kernel_libraries: dict[str, KernelLibrary] = {}
_kernel_libraries_lock = _thread.allocate_lock()


def kernel_library(path: str, host_arch: str = "<this machine's architecture>") -> KernelLibrary:
    """Load (once) the kernel library at ``path`` (absolute).

    ``host_arch`` names this machine's architecture in the message that
    refuses a library built for another (the build layer knows it).
    """
    with _kernel_libraries_lock:
        lib = _kernel_libraries.get(path)
        if lib is None:
            lib = _kernel_libraries[path] = KernelLibrary(path, host_arch)
        return lib


# A lock another thread held at the fork stays held in the child, by a
# thread the child does not have: the child's first load of a library
# (or first operator of one) waited forever.  They are re-created, not
# taken around the fork: a first load holds the lock while the runtime
# and the library load, which can take long.  What they guard is safe
# to use as the child finds it: a library and an operator are stored
# once made, so the child has either the finished object or none, and
# makes the missing one again (an operator made but not stored by the
# other thread is one small allocation, never freed anyway: see Operator).
# tests/native/test_kernel_library.py forks inside each lock.
renew_after_fork(globals(), _kernel_libraries_lock=_thread.allocate_lock)
renew_each_after_fork(_kernel_libraries.values(), _ops_lock=_thread.allocate_lock)


class Operator:
    """One ``TfLiteOperator``, never deleted.

    TFLite keeps a pointer to the operator in every interpreter it was added
    to, and calls its ``free`` when such an interpreter is deleted.  The
    garbage collector may finalize an operator before an interpreter that
    uses it (objects in a reference cycle die in any order), so deleting it
    could leave TFLite a dangling pointer.  A guide-style factory may also
    hand out a singleton that is not ours to delete.  The cost is one small
    allocation per op and library (or per python_op), for the process's life.
    """

    def __init__(self, ptr, owner, keepalive=()):
        self._ptr = ptr
        # The library (or Python callbacks) whose code the operator points into.
        self._owner = owner
        self._keepalive = keepalive
        rt = load_runtime()
        self.name = ffi.string(rt.operator_name(ptr)).decode()
        self.version = int(rt.operator_version(ptr))

    # Every interpreter the operator is added to calls hold(), and release()
    # once it is deleted.  A C kernel's operator needs no count (its library
    # is never unloaded); a Python op's does (see python_operator.PyOperator).
    def hold(self) -> None:
        """An interpreter now points at this operator."""

    def release(self) -> None:
        """An interpreter that pointed at this operator has been deleted."""
