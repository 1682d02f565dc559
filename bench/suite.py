"""The opaque_ops benchmark suite: every measure against its peer, in one process run.

    python bench/suite.py [--quick] [--json out.json] [--skip-install] [--refresh-install]
                          [--threads] [--sections tiny,models,...]

Prints one table (measure, ours, peer, ratio, target, met?) and, with
``--json``, writes every raw number.  Peers are measured in the same run and
interleaved with ours, so machine load hits both; compare ratios, not
absolute times.  Nothing here asserts on time.

Sections (``--sections``; default all):

tiny     set_tensor+invoke+get_tensor on a 5-element ADD model vs ai-edge-litert;
         the zero-copy path (tensor() views) vs raw cffi C-API calls
create   Interpreter(...) + allocate_tensors() on MediaPipe's face_detection_short_range
         and selfie_segmentation vs ai-edge-litert: the first creation in a new process with
         an empty verdict cache (first start ever) and with the model's verdict on disk (every
         later start), the whole start-up (imports, kernels, first creation), and in one
         process with the model seen before (bench_create.py)
models   openWakeWord melspectrogram / embedding_model and a microWakeWord
         streaming model vs ai-edge-litert and vs the raw C API; where
         melspectrogram's gap comes from (its CONV_2D and BATCH_MATMUL alone)
frame    openWakeWord's per-frame pattern (same-shape resize, allocate, set,
         invoke, get on melspectrogram; then embedding and a classifier) vs
         ai-edge-litert
kernels  the CPU's SIMD features and the kernel clone that ran; Atan on 1M floats
         vs np.arctan; ExtractImagePatches 1x256x256x3 3x3 vs a memcpy of the output;
         the selfie models' Convolution2DTransposeBias layer vs XNNPACK's; the face
         and pooling kernels vs their own scalar build (bench_kernels.py,
         bench_face_ops.py)
selfie   MediaPipe selfie_segmentation end to end (XNNPACK + our kernel) vs
         ai-edge-litert and MediaPipe 0.10.14's own runtime (a venv made on
         first use, see bench_selfie.py); XNNPACK's op and XNNPACK off as info
pyop     a Python op's invoke vs the same op in C
compile  compile_ops cold vs warm (cache hit)
import   `import opaque_ops` in a fresh interpreter
install  installed size in a fresh venv, numpy excluded (cached in /tmp)
threads  num_threads 1 vs 2 on embedding_model; 2 Python threads x 2 interpreters
scaling  Atan ns/element 1e3..1e7; melspectrogram ns/sample vs audio length
isolate  isolate=True vs in-process: tiny-model set+invoke+get (and the semaphore
         round trip it is built on), selfie segmentation and embedding_model end
         to end, worker start-up, bit identity of the outputs

``--threads`` is shorthand for ``--sections threads``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

SECTIONS = [
    "tiny",
    "create",
    "models",
    "frame",
    "kernels",
    "selfie",
    "pyop",
    "compile",
    "import",
    "install",
    "threads",
    "scaling",
    "isolate",
]
INSTALL_CACHE = Path(tempfile.gettempdir()) / "opaque_ops_bench_install_size.json"


class Table:
    """Rows of (measure, ours, peer, ratio, target, met)."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, measure, ours, peer=None, ratio=None, target=None, met=None, unit=""):
        self.rows.append(
            {"measure": measure, "ours": ours, "peer": peer, "ratio": ratio, "target": target, "met": met, "unit": unit}
        )

    def ratio_row(self, measure, ours, peer, peer_name, limit, unit="µs", fmt="{:.2f}"):
        """A row whose target is ours/peer <= limit (limit None: for information)."""
        target = "info" if limit is None else f"≤ {limit}×"
        if ours is None or peer is None:
            self.add(measure, ours, f"{peer_name}: n/a", None, target, None, unit)
            return
        r = ours / peer
        self.add(
            measure,
            (fmt + " {}").format(ours, unit),
            f"{peer_name} " + (fmt + " {}").format(peer, unit),
            r,
            target,
            None if limit is None else r <= limit,
        )

    def render(self) -> str:
        def cell(v):
            if v is None:
                return "-"
            if isinstance(v, bool):
                return "yes" if v else "NO"
            if isinstance(v, float):
                return f"{v:.3f}"
            return str(v)

        heads = ["measure", "ours", "peer", "ratio", "target", "met?"]
        body = [
            [cell(r["measure"]), cell(r["ours"]), cell(r["peer"]), cell(r["ratio"]), cell(r["target"]), cell(r["met"])]
            for r in self.rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(heads)]
        line = "| " + " | ".join(h.ljust(w) for h, w in zip(heads, widths)) + " |"
        sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line, sep] + ["| " + " | ".join(c.ljust(w) for c, w in zip(b, widths)) + " |" for b in body])


