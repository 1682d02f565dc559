"""An app's whole start-up counted in instructions (valgrind's callgrind), against ai-edge-litert's.

    python bench/start_instructions.py [--python PY]... [--checkout DIR]...

The same window as ``bench_start.py`` (from just after ``import numpy`` to the
allocated interpreter: opaque_ops' imports, ``kernels.mediapipe()``,
``Interpreter(...)`` and ``allocate_tensors()``; ai-edge-litert's import and
creation), on MediaPipe's face detector and selfie segmenter, with the
verdict cache empty (a first start) and with the model's record on disk (a
later start).  Each start is one process under callgrind; the window is cut
out with ``--dump-before`` at two marker calls (``os.getppid()`` before it,
``os.getpgrp()`` after it), and its instructions are split by the file they
ran in: the Python interpreter, the TFLite runtime, the C library, the rest
(the dynamic loader, cffi, digests, the fast calls module...).

Why instructions: a start-up is 10-30 ms, and on a shared machine its wall
time moves by a third from one minute to the next, more than most changes
to it.  Instruction counts are the same from run to run
(``PYTHONHASHSEED=0``), so two builds compare exactly; what they leave out
(page faults, cache misses, the file system) is what ``bench_start.py``'s
wall times show.  Under valgrind the CPU has no AVX-512 and no SHA
extensions, so XNNPACK's kernels and the digests run other code paths than
natively: compare builds with each other and with litert, not with wall
times.  Needs valgrind (``apt-get install valgrind``); about a minute.

Without ``--python`` or ``--checkout`` opaque_ops is this checkout (``python
-S`` with the site-packages put on the path, as ``bench_create.py`` runs it);
``--python`` names the interpreter of an environment where opaque_ops is
installed (a platform wheel's venv: see ``bench_start.py``).  ai-edge-litert
runs from the first environment given.  Numbers only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_create import START_BODIES, model_paths, start_command, start_env  # noqa: E402

# The start-up of bench_start.py (bench_create.START_BODIES, whose bodies also
# note a time, a few instructions alike for every variant), between two
# marker calls instead of the clock.
_FRAME = """
import sys
sys.path[:0] = sys.argv[2:]
import os
import time
import numpy
path = sys.argv[1]
os.getppid()
{body}
it.allocate_tensors()
os.getpgrp()
"""

# Which group a file of callgrind's "ob=" lines counts in (first match).
_GROUPS = (
    ("python", ("libpython", "/bin/python")),
    ("runtime", ("libtensorflowlite_c", "liblitert-lm", "libpywrap_litert", "_pywrap_tensorflow")),
    ("libc", ("libc.so", "libm.so")),
)
COLUMNS = ("total", "python", "runtime", "libc", "other")


def _group(obj: str) -> str:
    for name, marks in _GROUPS:
        if any(m in obj for m in marks):
            return name
    return "other"


def self_cost_by_group(path: str) -> dict[str, int]:
    """Instructions of a callgrind output file, by :data:`_GROUPS` (each function's own cost).

    A cost line after ``calls=`` is the called function's inclusive cost,
    counted where that function's own lines are: skipped here.
    """
    names: dict[str, str] = {}
    out = dict.fromkeys(COLUMNS, 0)
    group = "other"
    after_call = False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                key, _, rest = line[line.index("=") + 1 :].rstrip("\n").partition(" ")
                if key.startswith("("):  # "(id) name" the first time, "(id)" after
                    if rest:
                        names[key] = rest
                    obj = names.get(key, key)
                else:
                    obj = line[line.index("=") + 1 :].strip()
                if line.startswith("ob="):
                    group = _group(obj)
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    out[group] += int(parts[1])
                    out["total"] += int(parts[1])
    return out


def grind_window(cmd: list[str], env: dict, cwd: str, tmp: str, timeout: int = 900):
    """Run ``cmd`` under callgrind; its ``CompletedProcess`` and the window's instructions by group (None: no window).

    The window is what ran between the two marker calls (``os.getppid()``,
    then ``os.getpgrp()``): callgrind dumps before each, so ``.2`` holds it.
    """
    out_file = os.path.join(tmp, "callgrind.out")
    grind = [
        "valgrind",
        "--tool=callgrind",
        "--dump-before=os_getppid*",
        "--dump-before=os_getpgrp*",
        f"--callgrind-out-file={out_file}",
    ]
    r = subprocess.run(grind + cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    window = out_file + ".2"  # .1: up to the first marker; .2: between the two
    try:
        return r, (self_cost_by_group(window) if r.returncode == 0 and os.path.exists(window) else None)
    finally:
        for suffix in ("", ".1", ".2"):
            if os.path.exists(out_file + suffix):
                os.remove(out_file + suffix)


def count(which: str, model: Path, verdicts: str | None, where: tuple[str, str], tmp: str) -> dict[str, int]:
    """Instructions of one start's window, by group."""
    cmd = start_command(which, _FRAME.format(body=START_BODIES[which].strip()), model, where)
    env = start_env(verdicts)
    env.update(PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    cwd = os.path.join(tmp, "cwd")
    os.makedirs(cwd, exist_ok=True)
    r, counts = grind_window(cmd, env, cwd, tmp)
    if counts is None:
        raise RuntimeError(f"{which} under callgrind failed: {r.stderr.strip()[-2000:]}")
    return counts


def warm_up(model: Path, where: tuple[str, str], tmp: str) -> None:
    """One first start outside callgrind, so that every module's ``.pyc`` is written before any count.

    An installed package has its ``.pyc`` files; a checkout whose sources
    changed since they were last written would otherwise compile those
    modules from source inside the first counted start (``compile()`` can
    be most of it).
    """
    cmd = start_command("ours", _FRAME.format(body=START_BODIES["ours"].strip()), model, where)
    # (The counted starts' working directory: "python -c" puts it first on
    # sys.path, so a start from inside a checkout would import that instead.)
    cwd = os.path.join(tmp, "cwd")
    os.makedirs(cwd, exist_ok=True)
    env = start_env(tempfile.mkdtemp(dir=tmp))
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"start-up ({where[1]}) failed: {r.stderr.strip()[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append", default=[], help="interpreter of an environment with opaque_ops")
    ap.add_argument("--checkout", action="append", default=[], help="another source tree of opaque_ops")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    variants = [("python", p) for p in args.python] + [("checkout", str(Path(c).resolve())) for c in args.checkout]
    variants = variants or [("checkout", str(HERE.parent))]
    with tempfile.TemporaryDirectory(prefix="oo_instr_") as tmp:
        for name, model in model_paths().items():
            litert = count("litert", model, None, variants[0], tmp)
            rows = []
            for v in variants:
                warm_up(model, v, tmp)
                warm = tempfile.mkdtemp(dir=tmp)
                rows.append((f"{v[1]}: first start", count("ours", model, warm, v, tmp)))
                rows.append((f"{v[1]}: later start", count("ours", model, warm, v, tmp)))
            rows.append(("ai-edge-litert", litert))
            print(f"{name} (millions of instructions; the window of bench_start.py):")
            print(f"  {'':58s}" + "".join(f"{c:>9s}" for c in COLUMNS) + "   ratio")
            for label, c in rows:
                cells = "".join(f"{c[k] / 1e6:9.1f}" for k in COLUMNS)
                print(f"  {label[-58:]:58s}{cells}   {c['total'] / litert['total']:5.2f}x litert")
    return 0


if __name__ == "__main__":
    sys.exit(main())
