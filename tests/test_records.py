"""The lazy dataclasses (opaque_ops._records) behave as the ones the decorator would generate.

The model reader's classes, the compiler's ``BuildSpec``, the ELF reader's
``ElfInfo`` and the dtype rules' ``TypeRule`` write their own
__init__ and take __repr__ and __eq__ from one base; ``@dataclass`` runs on
them when something first asks for their fields (generating the methods,
and importing the dataclasses module, cost about 2.4 ms of every start-up).
Each is held here to a reference class that ``dataclasses.make_dataclass``
generates from the same fields: the signature, what construction stores, the
repr, equality field by field, hashing, ``replace``, ``asdict`` and
``__match_args__``.  And no start-up imports the dataclasses module until a
dataclasses function is called, from whichever threads.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import site

import numpy as np
import pytest

from opaque_ops._native import elf
from opaque_ops.build import compiler
from opaque_ops.model import reader, shapes
from opaque_ops.model.checks import type_rules
from tests.helpers.child_process import crashed, run_python
from tests.helpers.fork_locks import assert_child_returns
from tests.helpers.locations import ROOT

CLASSES = [
    reader.TensorInfo,
    reader.OpInfo,
    reader.SubgraphInfo,
    reader.SignatureInfo,
    reader.ModelInfo,
    compiler.BuildSpec,
    elf.ElfInfo,
    type_rules.TypeRule,
    shapes.SequenceFault,
]


def _reference(cls):
    specs = []
    for f in dataclasses.fields(cls):
        kw = {"repr": f.repr, "compare": f.compare}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        specs.append((f.name, f.type, dataclasses.field(**kw)))
    return dataclasses.make_dataclass(cls.__name__, specs)


def _values(cls, salt: int) -> list:
    # One distinct value per field, of varied kinds (numpy ones included).
    out = []
    for k, f in enumerate(dataclasses.fields(cls)):
        dtype = np.dtype("float32" if salt == 1 else "int8")
        v = [
            salt + k,
            f"{f.name}-{salt}",
            (salt, k),
            {"k": salt + k},
            [salt, k],
            dtype,
            None if salt == 1 else 0,
            b"x" * salt,
        ]
        out.append(v[k % len(v)])
    return out


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_signature_is_the_generated_one(cls):
    ref = _reference(cls)
    ours = [(p.name, p.kind, repr(p.default)) for p in inspect.signature(cls).parameters.values()]
    theirs = [(p.name, p.kind, repr(p.default)) for p in inspect.signature(ref).parameters.values()]
    assert ours == theirs


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_construction_repr_and_equality_are_the_generated_ones(cls):
    ref = _reference(cls)
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    vals = _values(cls, 1)
    # All positional, then only the required ones (defaults and factories).
    for args in (vals, vals[: len(required)]):
        a, r = cls(*args), ref(*args)
        assert vars(a) == vars(r)
        assert repr(a) == repr(r)
        # By keyword, as replace() constructs.
        kw = {f.name: v for f, v in zip(fields, args)}
        assert vars(cls(**kw)) == vars(ref(**kw))
    # A default factory gives every instance its own object.
    short = vals[: len(required)]
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(cls(*short), f.name) is not getattr(cls(*short), f.name)
    # Equality: field by field where the field compares, not where it does not.
    base_a, base_r = cls(*vals), ref(*vals)
    assert (base_a == cls(*vals)) is (base_r == ref(*vals)) is True
    other = _values(cls, 2)
    for k, f in enumerate(fields):
        changed = list(vals)
        changed[k] = other[k]
        assert (base_a == cls(*changed)) is (base_r == ref(*changed)) is (not f.compare), f.name
    # Another type: NotImplemented, so == is False; and not hashable.
    assert base_a.__eq__(object()) is NotImplemented and base_r.__eq__(object()) is NotImplemented
    assert cls.__hash__ is None and ref.__hash__ is None
    with pytest.raises(TypeError):
        hash(base_a)
    # A missing argument is refused as the generated __init__ refuses it.
    if required:
        with pytest.raises(TypeError):
            cls(*vals[: len(required) - 1])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_dataclass_functions_work(cls):
    vals = _values(cls, 1)
    a = cls(*vals)
    assert dataclasses.is_dataclass(a)
    first = dataclasses.fields(cls)[0].name
    b = dataclasses.replace(a, **{first: "changed"})
    assert getattr(b, first) == "changed" and type(b) is cls
    assert dataclasses.asdict(_reference(cls)(*vals)) == dataclasses.asdict(a)
    # (Python 3.10 and later: __match_args__ for pattern matching.)
    assert getattr(cls, "__match_args__", None) == getattr(_reference(cls), "__match_args__", None)
    # A default factory's field is no class attribute; a plain default is one.
    ref = _reference(cls)
    # (Python 3.13 and later: __replace__ for copy.replace.)
    assert hasattr(cls, "__replace__") == hasattr(ref, "__replace__")
    for f in dataclasses.fields(cls):
        assert hasattr(cls, f.name) == hasattr(ref, f.name), f.name
        if hasattr(ref, f.name):
            assert getattr(cls, f.name) == getattr(ref, f.name), f.name


_FIRST_USE = """
import json, sys, threading
from opaque_ops._native import elf
from opaque_ops.build.compiler import BuildSpec
from opaque_ops.model import reader, shapes
from opaque_ops.model.checks import check_model, type_rules
with open(sys.argv[1], "rb") as f:
    info = reader.read_model(f.read())