# ------------------------------------------------------------------ sections


def sec_tiny(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_tiny_interleaved

    r = bench_tiny_interleaved(quick)
    raw["tiny_us"] = r
    t.ratio_row("tiny ADD: set+invoke+get", r.get("opaque_ops"), r.get("ai_edge_litert"), "ai-edge-litert", 0.9)
    try:
        import tflite_runtime.interpreter  # noqa: F401

        if "tflite_runtime" in r:
            t.ratio_row("tiny ADD: set+invoke+get", r["opaque_ops"], r["tflite_runtime"], "tflite-runtime", 0.9)
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raw["tflite_runtime"] = f"not importable ({msg}); tflite-runtime 2.14 needs numpy<2 and Python<=3.11"
        t.add("tiny ADD vs tflite-runtime", None, "tflite-runtime not importable (needs numpy<2)", None, "≤ 0.9×", None)
    t.ratio_row("tiny ADD: tensor() views + invoke", r.get("opaque_ops_views"), r.get("raw_cffi"), "raw cffi", 1.2)
    t.ratio_row(
        "tiny ADD: set+invoke+get, tflite_runtime code through opaque_ops.compat",
        r.get("opaque_ops_compat"),
        r.get("ai_edge_litert"),
        "ai-edge-litert",
        0.9,
    )
    t.ratio_row(
        "tiny ADD: signature runner call",
        r.get("opaque_ops_runner"),
        r.get("ai_edge_litert_runner"),
        "ai-edge-litert's runner",
        None,
    )
    t.ratio_row(
        "tiny ADD: signature runner call, full path only",
        r.get("opaque_ops_runner_full"),
        r.get("ai_edge_litert_runner"),
        "ai-edge-litert's runner",
        None,
    )
    # Not a target: the Python methods alone, where the fast calls cannot be built.
    t.ratio_row(
        "tiny ADD: Python methods only (no fast calls)",
        r.get("opaque_ops_python"),
        r.get("ai_edge_litert"),
        "ai-edge-litert",
        None,
    )


def sec_create(t: Table, raw: dict, quick: bool) -> None:
    from bench_create import bench

    r = bench(quick)
    raw["create_ms"] = r
    if not r:
        t.add("create + allocate", None, "mediapipe==0.10.14 not installed (its wheel carries the models)")
    for name, v in r.items():
        # The first creation in a new process is what an app's start-up pays.
        t.ratio_row(
            f"{name}: new process, verdict cache empty",
            v["cold_wall"],
            v["litert_first_wall"],
            "ai-edge-litert (new process)",
            1.5,
            unit="ms",
        )
        # The whole start-up, as an app (or someone timing one) sees it: the
        # imports, the kernels and the first creation, numpy aside.
        t.ratio_row(
            f"{name}: start-up in a new process: imports + kernels + first creation, cache empty",
            v["start_ours_wall"],
            v["start_litert_wall"],
            "ai-edge-litert: import + first creation",
            1.5,
            unit="ms",
        )
        t.add(
            f"{name}: start-up, of which imports (+ kernels for opaque_ops)",
            f"{v['start_ours_imports']:.2f} ms",
            f"ai-edge-litert {v['start_litert_imports']:.2f} ms",
            v["start_ours_imports"] / v["start_litert_imports"],
            "info",
            None,
        )
        t.ratio_row(
            f"{name}: new process, verdict on disk",
            v["disk_wall"],
            v["litert_first_wall"],
            "ai-edge-litert (new process)",
            1.5,
            unit="ms",
        )
        t.ratio_row(
            f"{name}: in process, model seen before", v["memory"], v["litert"], "ai-edge-litert", 1.5, unit="ms"
        )
        t.add(
            f"{name}: in process, checks every time (no verdicts kept)",
            f"{v['no_cache']:.2f} ms",
            f"ai-edge-litert {v['litert']:.2f} ms",
            v["no_cache"] / v["litert"],
            "info",
            None,
        )
        t.add(
            f"{name}: new process, the C runtime alone (no model checks)",
            f"{v['native_first_wall']:.2f} ms",
            f"ai-edge-litert {v['litert_first_wall']:.2f} ms",
            v["native_first_wall"] / v["litert_first_wall"],
            "info",
            None,
        )
        t.add(
            f"{name}: new process, CPU time: cache empty / on disk",
            f"{v['cold_cpu']:.2f} / {v['disk_cpu']:.2f} ms",
            f"ai-edge-litert {v['litert_first_cpu']:.2f} ms",
            v["disk_cpu"] / v["litert_first_cpu"],
            "info",
            None,
        )


def sec_models(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_real_models

    res = bench_real_models(quick)
    raw["real_models_us"] = res
    if not res:
        t.add("real models", None, "pyopen-wakeword / pymicro-wakeword not installed")
    for name, r in res.items():
        t.ratio_row(f"{name}: set+invoke+get", r.get("opaque_ops"), r.get("ai_edge_litert"), "ai-edge-litert", 1.0)
        if "raw_c_api_private" in r:
            # The binding's own cost: against the C API on the same private
            # copy (interpreter/matmul.py rewrote it); the original as information.
            t.ratio_row(
                f"{name}: set+invoke+get",
                r.get("opaque_ops"),
                r["raw_c_api_private"],
                "raw C API, the same private copy",
                1.02,
            )
            t.ratio_row(f"{name}: set+invoke+get", r.get("opaque_ops"), r.get("raw_c_api"), "raw C API, original", None)
        else:
            t.ratio_row(f"{name}: set+invoke+get", r.get("opaque_ops"), r.get("raw_c_api"), "raw C API", 1.02)
        if r.get("opaque_ops_runner"):
            t.ratio_row(
                f"{name}: signature runner call",
                r["opaque_ops_runner"],
                r.get("ai_edge_litert_runner"),
                "ai-edge-litert's runner",
                None,
            )
        if r.get("raw_c_api") and r.get("ai_edge_litert"):
            # Not a target: how the C library alone compares, which bounds the first ratio.
            t.add(
                f"{name}: raw C API vs ai-edge-litert",
                f"{r['raw_c_api']:.2f} µs",
                f"ai-edge-litert {r['ai_edge_litert']:.2f} µs",
                r["raw_c_api"] / r["ai_edge_litert"],
                "info",
                None,
            )
    _melspec_breakdown(t, raw, quick)


def _melspec_breakdown(t: Table, raw: dict, quick: bool) -> None:
    """Where melspectrogram's gap to ai-edge-litert comes from (CPU time, see bench_models)."""
    import opaque_ops
    from bench_models import bench_melspec_breakdown

    res = bench_melspec_breakdown(quick)
    raw["melspec_breakdown_cpu_us"] = res
    version = opaque_ops.runtime_info().version
    for name, label in (
        ("model", "whole model"),
        ("conv", "one CONV_2D (1x512, stride 160)"),
        ("batch_matmul", "BATCH_MATMUL x const [257,32]"),
    ):
        r = res.get(name)
        if not r or "ai_edge_litert" not in r:
            continue
        extra = f"; XNNPACK off {r['raw_c_api_no_xnnpack']:.1f} µs" if "raw_c_api_no_xnnpack" in r else ""
        t.add(
            f"melspectrogram {label}: raw C API {version} vs litert (CPU time)",
            f"{r['raw_c_api']:.1f} µs (ours {r['opaque_ops']:.1f}){extra}",
            f"ai-edge-litert {r['ai_edge_litert']:.1f} µs",
            r["raw_c_api"] / r["ai_edge_litert"],
            "info",
            None,
        )


def sec_frame(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_oww_frame

    r = bench_oww_frame(quick)
    raw["oww_frame_us"] = r
    if not r:
        t.add("openWakeWord frame", None, "pyopen-wakeword not installed")
        return
    t.ratio_row(
        "openWakeWord frame (mel+embedding+classifier)",
        r.get("opaque_ops_frame"),
        r.get("ai_edge_litert_frame"),
        "ai-edge-litert",
        1.1,
    )
    t.ratio_row(
        "openWakeWord mel step: resize(same)+allocate+set+invoke+get",
        r.get("opaque_ops_mel_step"),
        r.get("ai_edge_litert_mel_step"),
        "ai-edge-litert",
        1.1,
    )


def sec_kernels(t: Table, raw: dict, quick: bool) -> None:
    from bench_face_ops import simd_vs_scalar
    from bench_kernels import run

    r = run(quick)
    r["face_ops"] = simd_vs_scalar(quick)
    raw["kernels"] = r
    clones = sorted(
        {row["simd"] for row in [r["atan"], r["patches"], r["clamp"], *r["transpose_conv"]] if row.get("simd")}
    )
    t.add("SIMD clone the kernels ran", ", ".join(clones) or "-", r["cpu"], None, "info", None)

    def us_row(measure, row, key, peer_name, limit):
        measure = f"{measure} [{row.get('simd') or '-'}]"
        if key not in row:
            t.add(
                measure,
                None,
                f"{peer_name}: {row.get('error') or row.get('xnnpack_error') or 'n/a'}",
                None,
                f"≤ {limit}×",
                None,
            )
            return
        t.ratio_row(measure, row["kernel_us"] / 1e3, row[key] / 1e3, peer_name, limit, unit="ms", fmt="{:.3f}")

    us_row("Atan kernel, 1M f32", r["atan"], "numpy_us", "np.arctan", 1.5)
    us_row("ExtractImagePatches 1x256x256x3 3x3", r["patches"], "memcpy_us", "memcpy of output", 2.0)
    p = r["patches"]
    t.add(
        f"ExtractImagePatches 1x256x256x3 3x3 [{p['simd']}]",
        f"{p['kernel_us'] / 1e3:.3f} ms",
        f"numpy strided copy {p['numpy_us'] / 1e3:.3f} ms",
        p["kernel/numpy"],
        "info",
        None,
    )
    for row in r["transpose_conv"]:
        us_row(
            row["name"].replace("Convolution2DTransposeBias", "Conv2DTransposeBias"), row, "xnnpack_us", "XNNPACK", 1.5
        )
        if "bit_exact" in row:
            diff = row.get("xnnpack_max_abs_diff")
            t.add(
                "  ... ours bit-exact vs MediaPipe-order reference",
                "yes" if row["bit_exact"] else "NO",
                f"XNNPACK max |diff| {diff:.1e}" if diff is not None else None,
                None,
                "yes",
                row["bit_exact"],
            )
    c = r["clamp"]
    t.add(
        f"Clamp kernel, 1M f32 [{c['simd']}]",
        f"{c['kernel_us'] / 1e3:.3f} ms",
        f"np.clip {c['numpy_us'] / 1e3:.3f} ms",
        c["kernel/numpy"],
        "info",
        None,
    )
    for row in r["face_ops"]:
        measure = f"{row['op']} [{row['clone'] or 'no SIMD code'}]"
        same = "" if row["same_bits"] else " (DIFFERENT BITS)"
        if row["vectorized"]:
            t.ratio_row(measure, row["simd_us"], row["scalar_us"], "scalar build" + same, 1.0)
        else:
            t.add(
                measure,
                f"{row['simd_us']:.2f} µs",
                f"scalar build {row['scalar_us']:.2f} µs{same}",
                row["simd/scalar"],
                "info (same code)",
                None,
            )


def sec_selfie(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_selfie

    r = bench_selfie(quick)
    raw["selfie"] = r
    if "error" in r:
        t.add("selfie_segmentation end to end", None, r["error"], None, "report", None)
        return
    ms = r["ms"]
    ours = ms["opaque_ops"]
    t.add("CPU (selfie rows)", r["cpu"], None, None, "info", None)
    name = "selfie e2e 1 thread, default (XNNPACK + our kernel)"
    if "ai_edge_litert" in ms:
        t.add(
            name,
            f"{ours:.2f} ms",
            f"ai-edge-litert {ms['ai_edge_litert']:.2f} ms",
            ours / ms["ai_edge_litert"],
            "report",
            None,
        )
    if "mediapipe" in ms:
        t.add(
            name,
            f"{ours:.2f} ms",
            f"MediaPipe 0.10.14 {ms['mediapipe']:.2f} ms",
            ours / ms["mediapipe"],
            "report",
            None,
        )
    else:
        t.add(name, f"{ours:.2f} ms", f"MediaPipe: {r['notes'].get('mediapipe', 'n/a')}"[:100], None, "report", None)
    t.add(
        "selfie e2e: XNNPACK's own op instead of our kernel",
        f"{ms['opaque_ops_xnnpack_op']:.2f} ms",
        f"default {ours:.2f} ms",
        ms["opaque_ops_xnnpack_op"] / ours,
        "info",
        None,
    )
    t.add(
        "selfie e2e: use_xnnpack=False",
        f"{ms['opaque_ops_no_xnnpack']:.2f} ms",
        f"default {ours:.2f} ms",
        ms["opaque_ops_no_xnnpack"] / ours,
        "info",
        None,
    )


def sec_pyop(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_python_op

    r = bench_python_op(quick)
    raw["python_op_us"] = r
    t.add(
        "Python op invoke (Clamp, 16 floats)",
        f"{r['python_op']:.2f} µs",
        f"same op in C {r['c_op']:.2f} µs",
        r["python_op"] / r["c_op"],
        "report",
        None,
    )


def sec_compile(t: Table, raw: dict, quick: bool) -> None:
    from bench_core import bench_compile

    r = bench_compile()
    raw["compile"] = r
    t.add(
        "compile_ops warm (cache hit)",
        f"{r['compile_warm_ms']:.2f} ms",
        f"cold {r['compile_cold_ms']:.0f} ms",
        r["compile_warm_ms"] / r["compile_cold_ms"],
        "warm ≤ 20 ms",
        r["compile_warm_ms"] <= 20,
    )


def sec_import(t: Table, raw: dict, quick: bool) -> None:
    from bench_core import bench_import

    r = bench_import(3 if quick else 9)
    raw["import"] = r
    t.add("import opaque_ops", f"{r['import_ms']:.1f} ms", None, None, "≤ 50 ms", r["import_ms"] <= 50)
    t.add(
        "import opaque_ops, numpy + touch Interpreter",
        f"{r['import_with_numpy_and_interpreter_ms']:.1f} ms",
        "numpy's own import is most of it",
        None,
        "info",
        None,
    )


def _dir_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


def measure_install(refresh: bool = False) -> dict:
    """Install this checkout (non-editable) into a fresh venv and sum what it brings, numpy excluded.

    The result is cached in the temp directory, keyed by pyproject.toml and
    the package's file list; ``refresh`` measures again.
    """
    key_src = (ROOT / "pyproject.toml").read_bytes()
    key_src += "".join(
        sorted(str(p.relative_to(ROOT)) + str(p.stat().st_size) for p in (ROOT / "opaque_ops").glob("*.py"))
    ).encode()
    key = hashlib.sha256(key_src).hexdigest()[:16]
    if INSTALL_CACHE.exists() and not refresh:
        cached = json.loads(INSTALL_CACHE.read_text())
        if cached.get("key") == key:
            cached["cached"] = True
            return cached
    venv = Path(tempfile.mkdtemp(prefix="oo_bench_venv_"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        py = venv / "bin" / "python"
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True, text=True)
        if proc.returncode != 0:
            return {"error": "pip install failed: " + proc.stderr[-2000:]}
        site = Path(
            subprocess.run(
                [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        groups: dict[str, int] = {}
        for entry in site.iterdir():
            name = entry.name
            base = name.split("-")[0].lower().replace(".", "_") if name.endswith((".dist-info", ".egg-info")) else name
            base = base.lower()
            if base.endswith(".libs"):
                base = base[:-5]
            if base.startswith("_cffi_backend"):
                base = "cffi"
            if base in ("__pycache__", "_distutils_hack", "distutils-precedence.pth"):
                base = "setuptools"
            groups[base] = groups.get(base, 0) + _dir_size(entry)
        excluded = {k: v for k, v in groups.items() if k in ("numpy", "pip")}
        counted = {k: v for k, v in groups.items() if k not in excluded}
        mww = site / "pymicro_wakeword"
        lib_size = _dir_size(mww / "lib") if mww.exists() else 0
        total = sum(counted.values())
        used = total - groups.get("pymicro_wakeword", 0) + lib_size - groups.get("pymicro_features", 0)
        res = {
            "key": key,
            "packages_bytes": counted,
            "excluded_bytes": excluded,
            "total_bytes": total,
            "pymicro_wakeword_lib_bytes": lib_size,
            "used_bytes": used,
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        INSTALL_CACHE.write_text(json.dumps(res, indent=2))
        res["cached"] = False
        return res
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def sec_install(t: Table, raw: dict, quick: bool, skip: bool = False, refresh: bool = False) -> None:
    if skip:
        if INSTALL_CACHE.exists():
            r = json.loads(INSTALL_CACHE.read_text())
            r["cached"] = True
        else:
            t.add("install size (no numpy)", None, "skipped (--skip-install, no cached result)", None, "≤ 10 MB", None)
            return
    else:
        r = measure_install(refresh)
    if "error" in r:
        raw["install"] = r
        t.add("install size (no numpy)", None, r["error"][:80], None, "≤ 10 MB", None)
        return
    # Top-level site-packages entries -> the distribution that installed them.
    alias = {"pkg_resources": "setuptools", "micro_features_cpp.abi3.so": "pymicro_features"}
    groups: dict[str, int] = {}
    for k, v in r["packages_bytes"].items():
        k = alias.get(k, k)
        groups[k] = groups.get(k, 0) + v
    total = sum(groups.values())
    st = groups.get("setuptools", 0)
    # opaque_ops reads only pymicro_wakeword/lib/ and never imports pymicro_features.
    used = (
        total - groups.get("pymicro_wakeword", 0) - groups.get("pymicro_features", 0) + r["pymicro_wakeword_lib_bytes"]
    )
    r = dict(r, packages_bytes=groups, total_bytes=total, used_bytes=used, setuptools_bytes=st)
    raw["install"] = r
    mb = 1024 * 1024
    parts = ", ".join(f"{k} {v / mb:.2f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])[:3]) + ", ..."
    t.add(
        "install size, all wheels (no numpy)", f"{total / mb:.2f} MB", f"MB: {parts}", None, "≤ 10 MB", total <= 10 * mb
    )
    t.add(
        "install size, all wheels minus setuptools",
        f"{(total - st) / mb:.2f} MB",
        "setuptools is needed only by compile_ops",
        None,
        "≤ 10 MB",
        total - st <= 10 * mb,
    )
    t.add(
        "install size, what opaque_ops uses",
        f"{used / mb:.2f} MB",
        "pymicro_wakeword lib/ only, no pymicro_features",
        None,
        "≤ 10 MB",
        used <= 10 * mb,
    )
    t.add(
        "install size, used minus setuptools",
        f"{(used - st) / mb:.2f} MB",
        "running prebuilt kernels only",
        None,
        "≤ 10 MB",
        used - st <= 10 * mb,
    )


def sec_threads(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_threads_sweep
    from bench_threads import bench_threads, gil_probe

    sw = bench_threads_sweep(quick)
    raw["threads_sweep_us"] = sw
    for impl in ("opaque_ops", "ai_edge_litert"):
        if f"{impl}_t1" in sw:
            t.add(
                f"embedding_model num_threads 2 vs 1 ({impl})",
                f"t2 {sw[f'{impl}_t2']:.0f} µs",
                f"t1 {sw[f'{impl}_t1']:.0f} µs",
                sw[f"{impl}_t2"] / sw[f"{impl}_t1"],
                "report (<1 = faster)",
                None,
            )
    th = bench_threads(quick)
    raw["two_python_threads"] = th
    for impl, r in th.items():
        if isinstance(r, dict):
            t.add(
                f"2 Python threads x 2 interpreters ({impl})",
                f"{r['two_threads_ips']:.0f} inv/s",
                f"1 thread {r['one_thread_ips']:.0f} inv/s",
                r["ratio"],
                "≥ 1.6× throughput",
                r["ratio"] >= 1.6 if impl == "opaque_ops" else None,
            )
    gp = gil_probe(quick)
    raw["gil_probe"] = gp
    if "opaque_ops" in gp:
        lt = gp.get("ai_edge_litert", {}).get("counter_progress")
        t.add(
            "Python thread progress during invoke (GIL probe)",
            f"{gp['opaque_ops']['counter_progress']:.0%} of solo",
            f"ai-edge-litert {lt:.0%} of solo" if lt is not None else None,
            gp["opaque_ops"]["counter_progress"] / lt if lt else None,
            "report (GIL released)",
            None,
        )


def sec_scaling(t: Table, raw: dict, quick: bool) -> None:
    from bench_models import bench_atan_scaling, bench_melspec_scaling

    at = bench_atan_scaling(quick)
    raw["atan_scaling"] = at
    for row in at:
        t.add(
            f"Atan scaling, {row['elements']:.0e} elements",
            f"{row['kernel_ns_per_elem']:.2f} ns/elem",
            f"np.arctan {row['numpy_ns_per_elem']:.2f} ns/elem",
            row["kernel/numpy"],
            "report",
            None,
        )
    ms = bench_melspec_scaling(quick)
    raw["melspec_scaling"] = ms
    for row in ms:
        peer = row.get("ai_edge_litert_ns_per_sample")
        t.add(
            f"melspectrogram scaling, {row['samples']} samples",
            f"{row['opaque_ops_ns_per_sample']:.1f} ns/sample",
            f"ai-edge-litert {peer:.1f} ns/sample" if peer else None,
            row.get("ours/litert"),
            "report",
            None,
        )


def sec_isolate(t: Table, raw: dict, quick: bool) -> None:
    from bench_isolate import run

    r = run(quick)
    raw["isolate"] = r
    tiny = r["tiny_us"]
    t.add(
        "isolated tiny ADD: set+invoke+get",
        f"{tiny['isolated']:.2f} µs",
        f"in-process {tiny['in_process']:.2f} µs",
        tiny["isolated"] / tiny["in_process"],
        "≤ 30 µs",
        tiny["isolated"] <= 30,
    )
    t.add(
        "isolated tiny ADD vs bare semaphore round trip",
        f"{tiny['isolated']:.2f} µs",
        f"round trip {tiny['semaphore_round_trip']:.2f} µs",
        tiny["isolated"] / tiny["semaphore_round_trip"],
        "report",
        None,
    )
    for key, label, unit, limit in (
        ("selfie_ms", "isolated selfie_segmentation e2e", "ms", 1.1),
        ("embedding_us", "isolated embedding_model e2e", "µs", None),
    ):
        m = r[key]
        if "error" in m:
            t.add(label, None, m["error"], None, f"≤ {limit}×" if limit else "report", None)
            continue
        ratio = m["isolated"] / m["in_process"]
        t.add(
            label,
            f"{m['isolated']:.3f} {unit}",
            f"in-process {m['in_process']:.3f} {unit}",
            ratio,
            f"≤ {limit}×" if limit else "report",
            ratio <= limit if limit else None,
        )
        t.add(
            f"{label}: outputs bit-identical",
            "yes" if m["bit_identical"] else "NO",
            "in-process",
            None,
            "identical",
            bool(m["bit_identical"]),
        )
    s = r["startup_s"]
    t.add(
        "isolated start-up to first output",
        f"{s['isolated'] * 1e3:.0f} ms",
        f"in-process {s['in_process'] * 1e3:.1f} ms",
        None,
        "report",
        None,
    )


# -------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations: a smoke run, noisier")
    ap.add_argument("--json", metavar="PATH", help="write every number as JSON")
    ap.add_argument("--skip-install", action="store_true", help="use the cached install size, or none")
    ap.add_argument("--refresh-install", action="store_true", help="measure the install size again")
    ap.add_argument("--threads", action="store_true", help="only the thread measures (same as --sections threads)")
    ap.add_argument("--sections", help=f"comma-separated subset of {','.join(SECTIONS)}")
    args = ap.parse_args(argv)
    sections = SECTIONS
    if args.threads:
        sections = ["threads"]
    if args.sections:
        sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        bad = [s for s in sections if s not in SECTIONS]
        if bad:
            ap.error(f"unknown sections {bad}; choose from {SECTIONS}")
    # The runtime's delegate banner goes to fd 2 on every interpreter; keep the table readable.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    table, raw = Table(), {}
    load_start = os.getloadavg()
    t_start = time.perf_counter()
    for s in sections:
        t0 = time.perf_counter()
        try:
            if s == "install":
                sec_install(table, raw, args.quick, args.skip_install, args.refresh_install)
            else:
                globals()[f"sec_{s}"](table, raw, args.quick)
        except Exception as exc:  # noqa: BLE001 - one broken section must not hide the rest
            table.add(f"[{s}] failed", None, f"{type(exc).__name__}: {exc}"[:120])
            raw.setdefault("errors", {})[s] = repr(exc)
        print(f"# {s}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    meta = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "quick": args.quick,
        "seconds": time.perf_counter() - t_start,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import numpy

        import opaque_ops

        meta["numpy"] = numpy.__version__
        meta["tflite_c"] = getattr(opaque_ops.runtime_info(), "version", None)
    except Exception:  # noqa: BLE001 - metadata only
        pass
    from bench_selfie import cpu_summary

    meta["cpu"] = cpu_summary()
    print(
        f"\nopaque_ops benchmark suite ({'quick' if args.quick else 'full'}), {meta['cpus']} CPUs, "
        f"load average {meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at end; ratio = ours / peer unless stated"
    )
    print(f"CPU: {meta['cpu']}\n")
    print(table.render())
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "table": table.rows, "raw": raw}, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
