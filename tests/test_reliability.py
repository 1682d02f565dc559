"""Reliability: corrupt models, leaks, threads, Ctrl-C, object lifetimes.

The long versions (100k fuzz inputs, 10k create/close cycles) are in
tools/fuzz_models.py and tools/leak_check.py; here are short ones, plus the
long ones behind ``-m slow``.  Anything that could take the test process down
runs in a child process.
"""

from __future__ import annotations

import gc
import re
import shutil
import sys
import threading
import weakref

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder, check_model, read_model

from child import run_child
from conftest import ATAN_INPUT, ROOT, package_file

sys.path.insert(0, str(ROOT))
from tools import fuzz_models, leak_check  # noqa: E402

OFFSET = np.float32(0.99999905)


def atan_ref(x):
    return np.arctan((x + OFFSET).astype(np.float64)).astype(np.float32)




# ===================================================================== fuzz


def test_fuzz_short_run_has_no_crash_and_only_opaque_ops_errors(tmp_path):
    totals = fuzz_models.run(1500, seed=7, workdir=tmp_path, chunk=750, workers=1)
    assert totals["crashes"] == [], totals["crashes"]
    assert totals["findings"] == [], totals["findings"]
    # The mutations reach both outcomes: some models still run, most are refused.
    assert totals["ok"] > 100 and totals["rejected"] > 500
    assert totals["ok"] + totals["rejected"] == 1500


@pytest.mark.slow
@pytest.mark.parametrize("xnnpack", [False, True])
def test_fuzz_long_run(tmp_path, xnnpack):
    totals = fuzz_models.run(20000, seed=11, workdir=tmp_path, chunk=1000, workers=2, xnnpack=xnnpack)
    assert totals["crashes"] == [] and totals["findings"] == [], (totals["crashes"], totals["findings"])


# The inputs the byte fuzzer once crashed the process with are kept as files
# in tests/corpus/bytefuzz/ with their exact messages, replayed by
# tests/model/test_checks.py (they are never regenerated with today's mutator).


