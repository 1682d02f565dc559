"""A process's first interpreters, created on several threads at once, all work and give the same results.

Much of opaque_ops is imported on first use (the lazy ``__getattr__`` of the
package and of the interpreter package, the rules at the first check, the
arena guard, the string, SELECT and fed-value modules, the fast calls
module's lookup, the compiled reader's spec) and memoized in module globals.
Python's import lock makes each import safe, but not those globals.  Each
run here is a new child process with an empty verdict directory of its own
(tests.helpers.concurrent_start): nothing imported, nothing checked yet.
Its threads wait at a barrier, then each imports opaque_ops, creates an
interpreter for its model, allocates, sets inputs, invokes twice and reads
the outputs.  Every thread's outputs must be bit for bit those of a
single-threaded run of the same models (itself checked against numpy and
ai-edge-litert), a refusal must be the same exception with the same
message, and the verdict records the racing threads wrote must serve the
next process, which then reads and checks nothing.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.helpers import concurrent_start as cs
from tests.helpers.atan import OFFSET
from tests.helpers.atan import reference as atan_reference
from tests.helpers.child_process import crashed, run_child
from tests.helpers.locations import CORPUS
from tests.helpers.reference_models import add_mul_model
from tests.helpers.reference_models import run as litert_run
from tests.helpers.string_models import GATHER_INDICES, gather_model
from tests.interpreter.test_fed_values import reverse_sequence_model
from tests.interpreter.test_matmul import OFFSET as MATMUL_OFFSET
from tests.interpreter.test_matmul import WEIGHTS, K
from tests.interpreter.test_matmul import _assert_product_close as assert_product_close
from tests.interpreter.test_matmul import _model as matmul_model
from tests.model.test_select_rows import select_model

CHILD = "from tests.helpers.concurrent_start import main; main()"
ACCEPTED = ("builtin", "select", "reverse_sequence", "strings", "atan", "python_op", "matmul")
# Refused at creation (SOFTMAX writing a string) and at the first allocation
# (REVERSE_V2's empty axis; the Atan model without its op): kind -> (corpus
# file, or None for the Atan model, exception, start of its message).
REFUSED_AT = {
    "refused_model": (
        "fuzz_softmax_writes_string.tflite",
        "ModelError",
        "{path} is not a usable TFLite model: subgraph 0 operator 1 (SOFTMAX) writes tensor 3 of type STRING",
    ),
    "refused_allocation": (
        "fuzz_reverse_v2_empty_after_axis.tflite",
        "ShapeError",
        "operator 0 (REVERSE_V2): its input 0 of shape [2, 0] is empty after the reversed axis 0",
    ),
    "unresolved": (
        None,
        "UnresolvedOpsError",
        "the model needs custom ops that no library provides: Atan v1. Registered: none.",
    ),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory, atan_model_bytes) -> dict:
    d = tmp_path_factory.mktemp("concurrent_models")
    built = {
        "builtin": add_mul_model()[0],
        "select": select_model(2, 3),
        "reverse_sequence": reverse_sequence_model(),
        "strings": gather_model(),
        "atan": atan_model_bytes,
        "python_op": atan_model_bytes,  # its Atan a python_op
        "matmul": matmul_model([2, 3, K]),  # BATCH_MATMUL by a constant: the rewrite's module
        "unresolved": atan_model_bytes,  # without its op
    }
    paths = {}
    for kind, data in built.items():
        paths[kind] = d / f"{kind}.tflite"
        paths[kind].write_bytes(data)
    for kind, (name, _cls, _message) in REFUSED_AT.items():
        if name is not None:
            paths[kind] = d / name
            shutil.copyfile(CORPUS / name, paths[kind])
    return {kind: str(p) for kind, p in paths.items()}


def _child(models, kinds, verdicts, **flags) -> dict:
    spec = json.dumps({"models": models, "threads": list(kinds), **flags})
    p = run_child(CHILD, spec, env={"OPAQUE_OPS_VERDICT_CACHE": str(verdicts)}, timeout=180)
    assert p.returncode == 0, crashed(p)
    doc = json.loads(p.stdout.splitlines()[-1])
    assert doc["gc_enabled"], "a first creation left the garbage collector off"
    return doc


def _numpy_reference(kind: str, k: int) -> list[np.ndarray]:
    """What the ops' definitions give for run ``k`` of ``kind``."""
    ins = cs.inputs(kind, k)
    if kind == "builtin":
        _data, offset, scale = add_mul_model()
        return [(ins[0] + offset) * scale]
    if kind == "select":
        return [np.where(*ins)]
    if kind == "reverse_sequence":
        x, n = ins
        return [np.stack([np.concatenate([row[:m][::-1], row[m:]]) for row, m in zip(x, n)])]
    if kind == "strings":
        words = [v.encode() if isinstance(v, str) else v for v in ins[0]]
        return [np.array([words[i] for i in GATHER_INDICES], dtype=object)]
    if kind == "python_op":  # float32 ADD, then numpy's float32 arctan
        return [np.arctan(ins[0] + OFFSET)]
    if kind == "matmul":  # (x + offset) @ weights
        return [(ins[0] + MATMUL_OFFSET) @ WEIGHTS]
    return [atan_reference(ins[0])]


