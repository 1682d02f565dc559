"""Delegate plugins: ``tflite_plugin_create_delegate`` / ``tflite_plugin_destroy_delegate``.

The plugin interface tflite_runtime's ``load_delegate`` uses
(tensorflow/lite/delegates/external/external_delegate_interface.h): the
shared library exports a function that takes the options as two arrays of C
strings and returns a ``TfLiteDelegate*``, and one that destroys it.  Coral's
Edge TPU library and vendor NPU delegates ship in this form.

Ownership: plugin libraries are never unloaded (an interpreter may run their
code until it is deleted, and their delegates may outlive any Python object),
one handle per path.  A delegate is destroyed by its own plugin once its
Python owner is gone and every interpreter that used it has been deleted
(:class:`.lifetime.Shared`).
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import os

from .._records import renew_after_fork
from ..errors import DelegateError
from .ffi import dlopen, ffi
from .lifetime import Shared
from .runtime_loader import load_runtime

_plugins: dict[str, object] = {}
_plugins_lock = _thread.allocate_lock()

# Messages the plugin reports while its create function runs.  Creation is
# serialized by _create_lock, so one list suffices.
_create_lock = _thread.allocate_lock()
_messages: list[str] = []


def _report(message):
    try:
        _messages.append(ffi.string(message).decode("utf-8", "replace") if message != ffi.NULL else "")
    except Exception:  # pragma: no cover - must not raise into C
        pass


_report_cb = None


# A fork while another thread loaded a plugin or created a delegate left
# the child's copy of that lock held by a thread the child does not have:
# the child's first load_delegate() waited forever.  Re-created, not
# taken around the fork: a plugin's creation can take long (a device to
# open), and every fork would wait for it.  A plugin is stored once
# loaded, so the child has it or loads it again; messages of the other
# thread's creation left in _messages are cleared by the child's first.
# tests/native/test_native_delegate.py forks inside both locks.
renew_after_fork(globals(), _plugins_lock=_thread.allocate_lock, _create_lock=_thread.allocate_lock)


def _plugin(path: str):
    with _plugins_lock:
        lib = _plugins.get(path)
        if lib is None:
            try:
                lib = dlopen(path, ffi.RTLD_NOW | ffi.RTLD_LOCAL)
            except OSError as exc:
                raise DelegateError(f"Failed to load delegate from {path}\n{exc}") from None
            for name in ("tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate"):
                try:
                    getattr(lib, name)
                except AttributeError:
                    raise DelegateError(
                        f"Failed to load delegate from {path}\nit does not export {name}(); a delegate "
                        "plugin exports tflite_plugin_create_delegate and tflite_plugin_destroy_delegate "
                        "(tensorflow/lite/delegates/external/external_delegate_interface.h)"
                    ) from None
            _plugins[path] = lib
        return lib


class NativeDelegate:
    """One delegate created by a plugin.

    Attributes
    ----------
    pointer : cdata ``TfLiteOpaqueDelegate*``
        What ``TfLiteInterpreterOptionsAddDelegate`` takes.
    """

    def __init__(self, library, options: dict):
        global _report_cb
        path = os.fspath(library)
        # A plugin's TfLite* references resolve against the runtime, which
        # is loaded with RTLD_GLOBAL: load it first.
        load_runtime()
        lib = _plugin(path)
        items = [(str(k).encode("utf-8"), str(v).encode("utf-8")) for k, v in (options or {}).items()]
        # Keep-alive for the call: the arrays and the strings they point to.
        keys = [ffi.new("char[]", k) for k, _ in items]
        values = [ffi.new("char[]", v) for _, v in items]
        karr = ffi.new("char*[]", keys or [ffi.NULL])
        varr = ffi.new("char*[]", values or [ffi.NULL])
        with _create_lock:
            if _report_cb is None:
                _report_cb = ffi.callback("oo_delegate_report", _report)
            _messages.clear()
            ptr = lib.tflite_plugin_create_delegate(karr, varr, len(items), _report_cb)
            msgs = list(_messages)
        if ptr == ffi.NULL:
            raise DelegateError(
                f"Failed to load delegate from {path}\n"
                + ("\n".join(msgs) or "tflite_plugin_create_delegate returned NULL")
            )
        self.path = path
        self.messages = msgs
        self.pointer = ptr
        self._shared = Shared(lambda lib=lib, ptr=ptr: lib.tflite_plugin_destroy_delegate(ptr))

    def hold(self) -> None:
        self._shared.hold()

    def release(self) -> None:
        self._shared.release()

    def __del__(self):
        shared = getattr(self, "_shared", None)
        if shared is not None:
            try:
                shared.abandon()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
