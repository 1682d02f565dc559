"""Run code written for ``tflite_runtime`` or ``ai-edge-litert`` on opaque_ops, unmodified.

Third-party packages (openWakeWord, microWakeWord plugins, face detectors...)
import ``tflite_runtime.interpreter`` or ``ai_edge_litert.interpreter``.  This
module makes those imports resolve to opaque_ops, so such a package runs on
opaque_ops without a line changed, with custom ops it could never load before.
Nothing happens on ``import opaque_ops``: the user turns it on, either around
a whole program::

    python -m opaque_ops.compat client.py ARGS...
    python -m opaque_ops.compat --ops kernels:mediapipe -m some_package.cli ARGS...

or in Python, before the client imports its runtime::

    import opaque_ops.compat
    opaque_ops.compat.install(custom_ops=[opaque_ops.kernels.mediapipe()])
    import openwakeword        # its `import tflite_runtime.interpreter` is opaque_ops now

Which names are served:

- ``tflite_runtime`` and ``tflite_runtime.interpreter``;
- ``ai_edge_litert`` and ``ai_edge_litert.interpreter``;
- with ``tensorflow=True`` (``--tensorflow``): a ``tensorflow`` module whose
  only content is ``tf.lite`` (``tf.lite.Interpreter``,
  ``tf.lite.experimental.load_delegate``), for packages that import full
  TensorFlow just to use its TFLite interpreter.  Any other ``tf.`` name
  raises ``AttributeError`` saying so.  Off by default: a fake ``tensorflow``
  would mislead code that needs the real one.

The names resolve through an import hook placed first on ``sys.meta_path``,
so they win over an installed ``tflite_runtime`` and ``importlib.util.find_spec``
finds them.  ``install()`` refuses if one of them was already imported (that
code already holds the other runtime); ``uninstall()`` removes the hook.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

from . import errors
from ._records import renew_after_fork

# The interpreter modules' public names, as tflite_runtime / ai-edge-litert define them.
_INTERPRETER_NAMES = (
    "Interpreter",
    "InterpreterWithCustomOps",
    "load_delegate",
    "Delegate",
    "OpResolverType",
    "SignatureRunner",
)

# Arguments ai-edge-litert 2.x added to its Interpreter that the TFLite C API
# does not reach.  False (their default) changes nothing; True is warned about.
_LITERT_ONLY_FLAGS = (
    "experimental_default_delegate_latest_features",
    "experimental_compress_quantization_zero_points",
    "experimental_disable_delegate_node_fusion",
    "experimental_force_delegate_node_profiling",
)

_lock = threading.Lock()
_finder: _Finder | None = None
_settings: dict = {}


# ------------------------------------------------------------ the classes
# compat's own classes (not a client's subclasses of them), whose
# isolate=True gives an isolated twin (_isolated_twin): class -> whether it
# takes custom_op_registerers first, as InterpreterWithCustomOps does.
_served: dict = {}

# Held while a class is built: the modules of the two served names are two
# imports, which Python's import lock does not order, and functools.cache
# alone let two threads importing them at once each build (and keep) an
# Interpreter class of their own.  Reentrant: a build may need another.
_classes_lock = threading.RLock()


# A fork while another thread held one of the two locks left the
# child's copy held by a thread the child does not have: the child's
# install() (_lock) or its first import of a served name (_classes_lock)
# waited forever.  Re-created, not taken around the fork: install()
# holds _lock while it compiles the op sources it is given, and a class
# is built while interpreter modules are imported.  What they guard is
# safe as the child finds it: a built class is stored once complete (the
# child builds any other again; one the other thread was building is left
# in _served, where nothing reaches it), and install() and uninstall()
# finish whichever of their steps the other thread had not done.
# tests/test_compat.py forks inside both locks.
renew_after_fork(globals(), _lock=threading.Lock, _classes_lock=threading.RLock)

_T = TypeVar("_T", bound=Callable[..., type])


def _built_once(build: _T) -> _T:
    """``functools.cache(build)``, with every call under :data:`_classes_lock`: one class per argument."""
    cached = functools.cache(build)

    @functools.wraps(build)
    def once(*args: Any) -> type:
        with _classes_lock:
            return cached(*args)

    return once  # type: ignore[return-value]


def _warn(message: str) -> None:
    """Warn at the client's line: the first frame outside this file."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, stacklevel=level)


def _with_defaults(kwargs: dict) -> dict:
    """``kwargs`` with install()'s defaults, and without litert's flags (warned about if set)."""
    for flag in _LITERT_ONLY_FLAGS:
        if kwargs.pop(flag, False):
            _warn(f"opaque_ops.compat: {flag}=True has no effect on opaque_ops (the TFLite C API has no such switch)")
    for key, value in _settings.items():
        kwargs.setdefault(key, value)
    return kwargs


