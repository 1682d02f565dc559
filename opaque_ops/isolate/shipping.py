"""How ``custom_ops`` and ``experimental_delegates`` reach the isolated worker.

Through the classes' own ``__reduce__``, as in any pickle or process pool
(see :mod:`opaque_ops.ops`): a bundled kernel crosses by name (the worker
loads or builds its own, with the parent's file as the fallback), a
``compile_ops`` library through the worker's verified compile cache or its
source, a ``load_ops`` library by path, a python op by reference to its
functions, a delegate by plugin path and options.  This module adds only
what the worker needs besides: the parent's ``__main__`` script (so that a
script's own python_op functions can be found there) and, for a python op
that cannot cross, a message that names it.

:func:`pack_ops` / :func:`pack_delegates` run in the parent,
:func:`unpack_ops` / :func:`unpack_delegates` in the worker.
"""

from __future__ import annotations

import os
import pickle
import sys

from ..errors import OpaqueOpsError
from ..ops.provider import OpProvider, not_an_op_provider
from ..ops.python_op import PythonOp


def pack_ops(custom_ops) -> tuple[list, str | None]:
    """``custom_ops`` pickled for the worker: ``([(python op name or None, pickle)], main_path)``.

    ``main_path`` is the ``__main__`` script to import in the worker when a
    python op's functions live there.  A path to a prebuilt library goes as
    an absolute path: the parent never loads it.
    """
    packed: list = []
    main_path = None
    for item in custom_ops or ():
        if isinstance(item, (str, os.PathLike)):
            packed.append((None, pickle.dumps(os.path.abspath(os.fspath(item)))))
            continue
        if not isinstance(item, OpProvider):
            raise not_an_op_provider(item)
        name = item.name if isinstance(item, PythonOp) else None
        if name is not None:
            main_path = _main_script(item) or main_path
        try:
            blob = pickle.dumps(item)
        except Exception as exc:  # noqa: BLE001 - lambdas, closures, bound methods of local objects
            if name is None:
                raise
            raise OpaqueOpsError(
                f"python_op {name!r} cannot run in an isolated worker: its functions must be "
                f"importable there, and pickle could not send them ({type(exc).__name__}: {exc}). "
                "Define invoke/prepare/init at module level (not as lambdas or nested functions), "
                "or run it in-process (isolate=False)."
            ) from None
        packed.append((name, blob))
    return packed, main_path


def _main_script(op: PythonOp) -> str | None:
    """The parent's ``__main__`` script if one of the op's functions is defined in it."""
    for what, fn in op.functions().items():
        if fn is None or getattr(fn, "__module__", None) != "__main__":
            continue
        path = getattr(sys.modules["__main__"], "__file__", None)
        if path is None:
            raise OpaqueOpsError(
                f"python_op {op.name!r}: its {what} function is defined in an interactive "
                "session, which the isolated worker cannot import; define it in a module"
            )
        return os.path.abspath(path)
    return None


def unpack_ops(packed) -> list:
    """The worker's half of :func:`pack_ops`: each item re-created by its class's restore."""
    ops = []
    for name, blob in packed:
        try:
            ops.append(pickle.loads(blob))
        except OpaqueOpsError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            if name is None:
                raise
            raise OpaqueOpsError(
                f"python_op {name!r}: its functions could not be loaded in the isolated worker "
                f"({type(exc).__name__}: {exc}). Define them at module level in a module the "
                "worker can import (it gets the parent's sys.path)."
            ) from None
    return ops


def pack_delegates(delegates) -> bytes:
    """``experimental_delegates`` pickled for the worker (each one: its plugin's path and options)."""
    from ..ops.delegates import Delegate

    for d in delegates:
        if not isinstance(d, Delegate):
            raise TypeError(
                f"experimental_delegates must hold delegates from opaque_ops.load_delegate(), not {type(d).__name__}"
            )
    return pickle.dumps(list(delegates))


def unpack_delegates(blob: bytes) -> list:
    """The worker's half of :func:`pack_delegates`: the same plugins, with the same options, make its own."""
    return pickle.loads(blob)
