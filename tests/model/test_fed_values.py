"""opaque_ops.model.fed_values: which operators read a crashing value fed as an input, kept in the model's record.

The check itself (what invoke() refuses, in child processes on the loaded
runtime) is tests/interpreter/test_fed_values.py's.
"""

from __future__ import annotations

import marshal

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import cache, fed_values, read_model
from tests.helpers.single_op import single_op_model
from tests.interpreter.test_fed_values import broadcast_to_model, reverse_sequence_model, reverse_v2_model, top_k_model

f32, i32 = np.float32, np.int32


@pytest.mark.parametrize(
    "data, want",
    [
        (reverse_sequence_model(), ((0, "REVERSE_SEQUENCE", 1, 0, 1, 0),)),
        (top_k_model(), ((0, "TOPK_V2", 1, 0, 0, 0),)),
        (reverse_v2_model(), ((0, "REVERSE_V2", 1, 0, 0, 0),)),
        (broadcast_to_model(), ((0, "BROADCAST_TO", 1, 0, 0, 0),)),
        # A constant value is the shape rules' (checked once, at allocation): not here.
        (
            single_op_model(
                "REVERSE_SEQUENCE", {"x": ([2, 3], f32)}, {"n": np.array([1, 4], i32)}, [([2, 3], f32)], {"seq_dim": 1}
            ),
            (),
        ),
        (single_op_model("TOPK_V2", {"x": ([2, 6], f32)}, {"k": np.array(0, i32)}, [([2, 0], f32), ([2, 0], i32)]), ()),
    ],
    ids=["fed lengths", "fed k", "fed axis", "fed shape", "constant lengths", "constant k"],
)
def test_nodes_of(data, want):
    assert fed_values.nodes_of(read_model(data).subgraphs[0]) == want


def test_top_k_and_broadcast_to_are_checked_only_where_the_version_rule_says_they_crash():
    every = ((2, "REVERSE_SEQUENCE", 3, 2, 1, 0), (3, "REVERSE_V2", 5, 4, 0, 0))
    nodes = ((0, "TOPK_V2", 1, 0, 0, 0), *every, (1, "BROADCAST_TO", 7, 6, 0, 0))
    assert fed_values.for_runtime(nodes, "2.17.1") == nodes
    assert fed_values.for_runtime(nodes, "2.23.0") == every


def test_a_later_start_takes_the_nodes_from_the_record(verdicts, monkeypatch):
    data = reverse_sequence_model()
    first = oo.Interpreter(model_content=data)
    first.allocate_tensors()
    [record] = verdicts.glob("*.rec")
    assert marshal.loads(record.read_bytes())["fed"] == [[0, "REVERSE_SEQUENCE", 1, 0, 1, 0]]
    cache.clear()  # a new process: only the record on disk is left

    def boom(*_a, **_k):
        raise AssertionError("the operators were read again")

    monkeypatch.setattr(fed_values, "nodes_of", boom)
    second = oo.Interpreter(model_content=data)
    assert "_source" in second._info.__dict__  # (read from the record, not parsed)
    assert second._fed_values == first._fed_values == ((0, "REVERSE_SEQUENCE", 1, 0, 1, 0),)
