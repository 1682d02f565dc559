"""The compiled model reader (c/src/modelreader.c) against the Python reader, its reference.

The compiled reader may leave any model to the Python reader (None); every
model it reads must be the Python reader's model, value for value
(tests/helpers/model_compare.py), and it must never read a model that the
Python reader rejects.
"""

from __future__ import annotations

import os

import pytest

from opaque_ops.errors import ModelError
from opaque_ops.interpreter import fast_calls
from opaque_ops.model import read_model, reader
from tests.conftest import IN_CI
from tests.helpers.child_process import crashed, run_child
from tests.helpers.corpus import ENTRIES, corpus_bytes
from tests.helpers.model_compare import differences
from tools import fuzz_reader, fuzz_structured

# Real models it must read itself (not leave to Python): what an Interpreter's first creation reads.
MUST_READ = {
    "melspectrogram.tflite",
    "embedding_model.tflite",
    "okay_nabu.tflite",
    "hey_jarvis.tflite",
    "selfie_segmentation.tflite",
    "face_detection_short_range.tflite",
    "face_landmark_with_attention.tflite",
}


@pytest.fixture(scope="module", autouse=True)
def compiled():
    used, where = fast_calls.status()
    if not used or reader._compiled is None:
        if IN_CI:
            pytest.fail(f"the fast calls (and the compiled reader) must be in use under CI: {where}")
        pytest.skip(f"the fast calls are not in use here: {where}")


def _python_read(data: bytes):
    saved, reader._compiled = reader._compiled, None
    try:
        return reader._read(data)
    except ModelError as exc:
        return exc
    finally:
        reader._compiled = saved


def test_every_seed_and_corpus_model_reads_the_same_both_ways():
    models = [(name, data) for name, data, _w in fuzz_structured.seed_models()]
    models += [(name, corpus_bytes(name)) for name in ENTRIES]
    read_by_c = set()
    for name, data in models:
        c = reader._read_compiled(data) if len(data) >= 8 else None
        py = _python_read(data)
        if c is None:
            continue
        assert not isinstance(py, ModelError), f"{name}: the compiled reader accepted what Python rejects: {py}"
        c.has_identifier = py.has_identifier
        assert differences(c, py) == [], name
        read_by_c.add(name)
    present = {name for name, _ in models} & MUST_READ
    assert present and present <= read_by_c, present - read_by_c


def test_read_model_gives_the_python_readers_model_and_errors():
    for name, data, _w in fuzz_structured.seed_models():
        assert differences(read_model(data), _python_read(data)) == [], name
    data = next(d for n, d, _ in fuzz_structured.seed_models() if n == "atan")
    with pytest.raises(ModelError) as c_err:
        read_model(data[:200])
    assert str(c_err.value) == str(_python_read(data[:200]))


def test_sparse_models_are_left_to_the_python_reader():
    sparse = [d for n, d, _ in fuzz_structured.seed_models() if "sparse" in n]
    if not sparse:
        pytest.skip("face_detection_full_range_sparse.tflite (mediapipe) is not installed")
    assert reader._read_compiled(sparse[0]) is None
    assert read_model(sparse[0]).subgraphs[0].tensors is not None


def test_mutated_models_are_read_the_same_or_left_to_python():
    result = fuzz_reader.run(3000, seed=1)
    counts = result["counts"]
    assert counts["findings"] == 0, result["findings"][:5]
    # The run exercises both sides: models read in C, and models refused.
    assert counts["compiled"] > 300 and counts["refused_rejected"] > 1000, counts


def test_reading_again_and_again_keeps_memory_flat():
    # Every read copies the buffers (face: 230 kB), and refused inputs leave
    # through the error paths: a leaked reference on either shows in the RSS.
    seeds = {n: d for n, d, _w in fuzz_structured.seed_models()}
    data = seeds.get("face_detection_short_range.tflite", seeds["atan"])
    refused = [fuzz_reader.input_for(5, i)[1] for i in range(300)]

    def rss_kb() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    def loop():
        for _ in range(400):
            reader._read_compiled(data)
        for d in refused:
            if len(d) >= 8:
                reader._read_compiled(d)

    loop()
    before = rss_kb()
    for _ in range(5):
        loop()
    grown = rss_kb() - before
    assert grown < 4096, f"RSS grew by {grown} kB over 2000 reads of the model and 1500 refused inputs"


