"""Isolated execution: the TFLite runtime in a worker process, the Interpreter API in yours.

::

    it = opaque_ops.Interpreter(model_path="untrusted.tflite", isolate=True, timeout=5)

A crash in the runtime, the model or a kernel then kills the worker, not
your process, and surfaces as :class:`opaque_ops.RuntimeCrashError`; a call
that overruns ``timeout`` raises :class:`opaque_ops.RuntimeTimeoutError`.
See the README's "Isolation" section for what it costs and what crosses the
process boundary.

- :class:`IsolatedInterpreter` -- what ``Interpreter(..., isolate=True)`` returns;
- :class:`Worker` -- a worker process reusable across interpreters;
- :func:`run_model` / :func:`run_models` -- run model bytes (e.g. a fuzzer's)
  through an isolated interpreter and classify the outcome;
- :func:`isolate_by_default` -- make ``isolate=None`` mean True (the pytest
  plugin's ``isolate`` marker uses it).

The switch for ``isolate=None`` lives in the interpreter layer
(:mod:`opaque_ops.interpreter.isolation_default`), which ``Interpreter``
reads; this package re-exports it and registers :class:`IsolatedInterpreter`
there, so this module stays light: the rest loads on first use.
"""

from __future__ import annotations

from ..interpreter.isolation_default import (  # noqa: F401  (public names of this package)
    isolate_by_default,
    register_isolated,
    set_isolated_default,
    wants_isolation,
)


def _isolated_interpreter() -> type:
    from .proxy import IsolatedInterpreter

    return IsolatedInterpreter


# Interpreter(..., isolate=True) creates an IsolatedInterpreter (loaded on first use).
register_isolated(_isolated_interpreter)

_LAZY = {
    "IsolatedInterpreter": ("proxy", "IsolatedInterpreter"),
    "IsolatedSignatureRunner": ("proxy", "IsolatedSignatureRunner"),
    "Worker": ("workers", "Worker"),
    "run_model": ("run", "run_model"),
    "run_models": ("run", "run_models"),
    "Outcome": ("run", "Outcome"),
}

__all__ = sorted(list(_LAZY) + ["isolate_by_default", "set_isolated_default", "wants_isolation"])


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'opaque_ops.isolate' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__
