"""Hostile custom options against every bundled kernel, under ASan + UBSan.

Custom options come from model files, which are untrusted.  Two harnesses:

* libFuzzer (clang): c/fuzz/kernel_options_fuzz.c feeds fuzz bytes to the
  Init and Free of every op that has an Init, each input in an exactly sized
  heap block, so a read one byte past the options is caught.  Built and run
  through tools/fuzz_kernel_options.py, which is also the long campaign.
* The full path (gcc): every kernel built with ``build.py --sanitize
  address,undefined``, loaded with ``opaque_ops.load_ops`` in a child Python
  with the ASan runtime preloaded, and every op run as a one-op model through
  allocate_tensors and invoke (XNNPACK off, so the kernels run) with random,
  truncated, mutated and extreme options.  Each case must either work or
  raise an OpaqueOpsError.  The options are moved to the very end of the
  model buffer, so that an over-read of them leaves the model's heap block
  and ASan sees it (Python's bytes keep one NUL after the data, so the first
  byte past the options is not caught here; libFuzzer catches it).

Both harnesses are also shown to fail on a deliberately buggy kernel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.helpers.child_process import run_child, run_python
from tests.helpers.locations import ROOT
from tools import fuzz_kernel_options as fko

KERNELS_DIR = ROOT / "c" / "kernels"
CASES_PER_OP = 200

SANITIZER_REPORT = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error|==\d+==ERROR")
# With allocator_may_return_null=1 ASan warns about each refused allocation;
# that is the intended outcome for an absurd (but validated) output size.
ALLOC_WARNING = re.compile(r"^==\d+==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ bytes$", re.M)

# A kernel whose Init trusts the options' length, as a careless raw-struct
# parser would: it copies 12 bytes whatever the length.
BUGGY_KERNEL = r"""
#include <stdlib.h>
#include <string.h>
#include "opaque_ops.h"

typedef struct { int32_t f[3]; } BugData;

static void* BugInit(TfLiteOpaqueContext* context, const char* buffer, size_t length) {
  BugData* d = (BugData*)calloc(1, sizeof *d);
  (void)context;
  (void)length;
  if (d != NULL && buffer != NULL) memcpy(d->f, buffer, sizeof d->f);
  return d;
}

static void BugFree(TfLiteOpaqueContext* context, void* data) {
  (void)context;
  free(data);
}

static TfLiteStatus BugPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TfLiteIntArray* shape = TfLiteIntArrayCreate(TfLiteOpaqueTensorNumDims(in));
  for (int i = 0; i < shape->size; i++) shape->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(context, out, shape);
}

static TfLiteStatus BugInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  (void)context;
  (void)node;
  return kTfLiteOk;
}

OPAQUE_OP("BuggyOptions", 1, .init = BugInit, .free = BugFree, .prepare = BugPrepare,
          .invoke = BugInvoke);