def _add_model(extra=None):
    """x -> ADD(x, c) -> y, optionally corrupted by ``extra(builder, ids)``."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    c = b.add_constant("c", np.ones(4, np.float32))
    y = b.add_tensor("y", [4], np.float32)
    z = b.add_tensor("z", [4], np.float32)
    ids = dict(x=x, c=c, y=y, z=z)
    if extra is None:
        b.add_op("ADD", [x, c], [y])
        b.add_op("MUL", [y, c], [z])
    else:
        extra(b, ids)
    b.set_inputs([x])
    b.set_outputs([z])
    return b.build()


@pytest.mark.parametrize("case, expect", [
    (lambda b, t: (b.add_op("ADD", [t["x"], t["c"]], [t["z"]]), b.add_op("MUL", [t["x"], t["c"]], [t["z"]])),
     "already writes"),
    (lambda b, t: b.add_op("ADD", [t["z"], t["c"]], [t["z"]]), "also one of its own inputs"),
    (lambda b, t: (b.add_op("ADD", [t["c"], t["c"]], [t["x"]]), b.add_op("ADD", [t["x"], t["c"]], [t["z"]])),
     "input of the subgraph"),
    (lambda b, t: (b.add_op("ADD", [t["x"], t["x"]], [t["c"]]), b.add_op("ADD", [t["x"], t["c"]], [t["z"]])),
     "is a constant"),
    (lambda b, t: (b.add_op("MUL", [t["y"], t["c"]], [t["z"]]), b.add_op("ADD", [t["x"], t["c"]], [t["y"]])),
     "before operator 1 writes it"),
    (lambda b, t: b.add_op("ADD", [t["x"], -1], [t["z"]]), "omitted (-1) input"),
    (lambda b, t: b.add_op("ADD", [t["x"], t["c"]], [t["y"]]), "is written by no operator"),
    (lambda b, t: b.add_op("ADD", [t["x"]], [t["z"]]), "ADD takes at least 2"),
    (lambda b, t: (b.add_op("ADD", [t["x"], t["c"]], []), b.add_op("MUL", [t["x"], t["c"]], [t["z"]])),
     "has no outputs"),
])
def test_check_model_rules(case, expect):
    data = _add_model(case)
    with pytest.raises(oo.ModelError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        check_model(read_model(data))
    with pytest.raises(oo.ModelError):
        oo.Interpreter(model_content=data)


def test_check_model_accepts_the_good_model_and_real_models():
    check_model(read_model(_add_model()))
    for pkg, rel in (("pyopen_wakeword", "models"), ("pymicro_wakeword", "models")):
        d = package_file(pkg, rel)
        for f in sorted(d.glob("*.tflite")):
            check_model(read_model(f))


def test_check_model_rules_on_a_real_streaming_model():
    # microWakeWord's okay_nabu: resource variables, int8 convolutions.
    import dataclasses

    path = package_file("pymicro_wakeword", "models", "okay_nabu.tflite")
    check_model(read_model(path))

    def broken(edit):
        info = read_model(path)
        edit(info.subgraphs[0])
        return info

    def read_var_shape(sg):
        op = next(o for o in sg.operators if o.op_name == "READ_VARIABLE")
        t = sg.tensors[op.outputs[0]]
        sg.tensors[t.index] = dataclasses.replace(t, shape=(1, 99, 1, 64))

    def drop_bias(sg):
        op = next(o for o in sg.operators if o.op_name == "DEPTHWISE_CONV_2D")
        op.inputs = op.inputs[:2]

    def nan_scale(sg):
        t = next(t for t in sg.tensors if len(t.quantization["scales"]))
        t.quantization["scales"] = np.array([np.nan], np.float32)

    for edit, expect in ((read_var_shape, "READ_VARIABLE) declares output shape"),
                         (drop_bias, "has no bias input"), (nan_scale, "finite and positive")):
        with pytest.raises(oo.ModelError, match=re.escape(expect)):
            check_model(broken(edit))


def test_zero_stride_is_refused():
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4, 4, 1], np.float32)
    y = b.add_tensor("y", [1, 2, 2, 1], np.float32)
    b.add_op("MAX_POOL_2D", [x], [y], options={"padding": "VALID", "stride_w": 0, "stride_h": 2,
                                                "filter_width": 2, "filter_height": 2})
    b.set_inputs([x])
    b.set_outputs([y])
    with pytest.raises(oo.ModelError, match="stride_w=0"):
        oo.Interpreter(model_content=b.build())


def test_melspectrogram_with_xnnpack_at_declared_size_is_refused_then_runs_resized():
    path = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")
    code = f"""
        import numpy as np, opaque_ops as oo
        from ai_edge_litert.interpreter import Interpreter as Ref
        it = oo.Interpreter(model_path={str(path)!r}, use_xnnpack=True)
        try:
            it.allocate_tensors()
            it.invoke()
            print("NOT REFUSED")
        except oo.ModelError as e:
            print("refused:", e)
        x = (np.random.default_rng(0).standard_normal((1, 1760)) * 1000).astype(np.float32)
        it.resize_tensor_input(0, [1, 1760]); it.allocate_tensors()
        it.set_tensor(0, x); it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        ref = Ref(model_path={str(path)!r}); ref.resize_tensor_input(0, [1, 1760]); ref.allocate_tensors()
        ref.set_tensor(ref.get_input_details()[0]["index"], x); ref.invoke()
        want = ref.get_tensor(ref.get_output_details()[0]["index"])
        print("shape", got.shape, "maxdiff", float(np.abs(got - want).max()))
    """
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused:" in p.stdout and "1x512 window" in p.stdout, p.stdout
    last = p.stdout.strip().splitlines()[-1].split()
    assert last[1:5] == ["(1,", "1,", "8,", "32)"]
    assert float(last[-1]) < 1e-3


# ==================================================================== leaks


@pytest.mark.parametrize("kind", ["c", "python"])
def test_no_memory_growth_over_1500_cycles(kind):
    # 10k cycles may grow < 2 MB (200 bytes/cycle); 1500 cycles get that share.
    res = leak_check.measure(kind, cycles=1500, warmup=200)
    assert res["growth_mb"] < 0.3, res


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["builtin", "c", "python"])
def test_no_memory_growth_over_10k_cycles(kind):
    res = leak_check.measure(kind, cycles=10000, warmup=500)
    assert res["growth_mb"] < 2.0, res


LIFECYCLE_KERNEL = r"""
#include <stdlib.h>
#include <string.h>
#include "opaque_ops.h"

typedef struct { float scale; float* table; } ScaleState;

static void* ScaleInit(TfLiteOpaqueContext* ctx, const char* buf, size_t len) {
  ScaleState* s = malloc(sizeof *s);
  if (!s) return NULL;
  s->scale = 2.0f;
  if (buf && len == sizeof(float)) memcpy(&s->scale, buf, sizeof(float));
  s->table = malloc(64 * sizeof(float));   /* per-node scratch, freed in free() */
  return s;
}

static void ScaleFree(TfLiteOpaqueContext* ctx, void* data) {
  ScaleState* s = data;
  if (!s) return;
#ifndef LEAK
  free(s->table);
#endif
  free(s);
}