@_built_once
def _isolated_twin(cls: type) -> type:
    """``cls`` run isolated: opaque_ops' isolated interpreter that is also an instance of ``cls``.

    Its methods are the isolated interpreter's (first in the MRO); its
    ``__init__`` adds install()'s defaults, so client code that checks
    ``isinstance(it, tflite_runtime.interpreter.Interpreter)`` still holds.
    """
    from .interpreter.isolation_default import isolated_class

    isolated: Any = isolated_class()

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _served[cls]:  # InterpreterWithCustomOps(custom_op_registerers=None, **kwargs)
            args = args[1:]
            kwargs.pop("custom_op_registerers", None)  # (refused by its __new__)
        isolated.__init__(self, *args, **_with_defaults(kwargs))

    return type(cls.__name__, (isolated, cls), {"__init__": __init__, "__module__": __name__, "__doc__": cls.__doc__})


@_built_once
def _interpreter_class() -> type:
    """The ``Interpreter`` served as ``tflite_runtime.interpreter.Interpreter``.

    Built on first use so that ``install()`` costs no numpy or cffi import.
    """
    from .interpreter.core import Interpreter as _Base
    from .interpreter.core import allow_fast_calls
    from .interpreter.isolation_default import wants_isolation

    class Interpreter(_Base):
        """:class:`opaque_ops.Interpreter` with the defaults given to :func:`opaque_ops.compat.install`.

        Accepts every argument of ``ai_edge_litert.interpreter.Interpreter``
        (2.x); the four it adds beyond tflite_runtime have no effect here
        (a warning says so when one is set).  ``custom_ops``, ``library`` and
        ``use_xnnpack`` may still be passed, and win over the defaults.
        """

        def __new__(cls, *args: Any, isolate: Any = None, **kwargs: Any) -> Any:
            if cls in _served and wants_isolation(isolate):
                # Its isolated twin; Python then runs the twin's __init__ with
                # these arguments.  A client's subclass goes on to
                # opaque_ops.Interpreter's rule (refused, or warned).
                return object.__new__(_isolated_twin(cls))
            return super().__new__(cls, *args, isolate=isolate, **kwargs)

        def __init__(
            self,
            model_path: str | None = None,
            model_content: bytes | None = None,
            experimental_delegates: list | None = None,
            num_threads: int | None = None,
            *args: Any,
            **kwargs: Any,
        ) -> None:
            kwargs = _with_defaults(kwargs)
            super().__init__(model_path, model_content, experimental_delegates, num_threads, *args, **kwargs)

    Interpreter.__module__ = __name__
    Interpreter.__qualname__ = "Interpreter"
    _served[Interpreter] = False
    # Only __init__ differs: the per-call fast calls serve it as they serve
    # opaque_ops.Interpreter (a subclass of this one gets the Python methods).
    return allow_fast_calls(Interpreter)


@_built_once
def _with_custom_ops_class(base: Any) -> type:
    class InterpreterWithCustomOps(base):
        """tflite_runtime's ``InterpreterWithCustomOps``: C++ registerers cannot be loaded here.

        ``custom_op_registerers`` name C++ functions that take a
        ``tflite::MutableOpResolver*``; the TFLite C API has no way to call
        them.  Give the ops as opaque-API kernels instead (``custom_ops=`` of
        :func:`install`, or ``--ops`` of ``python -m opaque_ops.compat``).
        """

        def __new__(cls, custom_op_registerers: list | None = None, **kwargs: Any) -> Any:
            if custom_op_registerers:
                raise errors.UnsupportedError(
                    "InterpreterWithCustomOps(custom_op_registerers=...) takes C++ functions that need "
                    "TensorFlow's C++ op resolver, which the TFLite C API does not expose. Write the "
                    "ops against the opaque kernel API and register them with "
                    "opaque_ops.compat.install(custom_ops=[...]) or `python -m opaque_ops.compat --ops ...`"
                )
            return super().__new__(cls, **kwargs)

        def __init__(self, custom_op_registerers: list | None = None, **kwargs: Any) -> None:
            super().__init__(**kwargs)  # (custom_op_registerers: refused by __new__)

    InterpreterWithCustomOps.__module__ = __name__
    _served[InterpreterWithCustomOps] = True
    from .interpreter.core import allow_fast_calls

    return allow_fast_calls(InterpreterWithCustomOps)


