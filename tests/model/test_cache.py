"""opaque_ops.model.cache: verdicts kept by model digest, in memory and on disk, never trusted blindly.

A new process is simulated by ``cache.clear()`` (the memory goes, the disk
records stay); where it matters, a real child process is used.  Each test
that claims the checks did not run replaces them with a function that fails
the test if called.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import cache, checks, fed_values, fixed_slices, read_model, select_rows, variable_state
from opaque_ops.model.runtime_versions import affected
from tests.helpers.child_process import run_child
from tests.helpers.deep_ops import case as deep_op_case
from tests.helpers.interpreter_models import join_with_signature
from tests.helpers.locations import CORPUS, package_file
from tests.helpers.variable_models import init_signature_model
from tests.interpreter.test_fed_values import reverse_sequence_model
from tests.interpreter.test_slices import fixed_slice_model
from tests.model.test_cache_malformed_records import _plant
from tests.model.test_select_rows import select_model

FACE = package_file("mediapipe", "modules", "face_detection", "face_detection_short_range.tflite")
SELFIE = package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")
MELSPEC = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")


def _records(d: Path) -> list[Path]:
    return sorted(d.glob("*.rec")) if d.is_dir() else []


def _no_checks(monkeypatch):
    """Make reading and checking fail the test if they run (verdicts must come from the record)."""

    def boom(*_a, **_k):
        raise AssertionError("the model was read or checked again")

    monkeypatch.setattr(cache, "read_model", boom)
    monkeypatch.setattr(checks, "check_model", boom)
    monkeypatch.setattr(checks, "check_allocated_shapes", boom)


def _counting(monkeypatch) -> dict:
    calls = {"check_model": 0, "check_allocated": 0}
    real_model, real_alloc = checks.check_model, checks.check_allocated_shapes

    def model(*a, **k):
        calls["check_model"] += 1
        return real_model(*a, **k)

    def alloc(*a, **k):
        calls["check_allocated"] += 1
        return real_alloc(*a, **k)

    monkeypatch.setattr(checks, "check_model", model)
    monkeypatch.setattr(checks, "check_allocated_shapes", alloc)
    return calls


def test_a_model_that_passed_is_not_read_or_checked_again_in_a_new_process(verdicts, monkeypatch):
    kernels = oo.kernels.mediapipe()
    x = np.random.default_rng(0).random((1, 256, 256, 3), np.float32)
    first = oo.Interpreter(model_path=str(SELFIE), custom_ops=[kernels])
    first.allocate_tensors()
    first.set_tensor(first.get_input_details()[0]["index"], x)
    first.invoke()
    want = first.get_tensor(first.get_output_details()[0]["index"])
    [record] = _records(verdicts)
    data = SELFIE.read_bytes()
    model_hex = hashlib.blake2b(data, digest_size=32).hexdigest()
    assert record.name.startswith(model_hex + "-")
    # The name carries the digest of the record's bytes (the compile cache's rule).
    assert (
        record.name[: -len(".rec")].rsplit("-", 1)[1]
        == hashlib.blake2b(record.read_bytes(), digest_size=32).hexdigest()
    )
    assert stat.S_IMODE(record.stat().st_mode) == 0o600

    cache.clear()  # a new process
    _no_checks(monkeypatch)
    it = oo.Interpreter(model_path=str(SELFIE), custom_ops=[kernels])
    it.allocate_tensors()
    # Creating and allocating did not even read the model's tensors.
    assert "_source" in it._info.__dict__ and "subgraphs" not in it._info.__dict__
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)


def test_a_model_known_from_its_record_reads_the_rest_on_demand(verdicts):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    cache.clear()
    info = cache.checked_model(FACE.read_bytes())
    assert "subgraphs" not in info.__dict__
    ref = read_model(FACE)
    assert [t.name for t in info.subgraphs[0].tensors] == [t.name for t in ref.subgraphs[0].tensors]
    assert [op.op_name for op in info.subgraphs[0].operators] == [op.op_name for op in ref.subgraphs[0].operators]
    assert info.custom_ops() == ref.custom_ops() and info.has_identifier == ref.has_identifier
    assert info.signatures == ref.signatures and info.operator_codes == ref.operator_codes
    it = oo.Interpreter(model_path=str(FACE))
    assert [d["name"] for d in it.get_tensor_details()] == [t.name for t in ref.subgraphs[0].tensors]


def test_the_record_is_the_same_in_a_real_new_process(verdicts):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    [record] = _records(verdicts)
    code = f"""
        import sys
        import opaque_ops as oo
        from opaque_ops.model import cache
        def boom(*a, **k):
            raise AssertionError("checked again")
        cache.read_model = boom
        oo.Interpreter(model_path={str(FACE)!r}).allocate_tensors()
        # Not read, and the rules not even imported.
        assert "opaque_ops.model.checks" not in sys.modules, "the rules were imported"
        print("OK")
    """
    p = run_child(code, env={cache.ENV_VERDICTS: str(verdicts)}, timeout=300)
    assert p.returncode == 0 and "OK" in p.stdout, p.stderr[-2000:]
    assert _records(verdicts) == [record]  # nothing new to write


def test_allocation_refusals_come_again_with_their_class_and_message(verdicts, monkeypatch):
    def refused():
        it = oo.Interpreter(model_path=str(MELSPEC), use_xnnpack=True)
        it.resize_tensor_input(0, [1, 400])
        with pytest.raises(oo.ModelError) as e:
            it.allocate_tensors()
        return e.value

    first = refused()
    assert type(first).__name__ == "ShapeError" and "1x512 window" in str(first)
    cache.clear()
    # The shape rules refuse the resized input before the runtime is asked
    # (XNNPACK must not see shapes they refuse; 2.23's refuses them itself,
    # and 2.17's allocated them): no allocation ran, so no verdict was kept,
    # and the rules run again, with the same class and message.
    calls = _counting(monkeypatch)
    again = refused()
    assert calls["check_allocated"] == 0
    assert (type(again), str(again)) == (type(first), str(first))


def test_a_refused_model_gets_no_record(verdicts):
    corpus = CORPUS / "fuzz_conv_stride_65536.tflite"
    for _ in range(2):
        with pytest.raises(oo.ModelError, match="stride_h=65536"):
            oo.Interpreter(model_path=str(corpus))
        cache.clear()
    assert _records(verdicts) == []


def test_allocation_verdicts_are_per_configuration_and_shapes(verdicts, monkeypatch):
    def allocate(xnnpack, samples):
        it = oo.Interpreter(model_path=str(MELSPEC), use_xnnpack=xnnpack)
        it.resize_tensor_input(0, [1, samples])
        it.allocate_tensors()

    allocate(True, 1760)
    cache.clear()
    calls = _counting(monkeypatch)
    allocate(True, 1760)
    assert calls == {"check_model": 0, "check_allocated": 0}
    # Another configuration (XNNPACK off plans other shapes inside partitions)...
    allocate(False, 1760)
    assert calls["check_allocated"] == 1
    # ... and other input shapes are checked.
    allocate(True, 3200)
    assert calls == {"check_model": 0, "check_allocated": 2}


def test_registered_runtime_op_names_change_the_model_verdict(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    cache.clear()
    calls = _counting(monkeypatch)
    assert cache.checked_model(FACE.read_bytes(), registered={"Atan", "Convolution2DTransposeBias"})
    assert calls["check_model"] == 0  # names that are not runtime ops change nothing
    assert cache.checked_model(FACE.read_bytes(), registered={"Mfcc"})
    assert calls["check_model"] == 1


def test_records_of_other_checking_code_are_not_used(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    cache.clear()
    monkeypatch.setattr(cache, "_code_digest", "0" * 16)  # the checks' source changed
    calls = _counting(monkeypatch)
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}
    assert len(_records(verdicts)) == 2  # the other version's record is left alone


def test_the_code_digest_follows_the_checks_source(tmp_path):
    # A file's size and mtime stand for its content, as for CPython's .pyc;
    # the rules live in the checks/ subpackage, which the digest must cover.
    src = Path(cache.__file__).parent
    copy = tmp_path / "model"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))  # copy2: keeps the times
    before = cache._source_digest(copy)
    assert before == cache._source_digest(src)
    rules = copy / "checks" / "graph.py"
    assert rules.is_file()
    st = rules.stat()
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert cache._source_digest(copy) != before
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache._source_digest(copy) == before
    rules.write_text(rules.read_text() + "# one rule more\n")
    assert cache._source_digest(copy) != before
    rules.write_text(rules.read_text()[: -len("# one rule more\n")])
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache._source_digest(copy) == before
    # A new rule module counts as well as an edited one.
    (copy / "checks" / "newrules.py").write_text("# a new group of rules\n")
    assert cache._source_digest(copy) != before


def test_a_corrupted_record_is_deleted_and_the_checks_run(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    [record] = _records(verdicts)
    doc = marshal.loads(record.read_bytes())
    doc["model"] = []  # a record that no longer says the model passed ...
    record.write_bytes(marshal.dumps(doc))  # ... under the old digest
    cache.clear()
    calls = _counting(monkeypatch)
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}
    [again] = _records(verdicts)  # deleted, then written anew
    assert (
        again.name[: -len(".rec")].rsplit("-", 1)[1] == hashlib.blake2b(again.read_bytes(), digest_size=32).hexdigest()
    )
    assert marshal.loads(again.read_bytes())["model"] == [[[], None]]


def test_a_truncated_record_is_not_trusted(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    [record] = _records(verdicts)
    record.write_bytes(record.read_bytes()[:40])
    cache.clear()
    calls = _counting(monkeypatch)
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}


def test_a_record_others_may_write_is_refused_with_a_warning(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    [record] = _records(verdicts)
    record.chmod(0o666)
    cache.clear()
    monkeypatch.setattr(cache, "_warned", set())
    calls = _counting(monkeypatch)
    with pytest.warns(RuntimeWarning, match="writable by other users"):
        oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}


def test_a_directory_others_may_write_is_not_used(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv(cache.ENV_VERDICTS, str(d))
    monkeypatch.setattr(cache, "_warned", set())
    cache.clear()
    try:
        with pytest.warns(RuntimeWarning, match="lets other users write it"):
            oo.Interpreter(model_path=str(FACE)).allocate_tensors()
        assert _records(d) == []
        # Warned once; the interpreter works all the same.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache.clear()
            oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    finally:
        cache.clear()


@pytest.mark.parametrize("by_env", [True, False], ids=["set-by-env", "under-the-compile-cache"])
def test_a_refused_directory_says_how_to_move_the_verdicts(tmp_path, monkeypatch, by_env):
    # The compile cache's cache_dir= and $OPAQUE_OPS_CACHE_DIR do not move
    # a directory named by $OPAQUE_OPS_VERDICT_CACHE: the hint names the
    # verdicts' own variable, and off.
    if by_env:
        blocker = tmp_path / "verdicts-file"
        monkeypatch.setenv(cache.ENV_VERDICTS, str(blocker))
    else:
        monkeypatch.delenv(cache.ENV_VERDICTS, raising=False)
        monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "compile"))
        (tmp_path / "compile").mkdir(mode=0o700)
        blocker = tmp_path / "compile" / "verdicts"
    blocker.write_text("a file where the directory belongs")
    monkeypatch.setattr(cache, "_warned", set())
    cache.clear()
    try:
        with pytest.warns(RuntimeWarning) as caught:
            it = oo.Interpreter(model_path=str(FACE))
            it.allocate_tensors()
        [message] = [str(w.message) for w in caught if "verdict" in str(w.message)]
        assert "it is a file, not a directory" in message, message
        assert f"${cache.ENV_VERDICTS} to one, or to off" in message, message
        assert "OPAQUE_OPS_CACHE_DIR" not in message and "cache_dir=" not in message, message
        assert message.count(cache.ENV_VERDICTS) == 1, message  # (not a second "=off to silence")
        assert blocker.read_text() == "a file where the directory belongs"
    finally:
        cache.clear()


def test_a_record_owned_by_another_user_is_refused(verdicts, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    [record] = _records(verdicts)
    os.chown(record, 4321, 4321)
    cache.clear()
    monkeypatch.setattr(cache, "_warned", set())
    calls = _counting(monkeypatch)
    with pytest.warns(RuntimeWarning, match="owned by"):
        oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}


def test_off_keeps_nothing_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(cache.ENV_VERDICTS, "off")
    cache.clear()
    try:
        oo.Interpreter(model_path=str(FACE)).allocate_tensors()
        assert list(tmp_path.iterdir()) == []
    finally:
        cache.clear()


def test_default_directory_is_inside_the_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(cache.ENV_VERDICTS, raising=False)
    cache.clear()
    try:
        oo.Interpreter(model_path=str(FACE)).allocate_tensors()
        assert len(_records(tmp_path / "verdicts")) == 1
        assert stat.S_IMODE((tmp_path / "verdicts").stat().st_mode) == 0o700
    finally:
        cache.clear()


def test_signature_runner_subgraphs_keep_their_own_verdicts(verdicts):
    # The interpreter checks a runner's subgraph on a copy of the model with
    # that subgraph first, which shares the verdicts dict; the copy's
    # verdicts must not land among the model's own (keyed by subgraph 0).
    it = oo.Interpreter(model_content=_two_signature_model())
    it.allocate_tensors()
    store = it._info.verdicts["store"]
    assert len(store._allocated) == 1
    out = it.get_signature_runner("second")(x=np.ones((1, 6), np.float32))
    np.testing.assert_array_equal(out["y"], np.full((1, 6), 3, np.float32))
    assert len(store._allocated) == 1
    out = it.get_signature_runner("first")(x=np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(out["y"], np.full((1, 4), 2, np.float32))


def _two_signature_model() -> bytes:
    """y = x + 1 on [1, 4] in subgraph 0 ("first"), y = x + 2 on [1, 6] in subgraph 1 ("second")."""
    from opaque_ops.model import ModelBuilder

    def add(k, n):
        b = ModelBuilder()
        x = b.add_tensor("x", [1, n], np.float32)
        c = b.add_constant("c", np.full((1, n), k, np.float32))
        y = b.add_tensor("y", [1, n], np.float32)
        b.add_op("ADD", [x, c], [y])
        b.set_inputs([x])
        b.set_outputs([y])
        b.add_signature("first", {"x": x}, {"y": y})
        return b.build()

    return join_with_signature(add(1, 4), add(2, 6), "second", {"x": 0}, {"y": 2})


def test_clear_disk_forgets_the_records(verdicts, monkeypatch):
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    stale = verdicts / ".tmp-0123456789abcdef.part"  # (a name new_file gives)
    stale.write_bytes(b"{")
    os.utime(stale, (1, 1))  # a write that died long ago
    oo.Interpreter(model_path=str(SELFIE), custom_ops=[oo.kernels.mediapipe()]).allocate_tensors()
    assert len(_records(verdicts)) == 2 and not stale.exists()
    cache.clear(disk=True)
    assert _records(verdicts) == []
    calls = _counting(monkeypatch)
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()
    assert calls == {"check_model": 1, "check_allocated": 1}


def test_records_of_the_earlier_json_format_are_deleted_when_the_directory_is_tidied(verdicts):
    verdicts.mkdir(parents=True, mode=0o700, exist_ok=True)
    old = verdicts / f"{'ab' * 32}-0123456789abcdef-{'cd' * 32}.json"
    old.write_text('{"format": 1}')
    unrelated = verdicts / "notes.txt"
    unrelated.write_text("kept")
    oo.Interpreter(model_path=str(FACE)).allocate_tensors()  # a first start writes a record, then tidies
    assert not old.exists() and unrelated.exists()
    assert len(_records(verdicts)) == 1
    old.write_text('{"format": 1}')
    cache.clear(disk=True)
    assert not old.exists() and _records(verdicts) == [] and unrelated.exists()


# ---------------------------------------------------------------- the kept answers (cache._ANSWERS)
# Per kept answer, a model where it is not empty, and every answer of that
# model as its record holds it (as Verdicts.to_doc has written each since it
# was kept; builtin codes: tensorflow/lite/schema/schema.fbs, BuiltinOperator).
ANSWER_MODELS = {
    "feed": (
        lambda: (CORPUS / "fuzz_where_into_xnnpack_convolution.tflite").read_bytes(),
        {
            "feed": [0, 0, "WHERE", 1, "CAST"],
            "select": [],
            "codes": [0, 3, 18, 39, 41, 43, 53, 55, 57, 70, 73, 82, 109, 126],
            "fed": [],
            "slices": [],
            "vars": [],
            "transposes": [],
        },
    ),
    "select": (
        lambda: select_model(2, 3),
        {
            "feed": None,
            "select": [[0, 0, 1, 2, 3]],
            "codes": [64],
            "fed": [],
            "slices": [],
            "vars": [],
            "transposes": [],
        },
    ),
    "codes": (
        lambda: FACE.read_bytes(),
        {
            "feed": None,
            "select": [],
            "codes": [0, 2, 3, 4, 6, 17, 19, 22, 34],
            "fed": [],
            "slices": [],
            "vars": [],
            "transposes": [],
        },
    ),
    "fed": (
        reverse_sequence_model,
        {
            "feed": None,
            "select": [],
            "codes": [112],
            "fed": [[0, "REVERSE_SEQUENCE", 1, 0, 1, 0]],
            "slices": [],
            "vars": [],
            "transposes": [],
        },
    ),
    # (operator, input, output, input shape, begin, size): h [1, 6, 4] sliced [0:1, -3:6, 1:4]
    "slices": (
        fixed_slice_model,
        {
            "feed": None,
            "select": [],
            "codes": [22, 45],
            "fed": [],
            "slices": [[1, 1, 3, [1, 6, 4], [0, 3, 1], [1, 3, 3]]],
            "vars": [],
            "transposes": [],
        },
    ),
    # (subgraph, reads that come first, names its invoke may assign, whether any other variable too,
    # decided IFs, reads that wait on them)
    "vars": (
        init_signature_model,
        {
            "feed": None,
            "select": [],
            "codes": [0, 142, 143, 144],
            "fed": [],
            "slices": [],
            "vars": [[0, [["", "state", 1]], [], False, [], []], [1, [], [["", "state"]], False, [], []]],
            "transposes": [],
        },
    ),
    # (subgraph, operator, permutation entries)
    "transposes": (
        lambda: deep_op_case("TRANSPOSE rank 8")[0],
        {"feed": None, "select": [], "codes": [39], "fed": [], "slices": [], "vars": [], "transposes": [[0, 0, 8]]},
    ),
}

# Per kept answer, values a record may not hold for it (none a shape to_doc writes).
DAMAGED = {
    "feed": [
        "WHERE",
        [0, 0, "WHERE", 1],
        (0, 0, "WHERE", 1, "CAST"),
        [0, 0, 1, 1, 2],
        [0, 1 << 31, "WHERE", 1, "CAST"],
        [-1, 0, "WHERE", 1, "CAST"],
        [0, 0.0, "WHERE", 1, "CAST"],
    ],
    "select": [
        None,
        "SELECT",
        [[0, 0, 1]],
        ((0, 0, 1, 2, 3),),
        [(0, 0, 1, 2, 3)],
        [[0, 1 << 31, 1, 2, 3]],
        [[0, 0, 1, 2, "3"]],
        [[0, 0, 1, 2]],  # (a SELECT's node before its output was kept: such a record is not read)
        [[0, 0, 1, 2, -1]],
        [[0, 0, 1, 2, 3, 2]],  # (a SELECT_V2's last value says whether its output has one value: 0 or 1)
        [[0, 0, 1, 2, 3, True]],
    ],
    "codes": [None, "BATCH_MATMUL", frozenset([0, 18]), (0, 18), [0, 1 << 31], [-1], [True], [0, 18.0]],
    "fed": [
        None,
        "REVERSE_SEQUENCE",
        [[0, "REVERSE_SEQUENCE", 1, 0, 1]],
        [(0, "REVERSE_SEQUENCE", 1, 0, 1, 0)],
        [[0, 7, 1, 0, 1, 0]],
        [[0, "TOPK_V2", 1 << 31, 0, 0, 0]],
        [[0, "REVERSE_SEQUENCE", 1, 0, 1 << 31, 0]],
        [[0, "REVERSE_SEQUENCE", 1, 0, "1", 0]],
    ],
    "slices": [
        None,
        "STRIDED_SLICE",
        [(1, 1, 3, [1, 6, 4], [0, 3, 1], [1, 3, 3])],
        [[1, 1, 3, [1, 6, 4], [0, 3, 1]]],
        [[1, 1, 3, [1, 6, 4], [0, 3], [1, 3, 3]]],
        [[1, 1, 3, [1, 6, 4], [0, -3, 1], [1, 3, 3]]],
        [[1, 1, 3, [], [], []]],
        [[1, 1, 3, [1] * 6, [0] * 6, [1] * 6]],
        [[1, 1, "3", [1, 6, 4], [0, 3, 1], [1, 3, 3]]],
        [[1, 1, 3, (1, 6, 4), [0, 3, 1], [1, 3, 3]]],
    ],
    "vars": [
        None,
        "READ_VARIABLE",
        [[0, [["", "state", 1]], []]],
        [[0, [["", "state", 1]], [], False]],
        [(0, [["", "state", 1]], [], False, [], [])],
        [[0, [["", "state"]], [], False, [], []]],
        [[0, [["", "state", -1]], [], False, [], []]],
        [[0, [[None, "state", 1]], [], False, [], []]],
        [[0, [], [["", 7]], False, [], []]],
        [[0, [], [], 0, [], []]],
        [[0, [], [], False, [[1, [["", "state"]]]], []]],
        [[0, [], [], False, [[-1, [["", "state"]], []]], []]],
        [[0, [], [], False, [[1, [["", "state"]], []]], [["", "state", 2, [1]]]]],
        [[0, [], [], False, [[1, [["", "state"]], []]], [["", "state", 2]]]],
    ],
    "transposes": [None, "TRANSPOSE", [(0, 0, 8)], [[0, 0]], [[0, 0, "8"]], [[0, -1, 8]], [[0, 0, 8.0]]],
}

ANSWER_BOOMS = (
    (select_rows, "nodes_of"),
    (fed_values, "nodes_of"),
    (checks.type_rules, "value_dependent_feed"),
    (fixed_slices, "plan_of"),
    (variable_state, "reads_before_assignment"),
    (checks.limits, "deep_transposes"),
)


def _start(name: str, data: bytes) -> None:
    """Start an interpreter on ``data`` and allocate it: its record is written.

    (TFLite 2.17.1 refuses the TRANSPOSE of ANSWER_MODELS["transposes"] before its interpreter is
    created, once the model's checks have passed: that record is written as the Interpreter
    would have written it, without the allocation's verdict.)
    """
    if name == "transposes" and affected(oo.runtime_info().version):
        cache.write_pending(cache.checked_model(data, defer_write=True))
    else:
        oo.Interpreter(model_content=data).allocate_tensors()


def test_every_kept_answer_has_a_model_and_damaged_values_here():
    # A new answer in the table must come with its cases (the tests below are driven by it).
    assert list(ANSWER_MODELS) == list(DAMAGED) == list(cache._ANSWERS)


@pytest.mark.parametrize("name", list(cache._ANSWERS))
def test_each_kept_answer_is_written_as_before_and_read_back_without_the_model(verdicts, monkeypatch, name):
    make, want = ANSWER_MODELS[name]
    data = make()
    _start(name, data)
    [record] = _records(verdicts)
    raw = record.read_bytes()
    doc = marshal.loads(raw)
    # The record's form: the answers after the verdicts, in this order (the table's).
    keys = [
        "format",
        "has_identifier",
        "custom_ops",
        "io",
        "model",
        "allocated",
        "feed",
        "select",
        "codes",
        "fed",
        "slices",
        "vars",
        "transposes",
    ]
    assert list(doc) == keys
    assert {k: doc[k] for k in cache._ANSWERS} == want
    # Byte for byte the record the code before the table wrote: its to_doc's
    # four clauses, verbatim, on the answers worked out from a full read.
    # (Bytes compare: marshal flags an object referenced more than once, and
    # _save dumps _as_lists' fresh lists, whose scalars are shared with the
    # document's here as they are with the model's objects there.)
    ref = read_model(data)
    feed, select, codes, fed, slices, variables, transposes = (
        cache.xnnpack_hazard(ref),
        cache.select_nodes(ref),
        cache.builtin_codes(ref),
        cache.fed_value_nodes(ref),
        cache.fixed_slices(ref),
        cache.variable_reads(ref),
        cache.deep_transposes(ref),
    )
    before = {k: v for k, v in doc.items() if k not in cache._ANSWERS}
    before["feed"] = feed
    before["select"] = [list(n) for n in select]
    before["codes"] = sorted(codes)
    before["fed"] = [list(n) for n in fed]
    before["slices"] = [[*n[:3], *map(list, n[3:])] for n in slices]
    before["vars"] = [
        [
            k,
            [list(r) for r in reads],
            [list(a) for a in assigns],
            other,
            [[cond, [list(a) for a in then], [list(a) for a in orelse]] for cond, then, orelse in ifs],
            [[*r[:3], list(r[3])] for r in waiting],
        ]
        for k, reads, assigns, other, ifs, waiting in variables
    ]
    before["transposes"] = [list(n) for n in transposes]
    as_before = marshal.dumps(cache._as_lists(before), cache._MARSHAL_VERSION)
    assert as_before == raw

    cache.clear()  # a new process: the answers come from the record, nothing of the model is read for them
    _no_checks(monkeypatch)
    for module, fn in ANSWER_BOOMS:
        monkeypatch.setattr(module, fn, lambda *_a, **_k: pytest.fail("an answer was worked out again"))
    info = cache.checked_model(data)
    got = (
        cache.xnnpack_hazard(info),
        cache.select_nodes(info),
        cache.builtin_codes(info),
        cache.fed_value_nodes(info),
        cache.fixed_slices(info),
        cache.variable_reads(info),
        cache.deep_transposes(info),
    )
    assert got == (feed, select, codes, fed, slices, variables, transposes)
    assert [type(v) for v in got] == [type(feed), tuple, frozenset, tuple, tuple, tuple, tuple]
    assert "_source" in info.__dict__
    # Written again from what was read back: the same bytes.
    again = marshal.dumps(cache._as_lists(info.verdicts["store"].to_doc()), cache._MARSHAL_VERSION)
    assert again == raw


@pytest.mark.parametrize("name", list(cache._ANSWERS))
def test_a_damaged_answer_makes_the_record_invalid_and_it_is_rewritten(verdicts, monkeypatch, name):
    make, want = ANSWER_MODELS[name]
    data = make()
    _start(name, data)
    [record] = _records(verdicts)
    doc = marshal.loads(record.read_bytes())
    assert cache._valid_record(doc)
    older = {k: v for k, v in doc.items() if k != name}
    assert cache._valid_record(older)  # (a record from before that answer was kept)
    for bad in DAMAGED[name]:
        assert not cache._valid_record(dict(doc, **{name: bad})), bad
    # On disk: the damaged record is not used; the checks run and the record is written anew, right.
    _plant(record, marshal.dumps(dict(doc, **{name: DAMAGED[name][0]})))
    cache.clear()
    calls = _counting(monkeypatch)
    _start(name, data)
    assert calls["check_model"] == 1
    [again] = _records(verdicts)
    assert {k: v for k, v in marshal.loads(again.read_bytes()).items() if k in cache._ANSWERS} == want
