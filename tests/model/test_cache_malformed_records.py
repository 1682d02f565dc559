"""A verdict record that does not parse as one is ignored and rewritten, never fails a creation (issue 17, item 12).

Malformed records (deeply nested JSON, huge numbers, wrong types) made
``Interpreter()`` raise ``RecursionError`` or ``OverflowError``.  Each case
here writes a record under the name the cache would give it (its bytes'
SHA-256, so the digest check passes and the contents are what is tested),
then creates, allocates and runs the model as a new process would: the
outputs must be right, and the record on disk a valid one again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import cache, checks
from tests.helpers.reference_models import add_mul_model

DEEP = 100_000


def _nested(n: int) -> str:
    return "[" * n + "]" * n


# name: a function of the valid record's JSON text that returns the malformed text.
MALFORMED = {
    "whole record nested": lambda doc: _nested(DEEP),
    "nested io": lambda doc: _with(doc, "io", _nested(DEEP)),
    "nested allocated key": lambda doc: _with(doc, "allocated", f"[[{_nested(DEEP)}, null]]"),
    "nested custom_ops": lambda doc: _with(doc, "custom_ops", f'[["X", {_nested(DEEP)}]]'),
    "huge io index": lambda doc: _with(doc, "io", f"[[{10**30}], [{10**30}], []]"),
    "negative io index": lambda doc: _with(doc, "io", "[[-5], [4], []]"),
    "io index past the tensors": lambda doc: _with(doc, "io", "[[1000], [4], []]"),
    "io index 1e400": lambda doc: _with(doc, "io", "[[1e400], [4], []]"),
    "io index NaN": lambda doc: _with(doc, "io", "[[NaN], [4], []]"),
    "huge custom op version": lambda doc: _with(doc, "custom_ops", f'[["Atan", {10**30}]]'),
    "4300-digit int": lambda doc: _with(doc, "io", "[[" + "9" * 5000 + "], [4], []]"),
    "io a string": lambda doc: _with(doc, "io", '"abc"'),
    "io of two parts": lambda doc: _with(doc, "io", "[[0], [4]]"),
    "has_identifier a string": lambda doc: _with(doc, "has_identifier", '"no"'),
    "has_identifier a list": lambda doc: _with(doc, "has_identifier", "[]"),
    "model a dict": lambda doc: _with(doc, "model", '{"a": 1}'),
    "model verdict unknown class": lambda doc: _with(doc, "model", '[[[], ["SystemExit", "x"]]]'),
    "model verdict a number": lambda doc: _with(doc, "model", "[[[], 7]]"),
    "model names not strings": lambda doc: _with(doc, "model", "[[[1, 2], null]]"),
    "allocated verdict of three parts": lambda doc: _with(doc, "allocated", '[[[], ["ModelError", "x", 1]]]'),
    "custom_ops entry a string": lambda doc: _with(doc, "custom_ops", '["Atan"]'),
    "format 1 but a list": lambda doc: '[{"format": 1}]',
    "keys missing": lambda doc: '{"format": 1}',
    "feed a string": lambda doc: _with(doc, "feed", '"WHERE"'),
    "feed nested": lambda doc: _with(doc, "feed", _nested(DEEP)),
    "feed of four parts": lambda doc: _with(doc, "feed", '[0, 0, "WHERE", 1]'),
    "feed huge index": lambda doc: _with(doc, "feed", f'[0, {10**30}, "WHERE", 1, "CAST"]'),
    "feed names not strings": lambda doc: _with(doc, "feed", "[0, 0, 1, 1, 2]"),
}

# Well-formed records with values that are merely wrong: used (a record is
# trusted for its origin: owner, mode, digest), and the outcome is still right.
WELL_FORMED = {"io index past the tensors"}


def _with(doc: dict, key: str, raw_value: str) -> str:
    """The record's JSON with ``key``'s value replaced by ``raw_value`` (text, so it may be any JSON)."""
    marker = "@@VALUE@@"
    text = json.dumps(dict(doc, **{key: marker}), sort_keys=True, separators=(",", ":"))
    return text.replace(json.dumps(marker), raw_value)


@pytest.fixture
def verdicts(tmp_path, monkeypatch):
    d = tmp_path / "verdicts"
    monkeypatch.setenv(cache.ENV_VERDICTS, str(d))
    cache.clear()
    yield d
    cache.clear()


def _run(data: bytes) -> np.ndarray:
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.arange(5, dtype=np.float32).reshape(1, 5))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _plant(record: Path, text: str) -> Path:
    """Replace ``record`` by ``text`` under the name the cache gives those bytes."""
    raw = text.encode()
    stem = record.name[: -len(".json")].rsplit("-", 1)[0]
    planted = record.with_name(f"{stem}-{hashlib.blake2b(raw, digest_size=32).hexdigest()}.json")
    record.unlink()
    planted.write_bytes(raw)
    planted.chmod(0o600)
    return planted


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_record_is_ignored_and_rewritten(verdicts, case):
    data, _offset, _scale = add_mul_model()
    want = _run(data)
    [record] = sorted(verdicts.glob("*.json"))
    doc = json.loads(record.read_bytes())
    planted = _plant(record, MALFORMED[case](doc))

    cache.clear()  # a new process: only the record on disk is left
    got = _run(data)
    np.testing.assert_array_equal(got, want)

    if case in WELL_FORMED:
        return
    [again] = sorted(verdicts.glob("*.json"))
    assert again != planted or json.loads(again.read_bytes()) == doc
    rewritten = json.loads(again.read_bytes())
    assert rewritten["model"] == [[[], None]] and rewritten["io"] == doc["io"]
    assert again.name[:-5].rsplit("-", 1)[1] == hashlib.blake2b(again.read_bytes(), digest_size=32).hexdigest()


def test_a_valid_record_is_still_used(verdicts, monkeypatch):
    data, _offset, _scale = add_mul_model()
    want = _run(data)
    cache.clear()

    def boom(*_a, **_k):
        raise AssertionError("the model was checked again")

    monkeypatch.setattr(checks, "check_model", boom)
    np.testing.assert_array_equal(_run(data), want)


def test_a_record_from_before_the_xnnpack_answer_was_kept_gets_it_added(verdicts, monkeypatch):
    """Records written before the value-dependent feed was kept lack the "feed" key: still used (the
    model is not checked again), the answer is worked out once and the record rewritten with it."""
    data, _offset, _scale = add_mul_model()
    want = _run(data)
    [record] = sorted(verdicts.glob("*.json"))
    doc = json.loads(record.read_bytes())
    assert doc["feed"] is None
    old = dict(doc)
    del old["feed"]
    _plant(record, json.dumps(old, sort_keys=True, separators=(",", ":")))

    cache.clear()

    def boom(*_a, **_k):
        raise AssertionError("the model was checked again")

    monkeypatch.setattr(checks, "check_model", boom)
    np.testing.assert_array_equal(_run(data), want)
    [again] = sorted(verdicts.glob("*.json"))
    assert json.loads(again.read_bytes())["feed"] is None