# ---------------------------------------------------------- the modules
def _fill_interpreter_module(mod: Any) -> None:  # attributes set at run time
    from .interpreter import core as interpreter
    from .interpreter import signature_runner
    from .ops import delegates

    cls = _interpreter_class()
    mod.Interpreter = cls
    mod.InterpreterWithCustomOps = _with_custom_ops_class(cls)
    mod.load_delegate = delegates.load_delegate
    mod.Delegate = delegates.Delegate
    mod.OpResolverType = interpreter.OpResolverType
    mod.SignatureRunner = signature_runner.SignatureRunner
    mod.__all__ = list(_INTERPRETER_NAMES)


def _runtime_version() -> str:
    from . import runtime

    return runtime.runtime_info().version


def _fill_package(mod: Any) -> None:
    # ``tflite_runtime.__version__`` is the TFLite version in the references:
    # here that of the loaded C library (loaded when first asked for).
    def __getattr__(name: str) -> str:
        if name == "__version__":
            return _runtime_version()
        raise AttributeError(f"module {mod.__name__!r} (opaque_ops.compat) has no attribute {name!r}")

    mod.__getattr__ = __getattr__


class _TensorflowStub(types.ModuleType):
    """``tensorflow`` as served by compat: ``tf.lite`` and nothing else."""

    def __getattr__(self, name: str) -> Any:
        if name == "lite":
            import importlib

            return importlib.import_module("tensorflow.lite")
        if name == "__version__":
            return _runtime_version()
        raise AttributeError(
            f"tensorflow.{name} is not available: opaque_ops.compat(tensorflow=True) provides only "
            "tf.lite.Interpreter and tf.lite.experimental.load_delegate; code that needs more of "
            "TensorFlow needs the real package (and then no compat)"
        )


def _fill_tf_lite(mod: Any) -> None:
    from .interpreter import core as interpreter
    from .ops import delegates

    mod.Interpreter = _interpreter_class()
    mod.OpResolverType = interpreter.OpResolverType
    mod.experimental = types.SimpleNamespace(
        load_delegate=delegates.load_delegate, OpResolverType=interpreter.OpResolverType
    )
    mod.__all__ = ["Interpreter", "experimental"]


# name -> (is a package, how to fill it)
_Fill = Optional[Callable[[Any], None]]
_MODULES: dict[str, tuple[bool, _Fill]] = {
    "tflite_runtime": (True, _fill_package),
    "tflite_runtime.interpreter": (False, _fill_interpreter_module),
    "ai_edge_litert": (True, _fill_package),
    "ai_edge_litert.interpreter": (False, _fill_interpreter_module),
}
_TENSORFLOW: dict[str, tuple[bool, _Fill]] = {
    "tensorflow": (True, None),
    "tensorflow.lite": (False, _fill_tf_lite),
}


class _Loader(importlib.abc.Loader):
    def __init__(self, fill: _Fill) -> None:
        self._fill = fill

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        if spec.name == "tensorflow":
            return _TensorflowStub(spec.name)
        return None  # the default module type

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = f"{module.__name__}, served by opaque_ops.compat (see `python -m opaque_ops.compat --help`)"
        if self._fill is not None:
            self._fill(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Serves the compat names; every other import goes on to the next finder."""

    def __init__(self, names: dict[str, tuple[bool, _Fill]]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        entry = self.names.get(fullname)
        if entry is None:
            return None
        is_package, fill = entry
        spec = importlib.machinery.ModuleSpec(
            fullname, _Loader(fill), origin="opaque_ops.compat", is_package=is_package
        )
        if is_package:
            spec.submodule_search_locations = []
        return spec


# ------------------------------------------------------------- the switch
def install(
    *,
    custom_ops: Sequence[Any] | None = None,
    use_xnnpack: bool | None = None,
    library: str | os.PathLike | None = None,
    tensorflow: bool = False,
) -> None:
    """Make ``tflite_runtime.interpreter`` and ``ai_edge_litert.interpreter`` imports resolve to opaque_ops.

    Call it before the client code imports its runtime.  Calling it again
    replaces the defaults.

    Parameters
    ----------
    custom_ops : list, optional
        Op libraries given to every interpreter the client creates (anything
        ``Interpreter(custom_ops=...)`` takes: ``opaque_ops.kernels.mediapipe()``,
        ``compile_ops(...)``, paths of prebuilt libraries).
    use_xnnpack : bool or None, optional
        The default of every interpreter (see :class:`opaque_ops.Interpreter`).
    library : str or path-like, optional
        The TFLite C library to load (default: the automatic lookup).
    tensorflow : bool
        Also serve a ``tensorflow`` module holding only ``tf.lite``.

    Raises
    ------
    OpaqueOpsError
        One of the names was already imported from another runtime: that code
        holds the other runtime's classes.  Install earlier (first thing in
        the program, or run it with ``python -m opaque_ops.compat``).
    """
    global _finder
    names = dict(_MODULES)
    if tensorflow:
        names.update(_TENSORFLOW)
    with _lock:
        foreign = sorted(
            n
            for n in names
            if n in sys.modules
            and getattr(sys.modules[n], "__spec__", None) is not None
            and getattr(sys.modules[n].__spec__, "origin", None) != "opaque_ops.compat"
        )
        if foreign:
            raise errors.OpaqueOpsError(
                f"opaque_ops.compat.install() came too late: {', '.join(foreign)} is already imported "
                "from another runtime. Call install() before anything imports it, or start the "
                "program with `python -m opaque_ops.compat program.py`"
            )
        if custom_ops is not None:
            from .interpreter.core import _as_op_libraries

            custom_ops = _as_op_libraries(custom_ops)  # validated (and loaded) now, not per interpreter
        settings = {
            k: v
            for k, v in (("custom_ops", custom_ops), ("use_xnnpack", use_xnnpack), ("library", library))
            if v is not None
        }
        _settings.clear()
        _settings.update(settings)
        if _finder is not None:
            _remove_finder()
        _finder = _Finder(names)
        sys.meta_path.insert(0, _finder)


def _remove_finder() -> None:
    global _finder
    finder = _finder
    assert finder is not None, "called only while installed"
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass
    for name in list(finder.names):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod.__spec__, "origin", None) == "opaque_ops.compat":
            del sys.modules[name]
    _finder = None


def uninstall() -> None:
    """Remove the import hook and forget the compat modules (idempotent).

    Code that already imported them keeps what it has.
    """
    with _lock:
        if _finder is not None:
            _remove_finder()
        _settings.clear()


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _finder is not None


# ------------------------------------------------------------ the runner
_USAGE = """usage: python -m opaque_ops.compat [--ops LIB]... [--no-xnnpack] [--tensorflow]
                                  (SCRIPT | -m MODULE) [ARGS...]

