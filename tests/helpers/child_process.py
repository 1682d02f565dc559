"""The one way the tests run Python in a fresh process.

Anything that could take the test process down (a segfault on a regression,
a deadlock) runs through :func:`run_child`: a crash or hang there fails one
test instead of the whole run.  Scripts and ``python -m`` commands run through
:func:`run_python`, the same runner, and the emulated aarch64/armhf Pythons
(``tests.helpers.aarch64_python``, ``tests.helpers.armhf_python``) pass their
own interpreter command to it.

The child imports this checkout: the repository root leads its PYTHONPATH,
so ``import opaque_ops`` and ``import tests.helpers...`` find the files under
test (a ``tests`` package from site-packages, which one test dependency
ships, comes after it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ChildResult(subprocess.CompletedProcess):
    """A finished child: ``returncode``, ``stdout``, ``stderr`` (text), and :attr:`signal`."""

    @property
    def signal(self) -> int | None:
        """The number of the signal that killed the child, or None if it exited."""
        return -self.returncode if self.returncode < 0 else None


def run_python(
    *args,
    timeout: float = 120,
    env: Mapping[str, str | None] | None = None,
    unset: Sequence[str] = (),
    base_env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = ROOT,
    python: Sequence[str] | None = None,
    pythonpath: Sequence[str | os.PathLike] | None = None,
) -> ChildResult:
    """Run ``python *args`` in a fresh process and return how it ended.

    Parameters
    ----------
    *args
        The interpreter's arguments (``"-c", code``, a script path, ``"-m", module``...);
        each is passed through ``str``.
    timeout : float, optional
        Seconds before the run counts as hung: ``subprocess.TimeoutExpired`` is raised.
    env : mapping, optional
        Variables to set on top of the base environment; a value of None removes one.
    unset : sequence of str, optional
        Variables the child must not see.
    base_env : mapping, optional
        The environment to start from; this process's by default.
    cwd : path, optional
        The child's working directory; the repository root by default.
    python : sequence of str, optional
        The interpreter command; this interpreter (``sys.executable``) by default.
    pythonpath : sequence of path, optional
        The child's PYTHONPATH; by default the repository root, then the inherited PYTHONPATH.
        An empty sequence gives the child none (pip, or an installed wheel tried on its own).

    Returns
    -------
    ChildResult
        ``returncode``, ``stdout``, ``stderr`` and ``signal``.
    """
    full = dict(os.environ if base_env is None else base_env)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = str(value)
    for name in unset:
        full.pop(name, None)
    if pythonpath is None:
        pythonpath = [ROOT, *filter(None, [full.get("PYTHONPATH")])]
    if pythonpath:
        full["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    else:
        full.pop("PYTHONPATH", None)
    cmd = [*(python or [sys.executable]), *map(str, args)]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full, cwd=None if cwd is None else str(cwd)
    )
    return ChildResult(p.args, p.returncode, p.stdout, p.stderr)


def run_child(code: str, *args, timeout: float = 120, **kw) -> ChildResult:
    """Run ``code`` (dedented) with ``python -c``; ``args`` become ``sys.argv[1:]``.

    The keywords are those of :func:`run_python`.
    """
    return run_python("-c", textwrap.dedent(code), *args, timeout=timeout, **kw)


def run_child_json(code: str, *args, **kw) -> tuple[ChildResult, object]:
    """Run ``code`` as :func:`run_child` does; assert that it exited with 0.

    Returns
    -------
    tuple
        The finished child, and the JSON value its last line of output holds
        (where such a child prints what it found).
    """
    p = run_child(code, *args, **kw)
    assert p.returncode == 0, crashed(p)
    return p, json.loads(p.stdout.strip().splitlines()[-1])


def crashed(p: subprocess.CompletedProcess) -> str:
    """A readable description of how a child ended, for assertion messages."""
    how = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
    return f"{how}\nstdout: {p.stdout[-1500:]}\nstderr: {p.stderr[-2500:]}"


def run_cli(*args, cwd: str | os.PathLike | None = None, timeout: float = 120) -> ChildResult:
    """Run the command-line tool, ``python -m opaque_ops *args``, as a user would."""
    return run_python("-m", "opaque_ops", *args, cwd=cwd, timeout=timeout)
