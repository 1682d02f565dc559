"""What CPU a number came from: its model and the SIMD features that matter here.

Benchmarks print it next to their numbers (numpy 2 and XNNPACK use AVX-512
where the CPU has it, so a figure means little without it).
"""

from __future__ import annotations

import os
import platform

_WANTED = [
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "asimd",
    "asimdhp",
    "asimddp",
    "sve",
    "sve2",
]


def cpu_summary() -> str:
    """``"MODEL (ARCH, N CPUs): flag flag ..."`` from /proc/cpuinfo (Linux), or what platform knows."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key in ("model name", "CPU part") and model in ("", platform.machine(), platform.processor()):
                    model = val.strip()
                if key in ("flags", "Features"):
                    flags = set(val.split())
    except OSError:
        pass
    have = [f for f in _WANTED if f in flags]
    return f"{model} ({platform.machine()}, {os.cpu_count()} CPUs): {' '.join(have) or 'no SIMD flags found'}"