@pytest.fixture(scope="module")
def reference(models, tmp_path_factory) -> dict:
    """The single-threaded run of every kind in a new process, checked against numpy and ai-edge-litert."""
    kinds = [*ACCEPTED, *REFUSED_AT]
    doc = _child(models, kinds, tmp_path_factory.mktemp("reference_verdicts"), serial=True)
    ref = dict(zip(kinds, doc["results"]))
    for kind in ACCEPTED:
        assert "out" in ref[kind], ref[kind]
        for k, outs in enumerate(ref[kind]["out"]):
            got = [cs.decoded(o) for o in outs]
            want = _numpy_reference(kind, k)
            assert [g.shape for g in got] == [w.shape for w in want], kind
            if kind == "atan":  # atan in float64 rounded once in C; numpy's may differ in the last bit
                np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)
            elif kind == "matmul":  # the products summed in another order: test_matmul.py's bound
                assert_product_close(got[0], cs.inputs(kind, k)[0] + MATMUL_OFFSET, WEIGHTS)
            elif kind == "strings":
                assert got[0].tolist() == want[0].tolist()
            else:
                np.testing.assert_array_equal(got[0], want[0])
            if kind not in ("atan", "python_op", "matmul"):  # builtin ops only: ai-edge-litert, bit for bit
                with open(models[kind], "rb") as f:
                    peer = litert_run(f.read(), *cs.inputs(kind, k))
                if kind == "strings":
                    assert [bytes(v) for v in peer[0]] == got[0].tolist()
                else:
                    np.testing.assert_array_equal(got[0], peer[0])
    for kind, (_name, cls, message) in REFUSED_AT.items():
        assert ref[kind]["error"] == cls, ref[kind]
        assert ref[kind]["message"].startswith(message.format(path=models[kind])), ref[kind]
    return ref


def _same_as_reference(kinds, results, reference) -> None:
    for k, (kind, got) in enumerate(zip(kinds, results)):
        assert got == reference[kind], f"thread {k} ({kind}): {got}\nsingle-threaded: {reference[kind]}"


# Each run puts the kinds on the threads in another order, so other pairs
# start side by side.  In one run of three opaque_ops' names are imported
# before the threads start (they then meet at the memos set on first use,
# not at the imports), and in another each thread starts a millisecond after
# the last instead of all at once.
ROTATIONS = 9


@pytest.mark.parametrize("run", range(ROTATIONS))
def test_first_creations_on_a_thread_per_model_at_once_give_the_single_threaded_results(
    run, models, reference, tmp_path
):
    # (atan twice, and as a python_op: three threads race for one model's record)
    order = [*ACCEPTED, *REFUSED_AT, "atan"]
    kinds = order[run % len(order) :] + order[: run % len(order)]
    doc = _child(models, kinds, tmp_path / "verdicts", preimport=run % 3 == 1, stagger=0.001 if run % 3 == 2 else 0)
    _same_as_reference(kinds, doc["results"], reference)
    if run % 3 == 0:
        # The records the racing threads wrote serve the next process: no
        # model read or checked again, the rules not even imported.
        later = _child(models, ACCEPTED, tmp_path / "verdicts", later=True)
        _same_as_reference(ACCEPTED, later["results"], reference)
        assert not later["rules_imported"], "a later start imported the rules: it checked a model again"


@pytest.mark.parametrize("refused", list(REFUSED_AT))
@pytest.mark.parametrize("run", range(3))
def test_a_refusal_racing_a_first_creation_is_the_same_and_leaves_the_other_model_working(
    run, refused, models, reference, tmp_path
):
    other = ACCEPTED[(run + 3 * list(REFUSED_AT).index(refused)) % len(ACCEPTED)]
    kinds = [refused, other] if run % 2 == 0 else [other, refused]
    doc = _child(models, kinds, tmp_path / "verdicts")
    _same_as_reference(kinds, doc["results"], reference)
    later = _child(models, [other], tmp_path / "verdicts", later=True)
    _same_as_reference([other], later["results"], reference)
    assert not later["rules_imported"], "a later start imported the rules: it checked a model again"
