"""What every ``opaque-ops`` command shares: the usage error, the exit codes, and ``--ops``.

Its own module so that each command's module imports it and none imports
another command's module.
"""

from __future__ import annotations

import shlex
from pathlib import Path

# Exit codes of ``inspect --check`` and ``doctor``: 0 only when the model would
# run as given; 1 when it would be refused; 3 when running it crashed or hung.
CHECK_OK, CHECK_REFUSED, CHECK_UNSAFE = 0, 1, 3

PROG = "opaque-ops"


def shown(text) -> str:
    """A string from a model (an op, tensor or key name...) as the text output shows it.

    A model is untrusted input: a name holding ESC or another control
    character would drive the user's terminal if printed raw, and a
    right-to-left override would make it read as something else.  So a
    string with any character Python does not call printable is shown as
    its ``repr``: quoted, with escapes (``'Nan\\x1b[31mRED'``).  The quotes
    tell such a name from one that holds a real backslash; a printable name
    that itself starts with a quote is quoted too, for the same reason.
    Every other string is shown as it is.
    """
    text = str(text)
    if text.isprintable() and text[:1] not in ("'", '"'):
        return text
    return repr(text)


def _escape(ch: str) -> str:
    return repr(ch)[1:-1]  # ("\x1b" for ESC, "\u202e" for a right-to-left override)


def terminal_safe(text: str) -> str:
    """``text`` with every unprintable character but the newline escaped as in a Python literal.

    The last step of what the commands print: error messages and lines
    built from several parts can carry a model's strings that no
    :func:`shown` call saw (an error naming an op, say).  Line breaks are
    kept, so multi-line reports stay multi-line.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _escape(ch) for ch in text)


def shell_word(arg) -> str:
    """``arg`` quoted for a POSIX shell, as a suggested command line shows it.

    ``shlex.quote`` is right for every string a terminal shows as it is
    (spaces, quotes, non-ASCII letters).  A string holding control
    characters is written in ANSI-C quoting instead, ``$'...'`` with
    escapes (bash, zsh, ksh, and POSIX sh since 2024): pasted, it gives the
    shell the same characters, and the line on the screen holds none of
    them.
    """
    arg = str(arg)
    if arg.isprintable():
        return shlex.quote(arg)
    out = []
    for ch in arg:
        if ch == "\\" or ch == "'":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif 0xDC80 <= ord(ch) <= 0xDCFF:
            # A byte of a file name that is not UTF-8, as Python decodes it
            # (surrogateescape): the byte itself, so the pasted path names the file.
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:
            # (\xHH would put in one byte; \uHHHH puts in the character, as UTF-8.)
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "$'" + "".join(out) + "'"


def shell_command(parts) -> str:
    """A command line made of ``parts``, each quoted by :func:`shell_word`."""
    return " ".join(shell_word(p) for p in parts)


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
    from ..model.reader import unusable_model

    path = regular_file(path, "model file")
    try:
        return path, read_model(path)
    except ModelError as exc:
        raise unusable_model(str(path), exc) from None


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
