"""Delegates from plugins, as tflite_runtime's ``load_delegate`` loads them.

::

    delegate = opaque_ops.load_delegate("libedgetpu.so.1", {"device": "usb"})
    it = opaque_ops.Interpreter(model_path="m.tflite", experimental_delegates=[delegate])

The delegate claims the nodes it supports when the interpreter is created;
XNNPACK (if on) takes what it leaves, and the builtin kernels the rest.
"""

from __future__ import annotations

from .. import _native


class Delegate:
    """A delegate created by a plugin library; pass it in ``experimental_delegates=[...]``.

    Created by :func:`load_delegate`.  It is destroyed (by the plugin's own
    ``tflite_plugin_destroy_delegate``) once this object is gone and every
    interpreter that uses it has been deleted.

    Attributes
    ----------
    library : str
        The plugin's path.
    options : dict
        The options it was created with (an isolated interpreter's worker
        creates its own delegate from the same plugin and options).
    messages : list of str
        What the plugin reported while it created the delegate.
    """

    def __init__(self, library, options=None):
        self._native = _native.NativeDelegate(library, options or {})
        self._options = dict(options or {})  # for __reduce__: the other process loads the plugin again
        self.library = self._native.path
        self.options = dict(options or {})
        self.messages = self._native.messages

    def __repr__(self) -> str:
        return f"<Delegate from {self.library}>"

    def __reduce__(self):
        # The plugin's path and options: the receiving process (a pickle, a
        # pool, the isolated worker) loads the plugin and creates its own delegate.
        return load_delegate, (self.library, dict(self._options))


def load_delegate(library, options=None) -> Delegate:
    """Load a delegate plugin and create its delegate (tflite_runtime's ``load_delegate``).

    Parameters
    ----------
    library : str or path-like
        A shared library exporting ``tflite_plugin_create_delegate`` and
        ``tflite_plugin_destroy_delegate``
        (tensorflow/lite/delegates/external/external_delegate_interface.h).
    options : dict, optional
        Passed to the plugin as strings (keys and values go through ``str``).

    Returns
    -------
    Delegate

    Raises
    ------
    DelegateError
        The library cannot be loaded, lacks the entry points, or its create
        function returned NULL; the message holds what the plugin reported.
        It is a ``ValueError``, as in tflite_runtime.
    """
    return Delegate(library, options)


__all__ = ["Delegate", "load_delegate"]
