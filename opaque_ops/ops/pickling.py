"""Pickling: interpreters and op libraries re-created in another process.

``multiprocessing``, ``concurrent.futures.ProcessPoolExecutor``, Dask and Ray
send objects to workers with pickle.  An interpreter holds C objects that
cannot travel, so each class's ``__reduce__`` sends what re-creates it and
the functions here rebuild it on the other side:

- an :class:`~opaque_ops.Interpreter`: the model bytes, the constructor's
  arguments (op libraries and delegates pickled by their own rules), the
  input shapes it was resized to and whether it was allocated.  Tensor
  contents and variable state stay behind: the copy starts fresh.
- an :class:`~opaque_ops.OpLibrary`: how it was made.  A bundled kernel
  travels by name (``opaque_ops.kernels.kernel(name)`` on the other side:
  prebuilt or compiled there, for that machine's architecture); a library
  from ``load_ops`` by path; one from ``compile_ops`` by its path, and where
  that file does not exist (another machine), by compiling the same source
  again with the same arguments.
- a :func:`~opaque_ops.python_op`: by reference to its functions, which
  must be importable by module and name in the worker (module-level
  functions; a script's own functions work with multiprocessing, which
  re-imports the script).  Lambdas and nested functions raise
  ``pickle.PicklingError`` saying so.
- a :class:`~opaque_ops.Delegate`: its plugin's path and options; the
  worker loads the plugin again.

The isolated interpreter's worker ships its op libraries with the same
``__reduce__`` methods.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from ..errors import OpLibraryError

# ----------------------------------------------------------- op libraries
# OpLibrary._origin values (set where the library is made):
#   ("load",)                             load_ops(path)
#   ("compile", source, kwargs)           compile_ops(source, **kwargs)
#   ("kernel", name)                      opaque_ops.kernels.kernel(name)


def library_reduce(lib):
    origin = getattr(lib, "_origin", None) or ("load",)
    if origin[0] == "compile":
        source = origin[1]
        # A source file travels as its text too: the worker may not have the file.
        if isinstance(source, (str, os.PathLike)) and _is_file(source):
            origin = ("compile", os.fspath(Path(source).resolve()), origin[2], Path(source).read_text())
    return restore_library, (origin, str(lib.path))


def _is_file(source) -> bool:
    try:
        return len(os.fspath(source)) < 4096 and "\n" not in os.fspath(source) and Path(source).is_file()
    except (OSError, ValueError):
        return False


def restore_library(origin, path):
    """Re-create an op library in this process (the other half of ``OpLibrary.__reduce__``)."""
    from .. import kernels
    from .library import OpLibrary, compile_ops, load_ops

    kind = origin[0]
    if kind == "kernel":
        return kernels.kernel(origin[1])
    if kind == "compile":
        if Path(path).is_file():  # the same machine, or a shared cache: no compiler needed
            lib = OpLibrary(path)
            lib._origin = origin[:3]
            return lib
        source, kwargs = origin[1], origin[2]
        text = origin[3] if len(origin) > 3 else None
        if text is not None and not Path(source).is_file():
            source = text
        return compile_ops(source, **kwargs)
    if not Path(path).is_file():
        raise OpLibraryError(
            f"kernel library {path} (loaded with load_ops in the sending process) does not exist in this "
            "process's file system; put the library at the same path on every worker, or send a bundled "
            "kernel (opaque_ops.kernels) or a compile_ops library, which are re-created from source"
        )
    return load_ops(path)


# ------------------------------------------------------------ python ops
def python_op_reduce(op):
    from .python_op import python_op

    fns = {"invoke": op._invoke, "prepare": op._prepare, "init": op._init}
    for what, fn in fns.items():
        if fn is None:
            continue
        try:
            pickle.dumps(fn)
        except Exception as exc:  # noqa: BLE001 - lambdas, closures, local classes
            raise pickle.PicklingError(
                f"python_op {op.name!r} cannot be sent to another process: its {what} function "
                f"{getattr(fn, '__qualname__', fn)!r} is not importable by module and name "
                f"({type(exc).__name__}: {exc}). Define it at module level in a module the worker "
                "can import, or create the op inside the worker"
            ) from None
    return python_op, (op.name, fns["invoke"], fns["prepare"], fns["init"], op.version)


# --------------------------------------------------------------- delegates
def delegate_reduce(delegate):
    from .delegates import load_delegate

    return load_delegate, (delegate.library, dict(getattr(delegate, "_options", None) or {}))


# ------------------------------------------------------------ interpreters
def interpreter_reduce(it):
    from ..errors import ClosedError

    args = getattr(it, "_init_args", None)
    if args is None:
        raise pickle.PicklingError(f"{type(it).__name__} objects cannot be pickled")
    if it._native is None:
        raise ClosedError("a closed Interpreter cannot be pickled; pickle it before close()")
    declared = {i: tuple(sg_t.shape) for i, sg_t in
                ((idx, it._info.subgraphs[0].tensors[idx]) for idx in it._info.subgraphs[0].inputs)}
    resized = []
    for d in it.get_input_details():
        shape = tuple(int(n) for n in d["shape"])
        if declared.get(d["index"]) != shape:
            resized.append((d["index"], shape))
    state = {"allocated": bool(it._allocated), "resized": resized}
    return restore_interpreter, (it._model_bytes, dict(args, custom_ops=list(it._libs),
                                                      experimental_delegates=list(it._delegates)), state)


def restore_interpreter(model_content, kwargs, state):
    """Re-create an interpreter in this process (the other half of ``Interpreter.__reduce__``)."""
    from ..interpreter.core import Interpreter

    it = Interpreter(model_content=model_content, **kwargs)
    for index, shape in state.get("resized", ()):
        it.resize_tensor_input(index, shape)
    if state.get("allocated"):
        it.allocate_tensors()
    return it


def runner_reduce(runner):
    return restore_runner, (runner._interpreter, runner.key)


def restore_runner(interpreter, key):
    return interpreter.get_signature_runner(key)