"""

# ---------------------------------------------------------------------------
# The child script of the full-path harness.  argv: library path, JSON list of
# op names to run (empty: all), cases per op.  Prints one JSON line of counts.
HOSTILE_SCRIPT = textwrap.dedent(r'''
    import json, random, struct, sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model import ModelBuilder, flex_options

    lib = oo.load_ops(sys.argv[1])
    only = set(json.loads(sys.argv[2]))
    cases = int(sys.argv[3])
    extra_specs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}

    MARK = b"\xa5OO-OPTIONS-MARK\x5a"
    EXTREME_I32 = [0, 1, -1, 2, 3, 4, 65535, 65536, 65537, 2**30, 2**31 - 1, -2**31]
    EXTREME_ANY = [0, -1, 2**31 - 1, 2**31, -2**31 - 1, 2**53, 2**63 - 1, -2**63, 3.4e38, -3.4e38,
                   float("inf"), float("nan"), -0.0, 1e-45, "SAME", "", "x" * 300, True,
                   [], [1] * 1000, [2**62, -1, 0, 1], {"nested": [1, 2]}, b"\x00\xff"]

    def raw(*vals):
        return struct.pack("<%di" % len(vals), *vals)

    L2T = {"left_rotation_idx": 0, "right_rotation_idx": 1, "output_height": 16,
           "output_width": 16, "scale_x": 1.5, "scale_y": 1.5, "target_rotation_radians": 0.0,
           "subset_idxs": [0, 1, 2, 3, 9]}
    EIP = {"T": 0, "ksizes": [1, 3, 3, 1], "padding": "SAME", "rates": [1, 1, 1, 1],
           "strides": [1, 1, 1, 1]}
    # name: (version, input shapes, number of outputs, valid option dicts or raw blobs)
    SPECS = {
        "Atan": (1, [[2, 3]], 1, []),
        "Clamp": (1, [[2, 3]], 1, []),
        "TransformLandmarks": (2, [[1, 10, 3], [1, 4, 4]], 1, []),
        "Convolution2DTransposeBias": (1, [[1, 4, 4, 3], [2, 3, 3, 3], [2]], 1,
                                       [raw(1, 2, 2), raw(2, 1, 3), raw(1, 2, 2, 0, 0)]),
        "MaxPoolingWithArgmax2D": (1, [[1, 5, 5, 2]], 2,
                                   [raw(1, 2, 2, 2, 2, 0, 0, 0), raw(2, 1, 2, 3, 2, 1, 0, 0, 0, 0)]),
        "MaxUnpooling2D": (1, [[1, 5, 5, 2], [1, 5, 5, 2]], 1,
                           [raw(1, 2, 2, 2, 2, 0, 0, 0), raw(2, 3, 1, 2, 2, 0, 0, 0, 0, 0)]),
        "ExtractImagePatches": (1, [[1, 6, 5, 2]], 1,
                                [EIP, dict(EIP, ksizes=[1, 2, 3, 1], padding="VALID",
                                           rates=[1, 2, 1, 1], strides=[1, 2, 1, 1])]),
        "TransformTensorBilinear": (2, [[1, 6, 6, 2], [1, 4, 4]], 1,
                                    [{"output_height": 4, "output_width": 4}]),
        "Landmarks2TransformMatrix": (2, [[1, 468, 3]], 1, [L2T]),
    }
    for name, (version, shapes, nout, blobs) in extra_specs.items():
        SPECS[name] = (version, shapes, nout, [bytes.fromhex(b) for b in blobs])

    def options_at_end(model, opts):
        """Re-point the op's custom_options vector at a copy appended to the buffer's end."""
        m = model.index(MARK)
        vec = m - 4
        assert struct.unpack_from("<I", model, vec)[0] == len(MARK)
        refs = [p for p in range(0, vec, 4) if p + struct.unpack_from("<I", model, p)[0] == vec]
        assert len(refs) == 1, refs
        out = bytearray(model)
        out += b"\0" * (-len(out) % 4)
        struct.pack_into("<I", out, refs[0], len(out) - refs[0])
        out += struct.pack("<I", len(opts)) + opts
        return bytes(out)

    def build(name, opts):
        version, shapes, nout, _ = SPECS[name]
        b = ModelBuilder()
        ins = [b.add_tensor("in%d" % i, s, np.float32) for i, s in enumerate(shapes)]
        outs = [b.add_tensor("out%d" % i, [1], np.float32) for i in range(nout)]
        b.add_custom_op(name, ins, outs, options=MARK if opts else None, version=version)
        b.set_inputs(ins)
        b.set_outputs(outs)
        model = b.build()
        return options_at_end(model, opts) if opts else model

    def mutate(rng, base):
        data = bytearray(base)
        kind = rng.randrange(3)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif rng.random() < 0.5:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        else:
            del data[rng.randrange(len(data))]
        return bytes(data)

    def extreme(rng, base):
        if isinstance(base, bytes):
            vals = list(struct.unpack("<%di" % (len(base) // 4), base[:len(base) // 4 * 4]))
            for _ in range(rng.randint(1, 3)):
                vals[rng.randrange(len(vals))] = rng.choice(EXTREME_I32)
            return raw(*vals) + bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 1, 3, 8])))
        opts = dict(base)
        key = rng.choice(sorted(opts) + ["zz_unknown"])
        r = rng.random()
        if r < 0.15 and key in opts:
            del opts[key]
        elif isinstance(opts.get(key), list) and r < 0.6:
            opts[key] = [rng.choice(EXTREME_I32 + [2**40, -2**62]) for _ in opts[key]]
        else:
            opts[key] = rng.choice(EXTREME_ANY)
        try:
            return flex_options(opts)
        except Exception:  # the Python flexbuffers builder cannot encode every value
            return flex_options(base)

    def hostile(rng, valid, i):
        encoded = [v if isinstance(v, bytes) else flex_options(v) for v in valid]
        kind = i % 5 if encoded else 0
        if kind == 0:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 96)))
        base = rng.choice(encoded)
        if kind == 1:
            return base[:rng.randrange(1, len(base))] if len(base) > 1 else base
        if kind == 2:
            return mutate(rng, base)
        if kind == 3:
            return extreme(rng, rng.choice(valid))
        return base if rng.random() < 0.3 else mutate(rng, mutate(rng, base))

    missing = sorted(set(lib.names) - set(SPECS))
    if missing and not only:
        raise SystemExit("no hostile-options spec for %s: add it to SPECS" % missing)
    rng = random.Random(20240917)
    counts = {}
    for name in sorted(SPECS):
        if only and name not in only:
            continue
        if name not in lib.names:
            raise SystemExit("op %s is not in %s (ops: %s)" % (name, sys.argv[1], lib.names))
        ok = err = 0
        for i in range(cases):
            opts = hostile(rng, SPECS[name][3], i)
            model = build(name, opts)
            try:
                it = oo.Interpreter(model_content=model, custom_ops=[lib], num_threads=1,
                                    use_xnnpack=False)
                it.allocate_tensors()
                for d in it.get_input_details():
                    x = rng.random() * np.random.default_rng(i).random(d["shape"], np.float32)
                    if name == "MaxUnpooling2D" and d["index"] == 1:
                        x = x * (4 if i % 3 else 40)  # argmax indices, some out of the window
                    it.set_tensor(d["index"], x.astype(np.float32))
                it.invoke()
                for d in it.get_output_details():
                    it.get_tensor(d["index"])
                ok += 1
            except oo.OpaqueOpsError:
                err += 1
        counts[name] = {"ok": ok, "err": err}
    print(json.dumps(counts))
''')


def _preload() -> str | None:
    """The gcc ASan runtime to preload into Python, or None when gcc has none."""
    if shutil.which("gcc") is None:
        return None
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _build_asan(out: Path, *, sources=(), kernels=("all",)) -> Path:
    if _preload() is None:
        pytest.skip("gcc with libasan is not installed (apt-get install gcc)")
    args = [ROOT / "build.py", *sources]
    if kernels:
        args += ["--kernels", *kernels]
    args += ["--sanitize", "address,undefined", "--cflag=-fno-sanitize-recover=all", "--cc", "gcc", "-o", out]
    res = run_python(*args, timeout=None)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def _run_hostile(lib: Path, ops=(), cases=CASES_PER_OP, extra_specs=None, timeout=240):
    env = {}
    env["LD_PRELOAD"] = _preload()
    # Python's small-object allocator carves blocks out of big arenas with no
    # redzones; plain malloc gives every object (the model bytes included)
    # its own ASan-guarded block.
    env["PYTHONMALLOC"] = "malloc"
    # Python keeps objects alive until exit by design: leak reports would be
    # noise.  Allocations over 256 MiB fail (NULL) instead of aborting, so an
    # absurd but validated output size is an error, not an OOM kill.
    env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=256:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    args = [str(lib), json.dumps(list(ops)), str(cases)]
    if extra_specs:
        args.append(json.dumps(extra_specs))
    return run_child(HOSTILE_SCRIPT, *args, timeout=timeout, env=env)


def _opaque_op_count() -> int:
    """OPAQUE_OP lines in the bundled kernels: the ops every harness must reach."""
    text = "".join(p.read_text() for p in KERNELS_DIR.glob("*.c"))
    return len(re.findall(r"^OPAQUE_OP\(", text, re.M))


# ------------------------------------------------------------- libFuzzer --


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory):
    why = fko.libfuzzer_available()
    if why:
        pytest.skip(why)
    return fko.build(tmp_path_factory.mktemp("kfuzz"))


def test_libfuzzer_smoke(fuzz_target, tmp_path):
    corpus = tmp_path / "corpus"
    fko.write_seeds(corpus)
    # The runs peak at about 340 MB of RSS (60 seeds).  One CI run of 2026-11-27
    # ended in libFuzzer's RSS limit (2254 of its default 2048 MB) with no
    # input to blame (the empty one) and no allocation over the limit; it did
    # not come back in 60 seeds here.  Init/Free allocate at most the options'
    # length, so the whole-process limit is doubled and a single allocation
    # over 2048 MB is still a finding (-malloc_limit_mb).
    limits = ["-rss_limit_mb=4096", "-malloc_limit_mb=2048"]
    proc, s = fko.run(fuzz_target, corpus, runs=100_000, seconds=20, seed=1, timeout=120, cwd=tmp_path, extra=limits)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and s["findings"] == 0, out[-6000:]
    assert not SANITIZER_REPORT.search(out), out[-6000:]
    # Every bundled op was linked, and all six option parsers were fuzzed.
    m = re.search(r"kernel_options_fuzz: (\d+) ops linked, fuzzing the Init/Free of (\d+):(.*)", out)
    assert m, out[-3000:]
    assert int(m.group(1)) == _opaque_op_count()
    fuzzed = {n.split("/")[0] for n in m.group(3).split()}
    assert {
        "Convolution2DTransposeBias",
        "ExtractImagePatches",
        "Landmarks2TransformMatrix",
        "MaxPoolingWithArgmax2D",
        "MaxUnpooling2D",
        "TransformTensorBilinear",
    } <= fuzzed
    # 100k runs normally (about 3 s); a slow machine may stop at the time cap.
    assert s["runs"] >= 20_000, s
    assert s["cov"] > 100, s


def test_libfuzzer_target_catches_an_options_overread(tmp_path):
    why = fko.libfuzzer_available()
    if why:
        pytest.skip(why)
    src = tmp_path / "buggy_options.c"
    src.write_text(BUGGY_KERNEL)
    exe = fko.build(tmp_path / "build", kernels=[src])
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ok12").write_bytes(bytes(12))
    proc, s = fko.run(exe, corpus, runs=50_000, seconds=20, seed=1, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and s["findings"] == 1, out[-3000:]
    assert "heap-buffer-overflow" in out and "BugInit" in out, out[-3000:]


# -------------------------------------------------- full path under gcc ASan --


@pytest.fixture(scope="module")
def asan_kernels(tmp_path_factory):
    return _build_asan(tmp_path_factory.mktemp("asan") / "k_asan.so")


def test_hostile_options_every_op_under_asan(asan_kernels):
    proc = _run_hostile(asan_kernels)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    stderr = ALLOC_WARNING.sub("", proc.stderr)
    assert not SANITIZER_REPORT.search(stderr), stderr[-6000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(counts) == _opaque_op_count(), counts
    for name, c in counts.items():
        assert c["ok"] + c["err"] == CASES_PER_OP, (name, c)
    # Ops without options ignore them: every case runs.
    for name in ("Atan", "Clamp", "TransformLandmarks"):
        assert counts[name] == {"ok": CASES_PER_OP, "err": 0}, counts
    # For the others both outcomes must occur, or the cases exercised nothing.
    for name in (
        "Convolution2DTransposeBias",
        "ExtractImagePatches",
        "Landmarks2TransformMatrix",
        "MaxPoolingWithArgmax2D",
        "MaxUnpooling2D",
        "TransformTensorBilinear",
    ):
        assert counts[name]["ok"] >= 10 and counts[name]["err"] >= 50, (name, counts[name])


def test_full_path_harness_catches_an_options_overread(tmp_path):
    src = tmp_path / "buggy_options.c"
    src.write_text(BUGGY_KERNEL)
    lib = _build_asan(tmp_path / "buggy_asan.so", sources=[src], kernels=())
    spec = {"BuggyOptions": [1, [[2, 3]], 1, [bytes(12).hex()]]}
    proc = _run_hostile(lib, ops=["BuggyOptions"], cases=40, extra_specs=spec)
    assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "AddressSanitizer: heap-buffer-overflow" in proc.stderr, proc.stderr[-3000:]
    assert "BugInit" in proc.stderr, proc.stderr[-3000:]
