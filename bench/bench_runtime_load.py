"""What loading the TFLite runtime costs, against a bare ``dlopen`` of the same file.

    python bench/bench_runtime_load.py [--rounds 15] [--library PATH]

Every round starts fresh child processes (a process loads one runtime, once)
and times, inside each child, after ``opaque_ops._native.ffi`` is imported:

- ours: ``_native.load_runtime()`` (the automatic lookup, or ``--library``
  named): the ELF and glibc checks, dlopen, the symbol checks and, for the
  automatic lookup, the known-build check (the wheel's RECORD, or a hash);
- peer: ``ffi.dlopen(path)`` of the same file, which any binding must do.

Also timed, once per round in one child: the parts ours may add or avoid:
SHA-256 of the file, ``ctypes.util.find_library`` (never run when the wheel's
copy loads), and the ELF/glibc check.  Children run interleaved (ours, peer,
then peer, ours, ...) and medians are printed, with the ratio ours / peer.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap

OURS = """
import time, json, sys
from opaque_ops._native import ffi, runtime_loader as runtime
t = time.perf_counter(); rt = runtime.load_runtime(LIBRARY); dt = time.perf_counter() - t
print(json.dumps({"s": dt, "path": rt.path}))
"""
PEER = """
import time, json
from opaque_ops._native.ffi import ffi
t = time.perf_counter(); ffi.dlopen(PATH, ffi.RTLD_NOW | ffi.RTLD_GLOBAL); dt = time.perf_counter() - t
print(json.dumps({"s": dt}))
"""
PARTS = """
import time, json, ctypes.util
from opaque_ops._native import elf, runtime_loader as runtime
out = {}
t = time.perf_counter(); runtime.file_sha256(PATH); out["sha256 of the file"] = time.perf_counter() - t
t = time.perf_counter(); ctypes.util.find_library("tensorflowlite_c"); out["ctypes.util.find_library"] = time.perf_counter() - t
t = time.perf_counter(); elf.load_problem(PATH); out["ELF + glibc check"] = time.perf_counter() - t
t = time.perf_counter(); runtime._wheel_record_build(PATH); out["wheel RECORD check"] = time.perf_counter() - t
print(json.dumps(out))
"""


def _child(code: str, **subst) -> dict:
    for k, v in subst.items():
        code = code.replace(k, repr(v))
    env = {k: v for k, v in os.environ.items() if k != "OPAQUE_OPS_TFLITE_LIB"}
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def _cpu() -> str:
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine()):
                    model = line.split(":", 1)[1].strip()
                if line.startswith(("flags", "Features")) and not flags:
                    flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    simd = [f for f in flags if f.startswith(("avx", "sse4", "neon", "asimd", "sve"))]
    return f"{model}; {os.cpu_count()} CPUs; SIMD: {' '.join(sorted(simd)[:12]) or 'unknown'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--library", default=None, help="name this runtime instead of the automatic lookup")
    args = ap.parse_args(argv)
    path = args.library or _child(OURS, LIBRARY=None)["path"]
    ours, peer, parts = [], [], {}
    for i in range(args.rounds):
        pair = [("ours", OURS, {"LIBRARY": args.library}), ("peer", PEER, {"PATH": path})]
        for name, code, subst in pair if i % 2 == 0 else pair[::-1]:
            (ours if name == "ours" else peer).append(_child(code, **subst)["s"])
        for k, v in _child(PARTS, PATH=path).items():
            parts.setdefault(k, []).append(v)
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"runtime {path}{' (named)' if args.library else ' (automatic lookup)'}")
    print(f"CPU: {_cpu()}; load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds, medians")
    print(f"{'load_runtime()':32s} {o * 1e3:8.2f} ms")
    print(f"{'peer: ffi.dlopen() alone':32s} {p * 1e3:8.2f} ms")
    print(f"{'ratio ours / peer':32s} {o / p:8.2f}")
    for k, v in parts.items():
        print(f"{k:32s} {statistics.median(v) * 1e3:8.2f} ms  ({statistics.median(v) / p:.2f} x peer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