def test_without_the_fast_calls_the_python_reader_reads_alone():
    p = run_child(
        """
        import opaque_ops as oo
        from opaque_ops.model import reader
        from tests.helpers.interpreter_models import add_model
        oo.Interpreter(model_content=add_model()).allocate_tensors()
        print(reader._compiled is None)
        """,
        env={"OPAQUE_OPS_FASTCALLS": "0"},
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.strip() == "True"


def test_an_interpreter_reads_its_model_with_the_compiled_reader_in_a_new_process():
    # The module is found before the model is read (Interpreter.__init__),
    # so even a process's first model goes through C.
    p = run_child(
        """
        import opaque_ops as oo
        from opaque_ops.model import reader
        from tests.helpers.interpreter_models import add_model
        calls = []
        real = reader._read_compiled
        reader._read_compiled = lambda buf: calls.append(len(buf)) or real(buf)
        oo.Interpreter(model_content=add_model()).allocate_tensors()
        print(len(calls), reader._compiled is not None)
        """,
        env={"OPAQUE_OPS_VERDICT_CACHE": "0"},  # no verdict on disk: the model is read, not taken from a record
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.strip() == "1 True"


def _boundary_variants(data: bytes):
    """``(what, model bytes)``: every index field of ``data`` set to each value at and around its bounds.

    The values a bounds check decides on (one below the first, the last,
    one past it, the int32 extremes): a check off by one reads a model the
    Python reader rejects, on every run, where random mutation finds it by
    luck (one case in thousands).
    """
    model = fuzz_structured.unpack(data)
    sg = model.subgraphs[0]
    n, nb, nc = len(sg.tensors), len(model.buffers or []), len(model.operatorCodes)
    index_values = sorted({-(2**31), -2, -1, 0, n - 1, n, n + 1, 2**31 - 1})

    def variant(what, obj, attr, k, value):
        seq = getattr(obj, attr)
        saved = seq[k] if k is not None else seq
        if k is None:
            setattr(obj, attr, value)
        else:
            seq[k] = value
        try:
            return what, fuzz_structured.pack(model)
        finally:
            if k is None:
                setattr(obj, attr, saved)
            else:
                seq[k] = saved

    for v in index_values:
        for o, op in enumerate(sg.operators[:2]):
            yield variant(f"operator {o} input 0 = {v}", op, "inputs", 0, v)
            yield variant(f"operator {o} output 0 = {v}", op, "outputs", 0, v)
        yield variant(f"subgraph input 0 = {v}", sg, "inputs", 0, v)
        yield variant(f"subgraph output 0 = {v}", sg, "outputs", 0, v)
    for v in sorted({0, nb - 1, nb, nb + 1, 2**32 - 1}):
        yield variant(f"tensor 0 buffer = {v}", sg.tensors[0], "buffer", None, v)
    for v in sorted({0, nc - 1, nc, nc + 1, 2**32 - 1}):
        yield variant(f"operator 0 opcode = {v}", sg.operators[0], "opcodeIndex", None, v)


def test_index_fields_at_their_bounds_are_read_the_same_or_left_to_python():
    seeds = {n: d for n, d, _w in fuzz_structured.seed_models()}
    read_by_c = refused = 0
    for name in ("fc_softmax_reshape", "conv_pool", "atan"):
        for what, data in _boundary_variants(seeds[name]):
            c = reader._read_compiled(data)
            py = _python_read(data)
            if c is None:
                refused += 1
                continue
            read_by_c += 1
            assert not isinstance(py, ModelError), f"{name}, {what}: the compiled reader read what Python rejects: {py}"
            c.has_identifier = py.has_identifier
            assert differences(c, py) == [], f"{name}, {what}"
    # Both sides of every bound were reached.
    assert read_by_c > 20 and refused > 20, (read_by_c, refused)


@pytest.mark.parametrize(
    "op, opts, want",
    [
        ("ARG_MAX", {"output_type": "INT32"}, {"output_type": "INT32"}),
        ("ARG_MIN", {"output_type": "INT64"}, {"output_type": "INT64"}),
        ("ONE_HOT", {"axis": -1}, {"axis": -1}),
        ("REVERSE_SEQUENCE", {"seq_dim": 1}, {"seq_dim": 1, "batch_dim": 0}),
        # Byte enums are signed, as TFLite reads them (a byte 0xFF is -1, not 255).
        ("MIRROR_PAD", {"mode": -1}, {"mode": -1}),
        ("FULLY_CONNECTED", {"weights_format": -56}, None),
    ],
)
def test_option_tables_read_the_same_both_ways_and_as_tflites_schema(op, opts, want):
    import numpy as np

    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    y = b.add_tensor("y", [2, 3], np.float32)
    b.add_op(op, [x], [y], opts)
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    c, py = reader._read_compiled(data), _python_read(data)
    assert c is not None and differences(c, py) == []
    got = py.subgraphs[0].operators[0].builtin_options
    if want is not None:
        assert got == want
    # The same bytes through TFLite's own generated schema.
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    raw = schema.Model.GetRootAsModel(data, 0).Subgraphs(0).Operators(0)
    table = getattr(
        schema,
        {
            "ARG_MAX": "ArgMaxOptions",
            "ARG_MIN": "ArgMinOptions",
            "ONE_HOT": "OneHotOptions",
            "REVERSE_SEQUENCE": "ReverseSequenceOptions",
            "MIRROR_PAD": "MirrorPadOptions",
            "FULLY_CONNECTED": "FullyConnectedOptions",
        }[op],
    )()
    table.Init(raw.BuiltinOptions().Bytes, raw.BuiltinOptions().Pos)
    if op == "MIRROR_PAD":
        assert table.Mode() == got["mode"] == -1
    elif op == "FULLY_CONNECTED":
        assert table.WeightsFormat() == got["weights_format"] == -56
    elif op == "ONE_HOT":
        assert table.Axis() == got["axis"]
    elif op == "REVERSE_SEQUENCE":
        assert (table.SeqDim(), table.BatchDim()) == (got["seq_dim"], got["batch_dim"])
    else:
        assert table.OutputType() == {"INT32": 2, "INT64": 4}[got["output_type"]]


def test_var_handle_names_read_the_same_both_ways_and_as_tflites_schema():
    """VarHandleOptions' container and shared_name, the strings a variable is known by (checks.graph.variable_names):
    the empty name when absent, and bytes that are not UTF-8 kept (as surrogate escapes), since TFLite takes any
    bytes there and two such names must stay two."""
    from tests.helpers.variable_models import named_variables_model

    names = [b"state", (b"box", b"state"), (None, b"\xff\xfe"), (None, b"\xff\xfd"), None]
    data = named_variables_model([("read", n, [2, 6]) for n in names])
    c, py = reader._read_compiled(data), _python_read(data)
    assert c is not None and differences(c, py) == []
    got = [op.builtin_options for op in py.subgraphs[0].operators if op.op_name == "VAR_HANDLE"]
    assert got == [
        {"container": "", "shared_name": "state"},
        {"container": "box", "shared_name": "state"},
        {"container": "", "shared_name": "\udcff\udcfe"},
        {"container": "", "shared_name": "\udcff\udcfd"},
        None,  # no table: the runtime's empty names (checks.options.effective_options)
    ]
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    ref = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    stored = [op.builtinOptions for op in ref.subgraphs[0].operators if op.opcodeIndex == 0]
    for opts, table in zip(got[:4], stored):
        assert (opts["container"], opts["shared_name"]) == tuple(
            (v or b"").decode("utf-8", "surrogateescape") for v in (table.container, table.sharedName)
        )
    assert stored[4] is None