check_model(info)  # the dtype rules' TypeRule objects in use
spec = BuildSpec(["cc"], label="x")
used = [repr(info), repr(spec), info == info, spec == BuildSpec(["cc"], label="x"), info.subgraphs[0].tensors[0].name,
        repr(elf.read(sys.executable)), elf.process() == elf.read(sys.executable),
        shapes.reverse_sequence_fault((0, 3), 1, 0, []) == shapes.SequenceFault(True, None)]
before = "dataclasses" in sys.modules
# copy.replace (Python 3.13 and later) works before anything asked for the fields.
if sys.version_info >= (3, 13):
    import copy
    replaced = copy.replace(spec, label="y").label
else:
    replaced = "y"
# As @dataclass leaves it: a default factory's field is no class attribute, a plain default is one.
attrs = [hasattr(reader.ModelInfo, "buffers"), hasattr(BuildSpec, "sources"), BuildSpec.label]
import dataclasses
# A subclass asks first: it gets its base's fields, as it would inherit generated ones.
sub = [f.name for f in dataclasses.fields(type("Sub", (reader.SignatureInfo,), {}))]
classes = [reader.TensorInfo, reader.OpInfo, reader.SubgraphInfo, reader.SignatureInfo, reader.ModelInfo, BuildSpec,
           elf.ElfInfo, type_rules.TypeRule, shapes.SequenceFault]
start = threading.Barrier(8)
seen = []
def ask():
    start.wait()
    seen.append([(c.__name__, [id(f) for f in dataclasses.fields(c)]) for c in classes])
threads = [threading.Thread(target=ask) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({
    "before": before,
    "attrs": attrs,
    "replaced": replaced,
    "sub": sub,
    "same": all(s == seen[0] for s in seen) and len(seen) == 8,
    "names": [[f.name for f in dataclasses.fields(c)] for c in classes],
    "plain": [type(c.__dict__["__dataclass_fields__"]) is dict for c in classes],
    "is": [dataclasses.is_dataclass(info), dataclasses.is_dataclass(spec)],
}))
"""


def test_no_dataclasses_until_asked_then_once_for_all_threads(tmp_path, atan_model_bytes):
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    # -S: the site module imports nothing here that could bring dataclasses in.
    r = run_python("-S", "-c", _FIRST_USE, model, pythonpath=[ROOT, *site.getsitepackages()])
    assert r.returncode == 0, crashed(r)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["before"] is False, "reading a model or making a BuildSpec imported dataclasses"
    assert got["attrs"] == [False, False, "building the kernel library"]
    assert got["replaced"] == "y"
    assert got["sub"] == ["key", "subgraph_index", "inputs", "outputs"]
    # Eight threads asked at once: each saw the one set of Field objects.
    assert got["same"] is True
    assert got["names"] == [list(c._FIELDS) for c in CLASSES]
    assert got["plain"] == [True] * len(CLASSES) and got["is"] == [True, True]


def test_a_read_model_is_made_of_them(atan_model_bytes):
    info = reader.read_model(atan_model_bytes)
    assert type(info) is reader.ModelInfo and type(info.subgraphs[0]) is reader.SubgraphInfo
    assert type(info.subgraphs[0].tensors[0]) is reader.TensorInfo
    assert type(info.subgraphs[0].operators[0]) is reader.OpInfo
    assert info == reader.read_model(atan_model_bytes)
    assert repr(info).startswith("ModelInfo(version=3, ")


def test_a_fork_while_another_thread_makes_a_class_a_dataclass_leaves_the_child_able_to_read_fields():
    # The thread stops inside _DataclassFields.__get__, holding _records' lock,
    # before it runs @dataclass: the child's copy of the lock stayed held, and
    # its first read of fields waited forever.
    assert_child_returns(
        [f.name for f in dataclasses.fields(reader.TensorInfo)],
        "import dataclasses\nfrom opaque_ops import _records\nfrom opaque_ops.model import reader\n",
        code="_records._DataclassFields.__get__.__code__",
        lock="_records._lock",
        worker="dataclasses.fields(reader.TensorInfo)",
        child="[f.name for f in dataclasses.fields(reader.TensorInfo)]",
    )