static TfLiteStatus ScalePrepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  ScaleState* s = TfLiteOpaqueNodeGetUserData(node);
  TF_LITE_OPAQUE_ENSURE(ctx, s != NULL && s->table != NULL);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(ctx, node, 0);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(ctx, TfLiteOpaqueTensorType(in), kTfLiteFloat32);
  int n = TfLiteOpaqueTensorNumDims(in);
  TfLiteIntArray* shape = TfLiteIntArrayCreate(n);
  for (int i = 0; i < n; ++i) shape->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(ctx, TfLiteOpaqueNodeGetOutput(ctx, node, 0), shape);
}

static TfLiteStatus ScaleInvoke(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  ScaleState* s = TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(ctx, node, 0);
  const float* x = TfLiteOpaqueTensorData(in);
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(ctx, node, 0));
  size_t n = TfLiteOpaqueTensorByteSize(in) / sizeof(float);
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * s->scale;
  return kTfLiteOk;
}

OPAQUE_OP("Scale", 1, .init = ScaleInit, .free = ScaleFree, .prepare = ScalePrepare, .invoke = ScaleInvoke);
"""


def _scale_model() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [5], np.float32)
    y = b.add_tensor("y", [5], np.float32)
    b.add_custom_op("Scale", [x], [y], options=np.float32(3.0).tobytes())
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is needed (.ci/run installs it)")
def test_kernel_lifecycle_is_valgrind_clean_and_a_leak_is_caught(tmp_path):
    from opaque_ops.build.standalone import build_library
    from tools.valgrind_kernel import valgrind_run

    src = tmp_path / "scale.c"
    src.write_text(LIFECYCLE_KERNEL)
    model = _scale_model()
    for leak in (False, True):
        work = tmp_path / ("leaky" if leak else "clean")
        work.mkdir()
        lib = build_library([src], output=work / "scale.so", debug=True, defines=["LEAK"] if leak else ())
        rc, report, out = valgrind_run(lib, model, ATAN_INPUT, work)
        if leak:
            # The check can fail: the 256-byte table that free() skips is reported.
            assert rc == 99 and "definitely lost: 256 bytes" in report, report[-3000:]
        else:
            assert rc == 0, report[-3000:]
            np.testing.assert_array_equal(out, ATAN_INPUT * np.float32(3.0))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is needed (.ci/run installs it)")
def test_bundled_extract_image_patches_is_valgrind_clean(tmp_path):
    from tools.valgrind_kernel import run

    rc, report = run("extract_image_patches", tmp_path)
    assert rc == 0, report[-3000:]


# ============================================================= concurrency


def test_four_threads_four_interpreters_give_correct_results(atan_model_bytes, guide_atan):
    errors, done = [], []

    def work(k):
        try:
            it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
            it.allocate_tensors()
            rng = np.random.default_rng(k)
            for _ in range(300):
                x = rng.uniform(-50, 50, 5).astype(np.float32)
                it.set_tensor(0, x)
                it.invoke()
                got = it.get_tensor(it.get_output_details()[0]["index"])
                if not np.allclose(got, atan_ref(x), rtol=1e-6, atol=0):
                    errors.append((k, x, got))
            done.append(k)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((k, exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(done) == [0, 1, 2, 3] and errors == []


def test_python_ops_under_threads_do_not_deadlock(atan_model_bytes):
    # Python ops take the GIL inside invoke (which runs without it); several
    # threads doing that at once, on separate and on shared interpreters,
    # must all finish.
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    shared = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[op])
    shared.allocate_tensors()
    errors, done = [], []

    def work(k):
        try:
            own = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[op])
            own.allocate_tensors()
            x = np.full(5, k, np.float32)
            for _ in range(200):
                for it in (own, shared):
                    it.set_tensor(0, x)
                    it.invoke()
                own_out = own.get_tensor(own.get_output_details()[0]["index"])
                if not np.allclose(own_out, np.arctan(x + OFFSET), rtol=1e-6):
                    errors.append(own_out)
            done.append(k)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish in 60 s"
    assert sorted(done) == [0, 1, 2, 3] and errors == []


# ============================================================ cancellation

SLOW_MODEL = """
import numpy as np
from slow_model import slow_model
"""


def test_ctrl_c_cancels_a_long_invoke_and_the_interpreter_stays_usable():
    code = SLOW_MODEL + """
import os, signal, threading, time, json
import opaque_ops as oo
it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
x = np.random.default_rng(1).standard_normal((1, 128, 128, 32)).astype(np.float32)
it.set_tensor(0, x)
t = time.perf_counter(); it.invoke(); full = time.perf_counter() - t
ref = it.get_tensor(it.get_output_details()[0]["index"])
at = 0.3 * full  # a share of the model's own run time: runtimes differ 3x in speed
# A job started in the background by a shell inherits SIGINT ignored; be a foreground program.
signal.signal(signal.SIGINT, signal.default_int_handler)
threading.Timer(at, os.kill, (os.getpid(), signal.SIGINT)).start()
t = time.perf_counter()
try:
    it.invoke()
    took = None
