"""Loading the fast calls extension (``c/src/fastcalls.c``) and the addresses it calls.

The extension is a CPython module, so it is imported, not opened with cffi;
the import is a ``dlopen`` all the same, so the file is checked for ELF
damage first, as :func:`.ffi.dlopen` checks every library (a truncated
``.so`` would kill the process with SIGBUS).  Where the file comes from
(prebuilt, compiled) is decided above this package
(:mod:`opaque_ops.interpreter.fast_calls`).
"""

from __future__ import annotations

# CPython's import system, always loaded: importlib.util's spec_from_file_location
# and module_from_spec, and importlib.machinery's ExtensionFileLoader, are these
# modules' own functions.  Taken from here, loading the extension imports
# neither (importlib.util cost every start-up 0.45 ms).
import _frozen_importlib
import _frozen_importlib_external
import os
import sys

from . import elf
from .ffi import DamagedLibraryError, ffi

# The module's init function is PyInit__fastcalls: the name it is imported under.
MODULE_NAME = "opaque_ops._fastcalls"
# What this Python side expects of the module (its ABI constant).
ABI = 3
# The string fastcalls.c puts in the file: "<MARKER>3.13;" (or "3.13t;").
MARKER = b"opaque_ops fast calls for CPython "
# This Python, as the module's string names it.
RUNNING = f"{sys.version_info[0]}.{sys.version_info[1]}" + ("t" if "t" in getattr(sys, "abiflags", "") else "")


def built_for(path: str | os.PathLike) -> str | None:
    """The CPython the fast calls module at ``path`` was built for ("3.13"), read without importing it.

    None if the file names none (not a fast calls module of this version).
    The file is read in blocks, so that a large file named by mistake is
    never held whole in memory.
    """
    window = len(MARKER) + 16  # the marker and its version, up to the ";"
    with open(path, "rb") as f:
        tail = b""
        while True:
            block = f.read(1 << 20)
            data = tail + block
            at = data.find(MARKER)
            # Decide once the window after the marker is read, or the file ends.
            if at >= 0 and (len(data) - at >= window or not block):
                end = data.find(b";", at + len(MARKER), at + window)
                return data[at + len(MARKER) : end].decode("ascii", "replace") if end >= 0 else None
            if not block:
                return None
            tail = data[-window:]  # a marker cut by this block's end is whole in the next read


def load_extension(path: str | os.PathLike):
    """Import the compiled fast calls module at ``path``; return it.

    Raises
    ------
    DamagedLibraryError
        The file is truncated or damaged (checked before the import).
    ImportError
        The import failed, the file is not built for this Python (checked
        before the import: importing it could crash), or the module is of
        another ``ABI``.
    """
    problem = elf.damage(path)
    if problem:
        raise DamagedLibraryError(
            f"{os.fspath(path)} is truncated or damaged: {problem}; delete it, and it is built again"
        )
    python = built_for(path)
    if python != RUNNING:
        raise ImportError(
            f"{os.fspath(path)} is "
            + (
                f"a fast calls module built for CPython {python}"
                if python
                else "not a fast calls module of this version"
            )
            + f", and this is CPython {RUNNING}; it is not imported"
        )
    loader = _frozen_importlib_external.ExtensionFileLoader(MODULE_NAME, os.fspath(path))
    spec = _frozen_importlib_external.spec_from_file_location(MODULE_NAME, os.fspath(path), loader=loader)
    if spec is None:  # pragma: no cover - a file path with an extension loader always gives a spec
        raise ImportError(f"cannot import {path}")
    module = _frozen_importlib.module_from_spec(spec)
    loader.exec_module(module)
    if getattr(module, "ABI", None) != ABI:
        raise ImportError(f"{path} is a fast calls module of ABI {getattr(module, 'ABI', None)}, not {ABI}")
    return module


# What the C invoke calls, in the order Calls.bind takes them.
_FUNCTIONS = (
    "TfLiteInterpreterInvoke",
    "TfLiteInterpreterGetTensor",
    "TfLiteTensorData",
    "TfLiteTensorByteSize",
    "TfLiteTensorNumDims",
    "TfLiteTensorDim",
)


def entry_points(native) -> tuple[int, tuple[int, ...]] | None:
    """``(TfLiteInterpreter*, (functions...))`` as integers, for ``Calls.bind``.

    None when ``native`` (a :class:`~.native_interpreter.NativeInterpreter`)
    has no live interpreter, or when its ``invoke`` is not TFLite's own (hooks
    wrapped it, as an isolated worker's stages do): then the fast invoke
    must not bypass it.
    """
    if native.hooks is not None:
        return None
    return _addresses(native, _FUNCTIONS)


# What planned_tensors calls, in the order it takes them.
_PLANNED_FUNCTIONS = ("TfLiteInterpreterGetTensor", "TfLiteTensorGetAllocationStrategy")


def cancel_address(rt) -> int:
    """``TfLiteInterpreterCancel``'s address in runtime ``rt``, as an integer (0: it has none), for the Ctrl-C guard."""
    return address(rt.lib.TfLiteInterpreterCancel) if rt.has("TfLiteInterpreterCancel") else 0


def address(pointer) -> int:
    """A C pointer (a cffi pointer or function) as an integer, as the module's functions take them."""
    return int(ffi.cast("uintptr_t", pointer))


def planned_entry_points(native) -> tuple[int, tuple[int, ...]] | None:
    """``(TfLiteInterpreter*, (functions...))`` as integers, for the module's ``planned_tensors``.

    None when ``native`` has no live interpreter.
    """
    return _addresses(native, _PLANNED_FUNCTIONS)


def _addresses(native, functions) -> tuple[int, tuple[int, ...]] | None:
    """``native``'s TfLiteInterpreter* and the named C API functions, as integers (None: no live interpreter)."""
    interp = getattr(native, "_interp", None)
    if interp is None or interp == ffi.NULL:
        return None
    lib = native.rt.lib
    return address(interp), tuple(address(getattr(lib, f)) for f in functions)
