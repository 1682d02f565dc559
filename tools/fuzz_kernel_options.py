"""Build and run the libFuzzer campaign on every bundled kernel's options parser.

    python tools/fuzz_kernel_options.py 600            # fuzz for 600 seconds
    python tools/fuzz_kernel_options.py -runs=1000000  # or for a number of inputs
    python tools/fuzz_kernel_options.py -runs=1000000 --ops ExtractImagePatches -- -max_len=512

The target is c/fuzz/kernel_options_fuzz.c: every op that has an Init gets
each fuzz input as its custom options, then Free, under clang's
ASan + UBSan (``-fno-sanitize-recover=all``) with libFuzzer's leak check.
Every kernel in c/kernels is compiled unchanged as its own object; the real
``libtensorflowlite_c.so`` (from the pymicro-wakeword wheel) supplies the
TfLite* symbols the kernels reference.

The seed corpus is generated at run time: the option blobs of the MediaPipe
models in the installed ``mediapipe`` package (read with
``opaque_ops.model.read_model``; nothing of mediapipe is imported),
ExtractImagePatches flexbuffers, and raw int32 structs of 12, 24, 32 and 40
bytes.  ``--corpus DIR`` keeps the corpus (seeds plus what libFuzzer adds).

At the end a summary line is printed::

    RESULT runs=1000000 seconds=12 exec_per_sec=83333 cov=812 ft=2034 corpus=310 findings=0

Exit status: 0 when libFuzzer finished without a finding, 1 on a finding (the
crashing input is written to the work directory as ``crash-*`` / ``leak-*``),
2 when the target cannot be built (the message says what to install).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ_SRC = ROOT / "c" / "fuzz" / "kernel_options_fuzz.c"
INCLUDE = ROOT / "c" / "include"
SRC_DIR = ROOT / "c" / "src"
KERNELS_DIR = ROOT / "c" / "kernels"

SAN_FLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
# The apt packages that provide clang's libFuzzer runtime on Debian/Ubuntu.
APT_HINT = "apt-get install clang libclang-rt-14-dev"

MEDIAPIPE_MODELS = (
    "modules/selfie_segmentation/selfie_segmentation.tflite",
    "modules/face_landmark/face_landmark_with_attention.tflite",
)


class BuildFailed(RuntimeError):
    """The fuzz target could not be built; the message says why."""


def tflite_lib() -> Path:
    """The real TFLite C library that opaque_ops loads (whatever its file name).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    BuildFailed
        No TFLite C library was found.
    """
    from opaque_ops._native import load_runtime

    try:
        path = Path(load_runtime().path).resolve()
    except Exception as exc:  # the runtime's own error says what to install
        raise BuildFailed(f"no libtensorflowlite_c to link against: {exc}") from None
    return path


def mediapipe_option_blobs() -> dict[str, bytes]:
    """Distinct custom-option blobs of the MediaPipe models, by ``op_vN_i`` name.

    Returns an empty dict when the ``mediapipe`` package is not installed.
    """
    from opaque_ops.model import read_model

    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        return {}
    base = Path(list(spec.submodule_search_locations)[0])
    out: dict[str, bytes] = {}
    seen: set[bytes] = set()
    for rel in MEDIAPIPE_MODELS:
        path = base / rel
        if not path.is_file():
            continue
        for sg in read_model(path).subgraphs:
            for op in sg.operators:
                blob = bytes(op.custom_options) if op.custom_options else b""
                if not blob or blob in seen:
                    continue
                seen.add(blob)
                out[f"mp_{op.op_name}_v{op.version}_{len(out)}"] = blob
    return out


def seeds() -> dict[str, bytes]:
    """The seed corpus: name -> option bytes.

    Real MediaPipe blobs (when the package is installed), flexbuffers written
    the way the TF converter writes them, and raw little-endian int32 structs
    (Convolution2DTransposeBias's 12 bytes, TfLitePoolParams' 24/32/40).
    """
    from opaque_ops.model import flex_options

    out = dict(mediapipe_option_blobs())
    eip = [
        {"T": 0, "ksizes": [1, 3, 3, 1], "padding": "SAME", "rates": [1, 1, 1, 1], "strides": [1, 1, 1, 1]},
        {"ksizes": [1, 2, 3, 1], "padding": "VALID", "rates": [1, 2, 1, 1], "strides": [1, 2, 1, 1]},
        {
            "T": 9,
            "ksizes": [1, 2**31 - 1, 1, 1],
            "padding": "SAME",
            "rates": [1, 2**31 - 1, 1, 1],
            "strides": [1, 1, 2**31 - 1, 1],
        },
        {
            "ksizes": [1.0, 3.0, 3.0, 1.0],
            "padding": "VALID",
            "rates": [1, 1, 1, 1],
            "strides": [1, 1, 1, 1],
            "unknown": "x" * 40,
        },
    ]
    for i, o in enumerate(eip):
        out[f"flex_eip_{i}"] = flex_options(o)
    out["flex_ttb"] = flex_options({"output_height": 64, "output_width": 64})
    out["flex_ttb_big"] = flex_options({"output_height": 70000, "output_width": -1})
    out["flex_l2t"] = flex_options(
        {
            "left_rotation_idx": 0,
            "right_rotation_idx": 1,
            "output_height": 16,
            "output_width": 16,
            "scale_x": 1.5,
            "scale_y": 1.5,
            "target_rotation_radians": 0.0,
            "subset_idxs": [0, 1, 2, 3, 9],
        }
    )
    out["flex_l2t_odd"] = flex_options(
        {
            "left_rotation_idx": 2**40,
            "right_rotation_idx": -1,
            "output_height": 0,
            "output_width": 2**31,
            "scale_x": float("inf"),
            "scale_y": -0.0,
            "target_rotation_radians": float("nan"),
            "subset_idxs": list(range(300)),
        }
    )
    raw = {
        "raw12_ctb": [1, 2, 2],
        "raw12_ctb_valid": [2, 1, 3],
        "raw12_huge": [1, 2**31 - 1, -(2**31)],
        "raw24_pool": [1, 2, 2, 2, 2, 0],
        "raw32_pool": [2, 2, 2, 3, 3, 1, 0, 0],
        "raw40_pool": [1, 1, 1, 2, 2, 3, 0, 0, 0, 0],
        "raw40_limits": [2, 65536, 65537, 1, 0, 4, -1, -1, -1, -1],
    }
    for name, vals in raw.items():
        out[name] = struct.pack(f"<{len(vals)}i", *vals)
    out["raw11_short"] = out["raw12_ctb"][:11]
    out["empty"] = b""
    return out


def write_seeds(directory: str | os.PathLike) -> list[Path]:
    """Write :func:`seeds` into ``directory`` (created if needed); return the paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in sorted(seeds().items()):
        p = d / f"{name}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def libfuzzer_available(cc: str = "clang") -> str | None:
    """``None`` when ``cc`` can link a libFuzzer target, else the reason it cannot."""
    if shutil.which(cc) is None:
        return f"{cc} is not installed ({APT_HINT})"
    with tempfile.TemporaryDirectory(prefix="oo_lf_probe_") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(
            "#include <stdint.h>\n#include <stddef.h>\n"
            "int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n)"
            "{(void)d;(void)n;return 0;}\n"
        )
        res = subprocess.run(
            [cc, "-fsanitize=fuzzer,address,undefined", str(src), "-o", str(Path(tmp) / "probe")],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            return (
                f"{cc} cannot link with -fsanitize=fuzzer (libFuzzer runtime missing: "
                f"{APT_HINT}): {res.stderr.strip()[-300:]}"
            )
    return None


def build(
    out_dir: str | os.PathLike, *, cc: str = "clang", kernels=None, kernels_dir: str | os.PathLike | None = None
) -> Path:
    """Compile the fuzz target with every kernel; return the executable.

    Parameters
    ----------
    out_dir : path-like
        Where the objects and the executable go.
    cc : str
        A clang that has libFuzzer.
    kernels : sequence of path-like, optional
        Kernel sources to link; default every ``*.c`` in ``kernels_dir``.
    kernels_dir : path-like, optional
        Default ``c/kernels``.

    Raises
    ------
    BuildFailed
        The compiler, libFuzzer or the TFLite library is missing, or a
        compile failed (the compiler output is in the message).
    """
    why = libfuzzer_available(cc)
    if why:
        raise BuildFailed(why)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if kernels is None:
        kernels = sorted(Path(kernels_dir or KERNELS_DIR).glob("*.c"))
    kernels = [Path(k) for k in kernels]
    if not kernels:
        raise BuildFailed(f"no kernel sources found in {kernels_dir or KERNELS_DIR}")
    runtime = tflite_lib()
    libdir = runtime.parent
    objs = []
    for k in kernels:
        obj = out / f"{k.stem}.o"
        cmd = [
            cc,
            *SAN_FLAGS,
            "-std=c11",
            "-ffp-contract=off",
            "-fsanitize=fuzzer-no-link,address,undefined",
            f"-I{INCLUDE}",
            f"-I{k.parent}",
            "-c",
            str(k),
            "-o",
            str(obj),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildFailed(f"compiling {k} failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}")
        objs.append(str(obj))
    exe = out / "kernel_options_fuzz"
    cmd = [
        cc,
        *SAN_FLAGS,
        "-std=c11",
        "-fsanitize=fuzzer,address,undefined",
        f"-I{INCLUDE}",
        f"-I{SRC_DIR}",
        str(FUZZ_SRC),
        *objs,
        f"-L{libdir}",
        f"-l:{runtime.name}",
        f"-Wl,-rpath,{libdir}",
        "-ldl",
        "-lm",
        "-o",
        str(exe),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise BuildFailed(f"linking the fuzz target failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}")
    return exe


_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
_STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
_FINDING = re.compile(
    r"ERROR: (?:AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|"
    r"==\d+==ERROR|SUMMARY: (?:Address|Undefined|Leak)"
)


def summarize(output: str, returncode: int) -> dict:
    """Figures from a libFuzzer run's output (run with ``-print_final_stats=1``).

    Returns
    -------
    dict
        ``runs``, ``seconds``, ``exec_per_sec``, ``cov``, ``ft``, ``corpus``
        (the last status line's values; -1 when absent) and ``findings`` (0
        or 1: libFuzzer stops at the first).
    """
    stats = {k: int(v) for k, v in _STAT.findall(output)}
    status = _STATUS.findall(output)
    last = status[-1] if status else ("-1", "-1", "-1", "-1")
    finding = returncode != 0 or _FINDING.search(output) is not None
    return {
        "runs": stats.get("number_of_executed_units", int(last[0])),
        "exec_per_sec": stats.get("average_exec_per_sec", -1),
        "cov": int(last[1]),
        "ft": int(last[2]),
        "corpus": int(last[3]),
        "findings": int(finding),
    }


def run(
    exe: str | os.PathLike,
    corpus: str | os.PathLike,
    *,
    runs: int | None = None,
    seconds: int | None = None,
    extra=(),
    ops: str | None = None,
    seed: int | None = None,
    timeout: float | None = None,
    cwd: str | os.PathLike | None = None,
):
    """Run the fuzz target over ``corpus``; return ``(CompletedProcess, summary dict)``.

    ``runs`` and ``seconds`` map to ``-runs`` and ``-max_total_time`` (either
    or both).  ``ops`` restricts the fuzzed ops (``OO_FUZZ_OPS``).
    """
    cmd = [str(exe), "-print_final_stats=1", "-max_len=4096"]
    if runs is not None:
        cmd.append(f"-runs={runs}")
    if seconds is not None:
        cmd.append(f"-max_total_time={seconds}")
    if seed is not None:
        cmd.append(f"-seed={seed}")
    cmd += [str(a) for a in extra] + [str(corpus)]
    env = dict(os.environ)
    if ops:
        env["OO_FUZZ_OPS"] = ops
    # Leak checking stays on: a leak in Init/Free is a finding.
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(cwd) if cwd else None)
    out = proc.stdout + proc.stderr
    summary = summarize(out, proc.returncode)
    summary["seconds"] = round(time.monotonic() - start, 1)
    if summary["exec_per_sec"] <= 0 and summary["runs"] > 0:
        # libFuzzer reports 0 for runs shorter than a second.
        summary["exec_per_sec"] = int(summary["runs"] / max(summary["seconds"], 0.1))
    summary["command"] = " ".join(cmd)
    return proc, summary


def main(argv=None) -> int:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("budget", nargs="?", default="60", help="SECONDS to fuzz, or -runs=N (default 60 seconds)")
    p.add_argument("--corpus", help="corpus directory to keep (default: a temporary one)")
    p.add_argument(
        "--workdir", help="where to build and where crash files go (default: a temporary directory, kept on a finding)"
    )
    p.add_argument("--ops", help="comma-separated op names to fuzz (default: all with an Init)")
    p.add_argument("--cc", default="clang")
    p.add_argument("--seed", type=int)
    p.add_argument("extra", nargs="*", help="after --: more libFuzzer flags")
    argv = list(sys.argv[1:] if argv is None else argv)
    # argparse would take "-runs=N" for an unknown option; pull it out first.
    runs_arg = [a for a in argv if re.fullmatch(r"-runs=\d+", a)]
    argv = [a for a in argv if a not in runs_arg]
    args = p.parse_args(argv)

    runs = seconds = None
    if runs_arg:
        runs = int(runs_arg[-1].split("=", 1)[1])
    elif args.budget.isdigit():
        seconds = int(args.budget)
    else:
        p.error(f"budget must be SECONDS or -runs=N, got {args.budget!r}")

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="oo_kfuzz_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        exe = build(work / "build", cc=args.cc)
    except BuildFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    corpus = Path(args.corpus) if args.corpus else work / "corpus"
    n = len(write_seeds(corpus))
    print(f"built {exe}; {n} seeds in {corpus}", file=sys.stderr)
    proc, s = run(exe, corpus, runs=runs, seconds=seconds, extra=args.extra, ops=args.ops, seed=args.seed, cwd=work)
    out = proc.stdout + proc.stderr
    lines = out.splitlines()
    tail = [l for l in lines if (l.startswith("#") and " cov: " in l) or l.startswith(("stat::", "Done"))]
    print("\n".join([l for l in lines if l.startswith("kernel_options_fuzz:")] + tail[-8:]), file=sys.stderr)
    if s["findings"]:
        print(out[-8000:], file=sys.stderr)
        print(f"FINDING: inputs saved in {work}", file=sys.stderr)
    print(f"command: {s['command']}")
    print(
        "RESULT "
        + " ".join(f"{k}={s[k]}" for k in ("runs", "seconds", "exec_per_sec", "cov", "ft", "corpus", "findings"))
    )
    if not args.workdir and not s["findings"] and not args.corpus:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if s["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
