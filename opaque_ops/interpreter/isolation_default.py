"""What ``isolate=`` means, and which class an isolated Interpreter is.

The switch lives in the interpreter layer because ``Interpreter(...)``
reads it; :mod:`opaque_ops.isolate`, the layer above, re-exports
:func:`wants_isolation`, :func:`set_isolated_default` and
:func:`isolate_by_default` unchanged, and registers its proxy class here
(:func:`register_isolated`) when it is imported.  So this layer never imports
the isolate layer: the dependency points down, the registration up.
``opaque_ops/__init__`` imports :mod:`opaque_ops.isolate` (a light module),
so the registration has happened whenever ``opaque_ops`` is imported.
"""

from __future__ import annotations

import contextlib
from typing import Callable

_default = False
# Returns the class Interpreter(..., isolate=True) creates (opaque_ops.isolate
# registers one that imports its proxy module on first use).
_isolated_class: Callable[[], type] | None = None


def wants_isolation(isolate) -> bool:
    """What ``Interpreter(..., isolate=isolate)`` means: True, a Worker, or None under
    :func:`isolate_by_default`."""
    if isolate is None:
        return _default
    return bool(isolate)


def set_isolated_default(value: bool) -> bool:
    """Set what ``isolate=None`` means for ``Interpreter`` and ``testing.run_op``; return the old value."""
    global _default
    old, _default = _default, bool(value)
    return old


@contextlib.contextmanager
def isolate_by_default(value: bool = True):
    """Within the block, ``Interpreter(...)`` and ``run_op(...)`` without ``isolate=`` run isolated.

    The setting is process-wide (threads started inside see it too).
    """
    old = set_isolated_default(value)
    try:
        yield
    finally:
        set_isolated_default(old)


def register_isolated(factory: Callable[[], type]) -> None:
    """Name the class ``Interpreter(..., isolate=True)`` creates: ``factory()`` returns it."""
    global _isolated_class
    _isolated_class = factory


def isolated_class() -> type:
    """The registered isolated Interpreter class (see :func:`register_isolated`)."""
    if _isolated_class is None:  # pragma: no cover - opaque_ops/__init__ imports opaque_ops.isolate
        raise RuntimeError(
            "isolate=True needs opaque_ops.isolate, which registers the isolated "
            "Interpreter; import opaque_ops.isolate first"
        )
    return _isolated_class()
