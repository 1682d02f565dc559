"""What every ``opaque-ops`` command shares: the usage error, the exit codes, and ``--ops``.

Its own module so that each command's module imports it and none imports
another command's module.
"""

from __future__ import annotations

from pathlib import Path

# Exit codes of ``inspect --check`` and ``doctor``: 0 only when the model would
# run as given; 1 when it would be refused; 3 when running it crashed or hung.
CHECK_OK, CHECK_REFUSED, CHECK_UNSAFE = 0, 1, 3

PROG = "opaque-ops"


class CliError(Exception):
    """A usage problem found after argument parsing (bad --input, unknown name...)."""


def regular_file(path, what: str) -> Path:
    """``path`` as a Path, if it names a regular file; CliError saying what it is otherwise.

    Every command that reads a model or a C source checks it here: a
    directory, a device or a FIFO is not "missing" (and reading a FIFO
    would wait for a writer).
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise CliError(f"{what} {path} does not exist")
    kind = "a directory" if path.is_dir() else "not a regular file (a device, a FIFO or a socket)"
    raise CliError(f"{what} {path} is {kind}; give the path of the {what}")


def read_model_file(path):
    """``(path, ModelInfo)`` of the model file ``path``; a ModelError names the file.

    What ``inspect`` and ``doctor`` read with (``run`` gets the same message
    from the Interpreter).
    """
    from ..errors import ModelError
    from ..model import read_model

    path = regular_file(path, "model file")
    try:
        return path, read_model(path)
    except ModelError as exc:
        raise ModelError(f"{path} is not a usable TFLite model: {exc}") from None


def load_libs(specs) -> list:
    """Turn ``--ops`` values into op libraries."""
    from .. import kernels
    from ..ops.library import compile_ops, load_ops

    libs = []
    for spec in specs or ():
        if spec.startswith("kernels:"):
            # The names of opaque_ops.kernels: a kernel file or a bundle (kernels:mediapipe).
            libs.append(kernels.by_name(spec.split(":", 1)[1]))
        elif spec.endswith(".c"):
            libs.append(compile_ops(regular_file(spec, "C source")))
        else:
            libs.append(load_ops(spec))
    return libs