Run a program written for tflite_runtime or ai-edge-litert on opaque_ops, unmodified:
its `import tflite_runtime.interpreter` / `import ai_edge_litert.interpreter`
resolve to opaque_ops.

options:
  --ops LIB        op library for every interpreter the program creates: a .so,
                   a .c source (compiled, cached) or kernels:NAME (repeatable)
  --no-xnnpack     run the builtins on TFLite's reference kernels
  --tensorflow     also serve `import tensorflow` with tf.lite only
  --library PATH   the TFLite C library to load
  -m MODULE        run a module as a script (like python -m)
  -h, --help       show this help
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m opaque_ops.compat``: run a script or module with :func:`install` in effect."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ops, use_xnnpack, tensorflow, library = [], None, False, None
    while argv and argv[0].startswith("-") and argv[0] != "-m":
        opt = argv.pop(0)
        if opt in ("-h", "--help"):
            sys.stdout.write(_USAGE)
            return 0
        if opt == "--no-xnnpack":
            use_xnnpack = False
        elif opt == "--tensorflow":
            tensorflow = True
        elif opt in ("--ops", "--library") or opt.startswith(("--ops=", "--library=")):
            name, _, value = opt.partition("=")
            if not value:
                if not argv:
                    return _usage_error(f"{name} needs a value")
                value = argv.pop(0)
            if name == "--ops":
                ops.append(value)
            else:
                library = value
        elif opt == "--":
            break
        else:
            return _usage_error(f"unknown option {opt}")
    if not argv or argv == ["-m"]:
        return _usage_error("name a script or -m MODULE to run")
    try:
        custom_ops = None
        if ops:
            from .cli.common import load_libs

            custom_ops = load_libs(ops)
        install(custom_ops=custom_ops, use_xnnpack=use_xnnpack, library=library, tensorflow=tensorflow)
    except (errors.OpaqueOpsError, OSError, ValueError) as exc:
        sys.stderr.write(f"python -m opaque_ops.compat: error: {' '.join(str(exc).split())}\n")
        return 1
    if argv[0] == "-m":
        module = argv[1]
        sys.argv = argv[1:]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = argv[0]
        if not os.path.exists(script):
            return _usage_error(f"no such script: {script}")
        sys.argv = argv
        # As `python script.py` does: the script's directory comes first on the path.
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
    return 0


def _usage_error(message: str) -> int:
    sys.stderr.write(_USAGE.split("\n\n")[0] + f"\npython -m opaque_ops.compat: error: {message}\n")
    return 2


__all__ = ["install", "uninstall", "installed", "main"]

if __name__ == "__main__":  # pragma: no cover - python -m opaque_ops.compat
    # Run through the importable module, not this __main__ copy: the hook and
    # its settings must live in the `opaque_ops.compat` that clients can import.
    from opaque_ops.compat import main as _main

    sys.exit(_main())
