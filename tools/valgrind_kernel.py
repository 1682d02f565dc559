"""Run a C kernel's whole lifecycle (init, prepare, invoke, free) under valgrind.

    python tools/valgrind_kernel.py [--kernel extract_image_patches|atan] [--workdir DIR]

No Python runs under valgrind: the C runner ``c/tools/oo_run.c`` loads the
TFLite C library and the kernel library, builds an interpreter (the kernel's
init), allocates (prepare), invokes, writes the outputs and deletes the
interpreter (free).  The script builds the runner, compiles the kernel as a
standalone library with ``opaque_ops.build.build_library`` (debug, -O0 -g),
writes a model and an input, runs

    valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,possible

and checks the output against numpy.  Exit status 0 means: no invalid
reads/writes, no use of uninitialised values, nothing definitely or possibly
lost, and the right answer.  Exit 99 means valgrind reported errors.

What valgrind reports inside the TFLite library itself is not the kernel's,
and is suppressed by the file written next to the outputs, matched on the
runtime's own file name (whatever it is called), never on the kernel library:

- 2.17.1 calls ``__memcpy_chk`` with equal source and destination from a
  ``pthread_once`` initialiser at interpreter creation ("Source and
  destination overlap"); a copy of 4 bytes onto itself is harmless.
- 2.22/2.23 (litert-lm's build) run C++ static initialisers when dlopen()
  loads the library (absl flag and registry tables): valgrind reports
  their tables as "possibly lost" (interior pointers) and a few
  "uninitialised value" jumps in them.  Only stacks that pass through the
  runtime file *and* end in the dynamic loader's ``_dl_init`` match.
- glibc's dynamic loader, expanding the library's RPATH while dlopen()
  loads it, compares strings with a word-at-a-time ``strncmp`` that reads
  up to 7 bytes past a short heap string (``is_dst`` in dl-load.c; "Invalid
  read of size 8"), a known false positive of valgrind with this glibc.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

_SUPPRESSIONS = """
{
   glibc-ld.so-strncmp-over-read-of-rpath-in-is_dst
   Memcheck:Addr8
   fun:strncmp
   fun:is_dst
}
{
   tflite-2.17-memcpy-chk-self-copy-in-pthread-once-init
   Memcheck:Overlap
   fun:__memcpy_chk
   obj:*/RUNTIME
}
"""
# Static initialisers of the runtime, run by dlopen (one entry per kind).
_STATIC_INIT = """
{
   tflite-static-initialiser-KIND
   Memcheck:KIND
   MATCH...
   obj:*/RUNTIME
   ...
   fun:_dl_init
}
"""


def suppressions(runtime_path: str | os.PathLike) -> str:
    """Valgrind suppressions for noise inside the TFLite runtime at ``runtime_path``."""
    name = Path(runtime_path).name
    text = _SUPPRESSIONS
    for kind in ("Leak", "Cond", "Value8"):
        match = "match-leak-kinds: possible\n   " if kind == "Leak" else ""
        text += _STATIC_INIT.replace("KIND", kind).replace("MATCH", match)
    return text.replace("RUNTIME", name)


def build_runner(workdir: Path) -> Path:
    exe = workdir / "oo_run"
    cc = os.environ.get("CC", "cc")
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-I",
            str(ROOT / "c" / "include"),
            str(ROOT / "c" / "tools" / "oo_run.c"),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


def eip_case(workdir: Path):
    """ExtractImagePatches (it has init and free: its options struct is malloc'd)."""
    from opaque_ops.build.standalone import build_library
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("images", [1, 10, 10, 1], np.float32)
    y = b.add_tensor("patches", [1, 10, 10, 9], np.float32)
    b.add_custom_op(
        "ExtractImagePatches",
        inputs=[x],
        outputs=[y],
        version=1,
        options={"T": 0, "ksizes": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "rates": [1, 1, 1, 1], "padding": "SAME"},
    )
    b.set_inputs([x])
    b.set_outputs([y])
    image = np.arange(1, 101, dtype=np.float32).reshape(1, 10, 10, 1)

    def check(out: np.ndarray) -> bool:
        return out.shape == (90 * 10,) and out[:9].astype(int).tolist() == [0, 0, 0, 0, 1, 2, 0, 11, 12]

    lib = build_library(kernels=["extract_image_patches"], output=workdir / "eip.so", debug=True)
    return b.build(), lib, image, check


def atan_case(workdir: Path):
    from opaque_ops.build.standalone import build_library

    sys.path.insert(0, str(ROOT / "examples" / "atan"))
    import make_model

    lib = build_library(
        [ROOT / "examples" / "atan" / "atan.c"],
        output=workdir / "atan.so",
        ops={"Atan": "AtanOpRegistrationExternal"},
        debug=True,
    )
    x = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
    expected = np.arctan((x + np.float32(0.99999905)).astype(np.float64)).astype(np.float32)

    def check(out: np.ndarray) -> bool:
        return np.allclose(out, expected, rtol=1e-6, atol=0)

    return make_model.build(), lib, x, check


def valgrind_run(lib: Path, model: bytes, x: np.ndarray, workdir: Path) -> tuple[int, str, np.ndarray | None]:
    """Run ``oo_run`` on ``model`` with kernel library ``lib`` under valgrind.

    Returns
    -------
    (int, str, numpy.ndarray or None)
        valgrind's exit status (99: it reported errors), its report, and
        output 0 as float32 (None if the run failed).
    """
    from opaque_ops import runtime_info

    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    exe = workdir / "oo_run"
    if not exe.exists():
        build_runner(workdir)
    (workdir / "model.tflite").write_bytes(model)
    (workdir / "in0.bin").write_bytes(np.ascontiguousarray(x).tobytes())
    (workdir / "tflite.supp").write_text(suppressions(os.path.realpath(runtime_info().path)))
    out0 = workdir / "out0.bin"
    if out0.exists():
        out0.unlink()
    cmd = [
        "valgrind",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,possible",
        "--show-leak-kinds=definite,possible",
        f"--suppressions={workdir / 'tflite.supp'}",
        "--num-callers=30",
        str(exe),
        runtime_info().path,
        str(workdir / "model.tflite"),
        str(lib),
        "--in",
        str(workdir / "in0.bin"),
        "--out-prefix",
        str(workdir / "out"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = np.fromfile(out0, dtype=np.float32) if out0.exists() else None
    return p.returncode, p.stderr, out


def run(kernel: str, workdir: Path) -> tuple[int, str]:
    """Return (exit status, valgrind's report); 2 if the output is wrong."""
    model, lib, x, check = {"extract_image_patches": eip_case, "atan": atan_case}[kernel](workdir)
    rc, report, out = valgrind_run(lib, model, x, workdir)
    if rc == 0 and (out is None or not check(out)):
        return 2, report + f"\nwrong output: {None if out is None else out[:12]}"
    return rc, report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("extract_image_patches", "atan"), default="extract_image_patches")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_valgrind_"))
    workdir.mkdir(parents=True, exist_ok=True)
    rc, report = run(args.kernel, workdir)
    summary = [
        ln
        for ln in report.splitlines()
        if "ERROR SUMMARY" in ln or "lost:" in ln or "in use at exit" in ln or "suppressed:" in ln
    ]
    print("\n".join(summary))
    if rc != 0:
        print(report[-6000:], file=sys.stderr)
    print(f"{args.kernel}: {'clean' if rc == 0 else f'FAILED (exit {rc})'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
