"""The fast calls: an in-process Interpreter's ``set_tensor``, ``invoke`` and ``get_tensor`` in C.

``c/src/fastcalls.c`` does the common case of each of the three calls in
one C call (its comment says what, and why it matches the Python methods);
every other case goes to the Python method, which stays the reference.  The
class's three methods become C method descriptors (:func:`attach`), so the
caller's ``interp.invoke()`` reaches C with no Python frame between.  Only
a plain :class:`~opaque_ops.Interpreter` gets a fast calls state: a
subclass may override the methods, and an isolated worker's interpreter
wraps its invoke in stage hooks that the C call would bypass.

Where the compiled module comes from, the first that works:

1. ``OPAQUE_OPS_FASTCALLS``: ``0`` turns the fast calls off; a path names
   the compiled module to use, and a failure to load it is an error (a test
   suite pins one build for all its processes with it);
2. the module prebuilt in a platform wheel (``prebuilt/<arch>/``, checked
   against the digests in its ``manifest.txt``), for the Python it was built for;
3. the compile cache: built once per machine and Python, through the
   kernels' build path (the compiler in a child process, cached, verified).

Otherwise the Python methods serve alone; :func:`status` says why.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import functools
import os
from importlib.machinery import EXTENSION_SUFFIXES

from .. import _native
from .._records import renew_after_fork
from ..build import bundles as _bundles
from ..build import extension as _extension
from ..errors import OpaqueOpsError
from ..model import reader as _reader
from . import sigint as _sigint
from .call_lock import CallLock

ENV = "OPAQUE_OPS_FASTCALLS"

_loading = _thread.allocate_lock()
# (module or None, where it came from or why there is none); set once per process.
_loaded: tuple[object | None, str] | None = None


# A fork while another thread was looking the module up left the
# child's copy of _loading held by a thread the child does not have: the
# child's first interpreter waited forever.  Re-created, not taken around
# the fork: the lookup may compile the module (seconds), and every fork
# would wait for it.  _loaded is set once the lookup is complete, so the
# child finds it complete or unset, and then looks the module up itself.
# tests/interpreter/test_fast_calls.py forks inside module().
renew_after_fork(globals(), _loading=_thread.allocate_lock)


class FastCallsError(OpaqueOpsError, ImportError):
    """``OPAQUE_OPS_FASTCALLS`` names a fast calls module that cannot be loaded."""


def _find() -> tuple[object | None, str]:
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() in ("0", "off", "no", "false"):
        return None, f"turned off by {ENV}={setting}"
    if setting and setting.lower() not in ("1", "on", "yes", "true"):
        try:
            return _native.fast_calls.load_extension(setting), setting
        except (OSError, ImportError) as exc:
            raise FastCallsError(
                f"{ENV}={setting}: cannot load the fast calls module there ({exc}); name a module built "
                f"for this Python ({EXTENSION_SUFFIXES[0]}), or unset {ENV} to find or "
                "build one, or set it to 0 to run without"
            ) from None
    tried = []
    prebuilt = _bundles.verified_library(
        _bundles.prebuilt_dir(),
        _extension.prebuilt_name(),
        _extension.sources(),
        _bundles.prebuilt_manifest(),  # (read once: the bundled kernels are checked against it too)
        section="fastcalls",
    )
    if prebuilt is not None:
        try:
            return _native.fast_calls.load_extension(prebuilt), str(prebuilt)
        except (OSError, ImportError) as exc:
            tried.append(f"prebuilt {prebuilt}: {exc}")
    # Imported here: the prebuilt module (a platform wheel's) needs no build path.
    from ..build import compiler as _cbuild

    try:
        # Built before (the usual case): no compiler is looked for, or asked who it is.
        for _ in range(2):
            path = _cbuild.cached_build(_extension.build_spec(lookup_only=True))
            if path is None:
                path = _cbuild.compile_cached(_extension.build_spec())[0]
            try:
                return _native.fast_calls.load_extension(path), str(path)
            except (OSError, ImportError):
                # Removed between the lookup and the load (`opaque-ops cache
                # clear` in another process): looked up, or built, once more.
                if os.path.lexists(path):
                    raise
        raise ImportError(f"{path} was removed twice between its lookup and its load")
    except (OpaqueOpsError, OSError, ImportError) as exc:
        # The first lines: what failed, and the compiler's first error.
        tried.append("compile cache: " + (" ".join(str(exc).splitlines()[:2]) or type(exc).__name__))
    return None, "; ".join(tried)


def module():
    """The loaded fast calls module, or None (see :func:`status`); looked up once per process.

    Raises
    ------
    FastCallsError
        ``OPAQUE_OPS_FASTCALLS`` names a file that cannot be loaded.
    """
    global _loaded
    if _loaded is None:
        with _loading:
            if _loaded is None:
                found = _find()
                # The module also holds the compiled model reader, and the Ctrl-C guard.
                _reader.use_compiled_reader(getattr(found[0], "read_model", None))
                if found[0] is not None:
                    found[0].sigint_decider(functools.partial(_sigint.decide, found[0].sigint_watch))
                _loaded = found
    return _loaded[0]


def status() -> tuple[bool, str]:
    """``(in use, where the module came from or why it is not used)``."""
    mod = module()
    assert _loaded is not None
    return mod is not None, _loaded[1]


def new_lock():
    """A lock for an interpreter's :class:`CallLock`: the module's (its fast calls take it) when there is one."""
    mod = module()
    return mod.Lock() if mod is not None else None


_METHODS = ("set_tensor", "invoke", "get_tensor")


def attach(interp, cls):
    """The fast calls state for ``interp``, a ``cls`` exactly (None: the module is not here).

    The first call also makes ``cls``'s three methods the module's ``Method``
    descriptors around the Python functions (once per process): they reach
    C through the instance's ``_fast`` (this function's result), and call the
    Python function for an instance without one (an interpreter created
    before, a subclass's instance) and for every case C leaves to it.
    """
    mod = module()
    if mod is None or not isinstance(interp._lock, mod.Lock):
        return None
    with _loading:
        for name in _METHODS:
            method = cls.__dict__[name]
            if not isinstance(method, mod.Method):
                setattr(cls, name, mod.Method(method, name))
    return mod.Calls(interp._lock, interp._calls, CallLock.owner, interp._slots, python_function(cls, "_invoke_failed"))


def planned_tensors(native) -> tuple[frozenset, bool] | None:
    """``(planned tensor indices, any tensor dynamic)`` of ``native``'s main subgraph, in one C call.

    The indices ``i`` for which ``native.is_planned(i)``, and
    ``native.has_dynamic_tensor()``; None when the module is not here (the
    caller then asks those).  The caller holds the interpreter's call lock.
    """
    mod = module()
    if mod is None:
        return None
    points = _native.fast_calls.planned_entry_points(native)
    if points is None:
        return None
    return mod.planned_tensors(native, *points)


def moved_view_dropper(native):
    """``drop(slots, native)``: what a fast invoke runs after a model moved memory, for ``native``'s Python callers.

    It drops from ``slots`` (``Interpreter._slots``) each cached view whose
    tensor moved, in one C call, as ``Interpreter._keep_unmoved_slots``
    does in Python.  None when the module is not here, or when ``native``'s
    calls are wrapped by hooks (the caller then runs the Python loop).
    The function keeps no reference to ``native``: the caller passes it,
    under the interpreter's call lock, at every call.
    """
    mod = module()
    if mod is None:
        return None
    points = _native.fast_calls.entry_points(native)
    if points is None:
        return None
    interp, functions = points
    drop_moved_views = mod.drop_moved_views
    placement = functions[1:]  # all but TfLiteInterpreterInvoke, in drop_moved_views' order

    def drop(slots, native):
        drop_moved_views(slots, native, interp, placement)

    return drop


def python_function(cls, name: str):
    """``cls``'s own Python function ``name``, also after :func:`attach` wrapped it."""
    f = cls.__dict__[name]
    return getattr(f, "__wrapped__", f)


def bind(calls, native, moves: bool = False, views=None, before=None) -> None:
    """Let ``calls.invoke`` call TFLite directly on ``native`` (None: never, until bound again).

    ``moves``: the model's invoke may move memory; then ``before(interp,
    what)`` runs first whenever ``views`` (a sized collection of the
    ``tensor()`` views) is not empty, and each cached view whose tensor
    moved is dropped after the run.
    """
    entry = None if native is None else _native.fast_calls.entry_points(native)
    if entry is None:
        calls.unbind()
    else:
        calls.bind(
            native, entry[0], entry[1], native.sink, moves, views if moves else (), before, native.cancel_address
        )