except KeyboardInterrupt:
    took = time.perf_counter() - t
it.set_tensor(0, x)
it.invoke()
same = bool(np.array_equal(ref, it.get_tensor(it.get_output_details()[0]["index"])))
print(json.dumps({"full": full, "at": at, "took": took, "same": same, "wakeup_fd": signal.set_wakeup_fd(-1)}))
"""
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Exception ignored" not in p.stderr, p.stderr
    import json

    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["took"] is not None, r
    # Stopped between nodes, long before the model's end (Ctrl-C at 30% of it).
    assert r["took"] < r["at"] + 0.5 * (r["full"] - r["at"]), r
    assert r["same"] and r["wakeup_fd"] == -1, r


def test_ctrl_c_leaves_an_existing_wakeup_fd_alone():
    # An event loop owns the wakeup fd: invoke must not take it over.
    code = SLOW_MODEL + """
import os, signal, socket, json
import opaque_ops as oo
r, w = socket.socketpair(); w.setblocking(False)
signal.set_wakeup_fd(w.fileno())
it = oo.Interpreter(model_content=slow_model(layers=2, hw=32), use_xnnpack=False)
it.allocate_tensors(); it.invoke(); it.invoke()
print(json.dumps({"kept": signal.set_wakeup_fd(-1) == w.fileno()}))
"""
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"kept": true' in p.stdout


def test_cancel_from_another_thread():
    code = SLOW_MODEL + """
import threading, time, json
import opaque_ops as oo
it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
res = {}
def worker():
    t = time.perf_counter()
    try:
        it.invoke()
        res["outcome"] = "finished"
    except KeyboardInterrupt as e:
        res["outcome"] = "cancelled: " + str(e)
    res["took"] = time.perf_counter() - t
th = threading.Thread(target=worker); th.start()
time.sleep(0.2); it.cancel(); th.join(30)
it.invoke()   # usable afterwards
print(json.dumps(res))
"""
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"outcome": "cancelled: invoke was cancelled"' in p.stdout, p.stdout


# =============================================================== lifetimes


def _atan_interp(atan_model_bytes, lib):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[lib])
    it.allocate_tensors()
    return it


def test_signature_runner_outlives_its_interpreter(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    runner = it.get_signature_runner()
    r_it = weakref.ref(it)
    del it
    gc.collect()
    # The runner keeps the interpreter alive and still works.
    np.testing.assert_allclose(runner(x=ATAN_INPUT)["y"], atan_ref(ATAN_INPUT), rtol=1e-6)
    del runner
    gc.collect()
    assert r_it() is None


def test_signature_runner_after_close_raises(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    runner = it.get_signature_runner()
    it.close()
    with pytest.raises(oo.ClosedError):
        runner(x=ATAN_INPUT)
    with pytest.raises(oo.ClosedError):
        runner.allocate_tensors()
    with pytest.raises(oo.ClosedError):
        it.get_signature_runner()
    del runner
    gc.collect()


def test_tensor_accessor_after_close(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    it.set_tensor(0, ATAN_INPUT)
    it.invoke()
    out = it.tensor(it.get_output_details()[0]["index"])
    it.close()
    # The accessor made before close() still reads valid memory.
    np.testing.assert_allclose(out(), atan_ref(ATAN_INPUT), rtol=1e-6)
    with pytest.raises(oo.ClosedError):
        it.tensor(0)
    with pytest.raises(oo.ClosedError):
        it.set_tensor(0, ATAN_INPUT)
    with pytest.raises(oo.ClosedError):
        it.get_tensor(0)
    with pytest.raises(oo.ClosedError):
        it.allocate_tensors()
    it.cancel()  # a no-op on a closed interpreter
    del it, out
    gc.collect()


def test_op_library_deleted_before_interpreter(atan_model_bytes, atan_source):
    lib = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"})
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[lib])
    r_lib = weakref.ref(lib)
    del lib
    gc.collect()
    it.allocate_tensors()
    it.set_tensor(0, ATAN_INPUT)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), atan_ref(ATAN_INPUT),
                               rtol=1e-6)
    del it
    gc.collect()
    assert r_lib() is None  # the interpreter held the library, and let it go


def test_many_interpreters_collected_in_one_gc_cycle(atan_model_bytes, guide_atan):
    # Interpreters, runners and views in reference cycles, freed together by
    # the cyclic collector in whatever order it picks.
    refs = []
    for _ in range(30):
        it = _atan_interp(atan_model_bytes, guide_atan)
        it.runner = it.get_signature_runner()
        it.runner.back = it
        it.view = it.tensor(0)
        refs.append(weakref.ref(it))
    del it
    gc.collect()
    assert all(r() is None for r in refs)
