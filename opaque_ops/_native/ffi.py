"""The one ``cffi.FFI`` of the binding, declared from ``tflite_c.h``.

Every module of :mod:`opaque_ops._native` imports ``ffi`` from here; nothing
outside the ``_native`` package touches it.

The declarations come pre-parsed from ``_ffi_abi.py`` (cffi's out-of-line ABI
mode, written by ``tools/gen_ffi.py``): parsing the header with pycparser takes
40-70 ms at every process start, loading the module about 2 ms.  Still ABI
mode, with no compiler.  The module is used only while it was made from this
very header (its digest, :mod:`opaque_ops._digest`), so an edited header is never silently ignored: it
is parsed here instead, until the module is written again.
"""

from __future__ import annotations

import os

from .. import _digest
from . import elf

# A str, not a pathlib.Path: pathlib (and urllib.parse, which it imports) costs
# 2-3 ms of a process's start-up, and nothing a start-up runs needs it.
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tflite_c.h")


def declared(header: str | os.PathLike = HEADER):
    """An FFI holding ``header``'s declarations: the pre-parsed module's when it matches."""
    with open(header, "rb") as f:
        data = f.read()
    try:
        from . import _ffi_abi

        if _ffi_abi.HEADER_DIGEST == _digest.of_bytes(data):
            return _ffi_abi.ffi
    except Exception:  # noqa: BLE001 - missing, or made for another cffi: parse instead
        pass
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(data.decode())
    return ffi


ffi = declared()


class Library:
    """A loaded library (what :func:`dlopen` returns), as a live ``cdef`` would give it.

    With pre-parsed declarations, a declared function the library does not
    define raises ``ffi.error`` when reached; with a parsed header it raises
    ``AttributeError``.  The binding probes optional functions with
    ``getattr``/``hasattr`` (API generations, libc's ``sem_clockwait``, a
    plugin's exports), so it always gets ``AttributeError``.  Each function is
    kept on first use: later calls cost a plain attribute lookup.  (The header
    declares functions and constants only: nothing here can change after
    loading.)
    """

    def __init__(self, lib):
        self.__dict__["_lib"] = lib  # keep-alive: the handle, never closed

    def __getattr__(self, name):
        try:
            value = getattr(self._lib, name)
        except ffi.error as exc:
            raise AttributeError(str(exc)) from None
        self.__dict__[name] = value
        return value

    def __dir__(self):
        return dir(self._lib)


class DamagedLibraryError(OSError):
    """The file to load is a truncated or damaged ELF file (see :func:`.elf.damage`)."""


def dlopen(path, flags: int = 0) -> Library:
    """``ffi.dlopen(path, flags)``; see :class:`Library`.

    Every library the binding loads comes through here, so a file named by
    path is checked first (:func:`.elf.damage`): ``dlopen`` of a truncated
    ``.so`` (an interrupted copy) kills the process with SIGBUS.  A damaged
    file raises :class:`DamagedLibraryError`, an ``OSError`` that each loader
    turns into its own error class as it does ``dlopen``'s failures.
    """
    if path is not None and os.sep in os.fspath(path):
        problem = elf.damage(path)
        if problem:
            raise DamagedLibraryError(
                f"{os.fspath(path)} is truncated or damaged: {problem}. An interrupted copy or download "
                "leaves such a file; reinstall or rebuild it (copy it again in full)"
            )
    return Library(ffi.dlopen(path, flags))
