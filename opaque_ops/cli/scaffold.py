"""``opaque-ops scaffold MODEL -o DIR --name NAME [--op OP ...] [--force]``: a kernel package for a model's ops.

Writes a pip-installable project for the model's custom ops that nobody
provides (or the ``--op`` ones):

- ``NAME/c/<op>.c``: one kernel per op (:mod:`opaque_ops.cli.scaffold_c`),
  reading the options the model actually gives, checking the tensors and
  failing at invoke with "not implemented yet" and the parsed options;
- ``tests/test_<op>.py``: runs the op with :func:`opaque_ops.testing.run_op`
  on the model's exact option bytes, dtypes and shapes against a numpy
  ``reference()`` left for the author; it fails (never errors or skips) until
  both are written;
- ``pyproject.toml`` + ``setup.py``: registers the package under the entry
  point group ``opaque_ops.kernels`` (``oo.kernels.NAME()``,
  ``--ops kernels:NAME``); ``OPAQUE_OPS_WHEEL_ARCH=x86_64|aarch64 pip wheel``
  prebuilds the libraries with :func:`opaque_ops.build.standalone.build_prebuilt`;
- ``README.md`` with those commands.

The facts about each op come from the model reader and the doctor's option
decoder (:func:`opaque_ops.cli.doctor.describe_options`); nothing is decoded twice.
"""

from __future__ import annotations

import keyword
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import _digest
from .common import shell_word, shown
from .scaffold_c import c_string, kernel_source, merge_classes, value_class


@dataclass
class OpFacts:
    """What the model says about one custom op, over all the nodes that use it."""

    name: str
    versions: set = field(default_factory=set)
    count: int = 0
    # [(type name, shape or None when nodes differ)], one per input position; (None, None) at a
    # position every node omits.  An input a node omits (-1, kTfLiteOptionalTensor) keeps its
    # position: the kernel sees it counted, and NULL from TfLiteOpaqueNodeGetInput.
    inputs: list = field(default_factory=list)
    # How many of the nodes that have each input position omit it (0: every node gives it).
    omitted: list = field(default_factory=list)
    # The input counts of the op's nodes (TfLiteOpaqueNodeNumberOfInputs): a converter may leave
    # a trailing optional input out entirely rather than write -1, so nodes of one op can have
    # different counts.  A position at or past a node's count is absent there, as an omitted one.
    input_counts: set = field(default_factory=set)
    output_counts: set = field(default_factory=set)  # more than one: refused (see _refuse_output_counts)
    outputs: list = field(default_factory=list)
    input_types: list = field(default_factory=list)  # [set of type names]
    output_types: list = field(default_factory=list)
    option_sets: list = field(default_factory=list)  # [(raw bytes, described)]; their nodes in set_nodes
    options_kind: str = "none"
    map_keys: dict = field(default_factory=dict)  # {key: (class, sets having it)}
    raw_lengths: set = field(default_factory=set)
    tf_op: str = ""
    flex_attrs: dict = field(default_factory=dict)  # {attr: kind}
    c_prefix: str = ""
    file_stem: str = ""
    # Every node's tensors (TensorInfo lists), and for each option set the nodes that use it.
    nodes: list = field(default_factory=list)  # [(inputs, outputs)]; None for an omitted input
    set_nodes: list = field(default_factory=list)  # [[(inputs, outputs)], one list per option set]
    # The shape rule (see _shape_rule): None when the outputs have the shapes the model
    # records; else the dims that may change, the outputs following input 0.
    follow: list | None = None
    follow_shape: list = field(default_factory=list)  # the model's shape, -1 where a dim may change
    resize_dims: list = field(default_factory=list)  # -1 in every input's signature: the test's resized case
    shape_sets: list = field(default_factory=list)  # [(input shapes, output shapes)], distinct, as the nodes record

    def input_state(self, i: int) -> str:
        """``"given"`` (by every node), ``"optional"`` (absent in some nodes) or ``"omitted"`` (in all).

        Absent: omitted (-1) or past the node's input count; the kernel gets
        no tensor either way, so both make a position optional.
        """
        n = self.absent(i)
        return "given" if n == 0 else "omitted" if n == len(self.nodes) else "optional"

    def absent(self, i: int) -> int:
        """How many nodes have no tensor at input position ``i``: omitted (-1), or fewer inputs."""
        return self.omitted[i] + self.short_of(i)

    def short_of(self, i: int) -> int:
        """How many nodes have fewer than ``i + 1`` inputs (input ``i`` past their count)."""
        return len(self.nodes) - self.position_count(i)

    @property
    def min_inputs(self) -> int:
        """The fewest inputs a node of the op has."""
        return min(self.input_counts, default=0)

    @property
    def max_inputs(self) -> int:
        """The most inputs a node of the op has (the positions the facts cover)."""
        return max(self.input_counts, default=0)

    def position_count(self, i: int) -> int:
        """How many nodes have input position ``i`` (given or omitted)."""
        return sum(1 for ins, _ in self.nodes if i < len(ins))

    @property
    def options_summary(self) -> str:
        n = len(self.option_sets)
        sets = f"{n} distinct set(s) in the model"
        if self.options_kind == "flexbuffer map":
            keys = ", ".join(f"{k} ({c})" for k, (c, _) in self.map_keys.items())
            return f"a flexbuffer map, {sets}; keys read: {keys}"
        if self.options_kind == "raw":
            return f"raw bytes ({' or '.join(map(str, sorted(self.raw_lengths)))}), {sets}"
        if self.options_kind == "flex":
            return f"a Flex op: TensorFlow op {self.tf_op}, NodeDef attributes " + ", ".join(
                f"{k} ({v})" for k, v in self.flex_attrs.items()
            )
        if self.options_kind == "none":
            return "none"
        return f"{self.options_kind}, {sets}, kept as bytes"


def doc_text(text: str) -> str:
    """``text`` from the model (an op name, a file name) as it may stand inside a generated docstring.

    Why: the model is untrusted, and an op name holding ``\"\"\"`` ended the
    generated test's docstring and put the rest of the name in the file as
    Python, which pytest then ran.  Quotes, backslashes and unprintable
    characters are written as escapes (the docstring reads as the name).
    """
    return repr(str(text))[1:-1].replace('"', '\\"')


# A file name's stem is kept under this many characters (a file system's
# name limit is 255 bytes; an op name may be longer, and non-ASCII).
_STEM_MAX = 64


def snake(name: str) -> str:
    """``SoftThreshold`` -> ``soft_threshold`` (a file name)."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    s = re.sub(r"\W+", "_", s, flags=re.ASCII).strip("_").lower() or "op"
    s = "op_" + s if s[0].isdigit() else s
    if len(s) > _STEM_MAX:
        # Cut, with a digest of the whole name: two long names that share a
        # beginning stay two files.
        s = s[: _STEM_MAX - 9].rstrip("_") + "_" + _digest.of_bytes(name.encode("utf-8", "surrogatepass"))[:8]
    return s


def _shape(t) -> tuple:
    return tuple(int(x) for x in t.shape)


def gather_ops(model, only=()) -> tuple[list[OpFacts], list[str]]:
    """The facts of the ops to scaffold: the named ones, or every custom op nobody provides.

    Returns
    -------
    (list of OpFacts, list of str)
        The ops, and the names of the model's custom ops left out (provided elsewhere).

    Raises
    ------
    CliError
        An ``--op`` the model does not use, nothing to scaffold, or an op
        to scaffold whose nodes have different output counts.
    """
    from ..kernels import provided_ops
    from ..model import read_model
    from ..model.runtime_ops import RUNTIME_CUSTOM_OPS
    from .common import CliError
    from .doctor import describe_options

    info = read_model(model)
    ops: dict[str, OpFacts] = {}
    for sg in info.subgraphs:
        for node in sg.operators:
            if not node.is_custom:
                continue
            f = ops.setdefault(node.op_name, OpFacts(node.op_name))
            f.versions.add(node.version)
            f.count += 1
            # An omitted input (-1) stays at its position as None: dropping it moved the inputs
            # after it down one, and the kernel then checked a count and positions that were
            # not the node's ("needs 2 inputs, got 3" for the model it was written from).
            ins = [sg.tensors[i] if i >= 0 else None for i in node.inputs]
            outs = [sg.tensors[i] for i in node.outputs if i >= 0]
            tensors = (
                [None if t is None else (t.type_name, _shape(t)) for t in ins],
                [(t.type_name, _shape(t)) for t in outs],
            )
            f.input_counts.add(len(ins))
            f.output_counts.add(len(outs))
            if f.count == 1:
                f.inputs = [(None, None) if t is None else t for t in tensors[0]]
                f.outputs = list(tensors[1])
                f.input_types = [set() if t is None else {t[0]} for t in tensors[0]]
                f.output_types = [{t} for t, _ in tensors[1]]
                f.omitted = [int(t is None) for t in tensors[0]]
            else:
                # A node with more inputs than any before it: its extra positions are new (the
                # nodes before it are short of them, which input_state counts as absent).
                for _ in range(len(tensors[0]) - len(f.inputs)):
                    f.inputs.append((None, None))
                    f.input_types.append(set())
                    f.omitted.append(0)
                for have, types, new in (
                    (f.inputs, f.input_types, tensors[0]),
                    (f.outputs, f.output_types, tensors[1]),
                ):
                    for i, entry in enumerate(new[: len(have)]):
                        if entry is None:
                            f.omitted[i] += 1
                            continue
                        t, shape = entry
                        types[i].add(t)
                        if have[i] == (None, None):  # the first node that gives this input
                            have[i] = (t, shape)
                        elif have[i][1] != shape:
                            have[i] = (have[i][0], None)
            raw = node.custom_options or b""
            f.nodes.append((ins, outs))
            same = next((k for k, (r, _) in enumerate(f.option_sets) if r == raw), None)
            if same is not None:
                f.set_nodes[same].append((ins, outs))
            else:
                f.option_sets.append((raw, describe_options(node.op_name, raw)))
                f.set_nodes.append([(ins, outs)])
    if only:
        unknown = [n for n in only if n not in ops]
        if unknown:
            raise CliError(
                f"the model has no custom op {', '.join(map(repr, unknown))}; its custom ops: "
                + (", ".join(sorted(ops)) or "none")
            )
        chosen = [ops[n] for n in dict.fromkeys(only)]
    else:
        bundled = provided_ops()
        chosen = [
            f for n, f in ops.items() if n not in RUNTIME_CUSTOM_OPS and not all((n, v) in bundled for v in f.versions)
        ]
        if not chosen:
            raise CliError(
                "nothing to scaffold: every custom op of the model has a provider "
                "(the runtime or a bundled kernel); name ops with --op to scaffold them anyway"
            )
    for f in chosen:
        _refuse_output_counts(f)
    left_out = sorted(set(ops) - {f.name for f in chosen})
    used_prefixes, used_stems = set(), set()
    for f in chosen:
        _settle_options(f)
        _shape_rule(f)
        base = re.sub(r"\W", "", f.name, flags=re.ASCII) or "Op"
        base = ("Op" + base) if base[0].isdigit() else base
        prefix, k = base, 2
        while prefix in used_prefixes:
            prefix, k = f"{base}{k}", k + 1
        used_prefixes.add(prefix)
        f.c_prefix = prefix
        stem, k = snake(f.name), 2
        while stem in used_stems:
            stem, k = f"{snake(f.name)}_{k}", k + 1
        used_stems.add(stem)
        f.file_stem = stem
    return chosen, left_out


def _refuse_output_counts(f: OpFacts) -> None:
    """Refuse an op whose nodes have different output counts (a ``CliError`` that says what to do).

    Refused rather than guessed, unlike inputs: TFLite has no omitted
    output (-1) for a kernel to test, an output count is the op's structure
    (an option such as a split count chooses it), and Prepare sizes every
    output from the shapes the model records.  Cutting to the first node's
    count, as scaffold did, gave a kernel that refused the model's other
    nodes ("needs 1 output, got 2") with no word at scaffold time.
    """
    from .common import CliError

    if len(f.output_counts) > 1:
        raise CliError(
            f"the nodes of custom op {f.name!r} have different output counts "
            f"({' and '.join(map(str, sorted(f.output_counts)))}): scaffold writes a kernel for one "
            "output count. Write that op's kernel by hand (Prepare reads TfLiteOpaqueNodeNumberOfOutputs), "
            "and scaffold the model's other ops with --op"
        )


def _shape_rule(f: OpFacts) -> None:
    """Which shapes the generated Prepare accepts, and how it sizes the outputs.

    The rule, so that the kernel as generated (Invoke written against the
    shapes the test runs) is never handed an input larger than what its
    outputs were sized for:

    - *Follow*: when, in every node of the model, every input and every
      output has one and the same shape, the outputs take input 0's current
      shape in Prepare, and every input must have that shape too.  Then all
      the node's tensors have one shape at Invoke, so a loop bounded by any
      one tensor's element count stays inside every other, whatever the
      size.  The dims allowed to change are those marked -1 in the shape
      signature of every input (the model lets them change: a resized input,
      ``opaque-ops run --input`` with a file of another size) and those the
      nodes disagree on (the op already runs at several sizes); the other
      dims must keep the recorded size.  A constant input has no -1, so an
      op with one stays fixed in that dim.  The generated test runs each
      case again with the -1 dims 3 times larger.
    - *Fixed*, otherwise (outputs of another shape than the inputs, two
      groups of shapes, no dim allowed to change): the outputs get the
      shapes the model records, and every input must have the shape the
      model records, else Prepare fails saying so: a kernel written by an
      input's size would write past an output sized for the recorded input
      (a resized input of a static model once did, "double free or
      corruption").  When the nodes record several sets of shapes, the
      inputs must match one set and the outputs get that set's shapes.

    Why not let an output follow a same-shaped input while other tensors
    keep fixed shapes: a fixed output (or input) then has a size that no
    longer relates to the varying one as it did in the test, and a loop
    over the varying tensor runs past the fixed one.

    An omitted input (None at its position) has no shape: the rules read
    the inputs that are there, at their real positions.  *Follow* needs
    input 0 in every node (the outputs take its shape); a node that omits
    it makes the rule *fixed*.  In a set of shapes an omitted position is
    None, so a set matches only a node that omits the same positions.
    """
    nodes = [(ins, outs) for ins, outs in f.nodes if ins and outs and ins[0] is not None]
    shapes = [{_shape(t) for t in ins + outs if t is not None} for ins, outs in nodes]
    if nodes and len(nodes) == len(f.nodes) and all(len(s) == 1 for s in shapes):
        firsts = [next(iter(s)) for s in shapes]
        rank = len(firsts[0])
        if all(len(sh) == rank for sh in firsts):
            disagree = {d for d in range(rank) if len({sh[d] for sh in firsts}) > 1}
            marked = {
                d
                for d in range(rank)
                if all(
                    t.shape_signature is not None and len(t.shape_signature) == rank and t.shape_signature[d] == -1
                    for ins, _ in nodes
                    for t in ins
                    if t is not None
                )
            }
            if disagree | marked:
                f.follow = sorted(disagree | marked)
                f.follow_shape = [-1 if d in f.follow else n for d, n in enumerate(firsts[0])]
                f.resize_dims = sorted(marked)
                return
    for ins, outs in f.nodes:
        entry = ([None if t is None else _shape(t) for t in ins], [_shape(t) for t in outs])
        if entry not in f.shape_sets:
            f.shape_sets.append(entry)


def _settle_options(f: OpFacts) -> None:
    """The one reading of the options that parses every node's set (their union)."""
    kinds = {d["kind"] for _, d in f.option_sets}
    kinds.discard("none") if len(kinds) > 1 and "none" in kinds else None
    if kinds == {"flexbuffer map"}:
        f.options_kind = "flexbuffer map"
        classes: dict = {}
        counts: dict = {}
        for _, d in f.option_sets:
            for e in d["entries"]:
                classes.setdefault(e["key"], set()).add(value_class(e["type"], e["value"]))
                counts[e["key"]] = counts.get(e["key"], 0) + 1
        f.map_keys = {k: (merge_classes(classes[k]), counts[k]) for k in sorted(classes)}
    elif kinds == {"flex"}:
        f.options_kind = "flex"
        f.tf_op = f.option_sets[0][1]["tf_op"]
        for _, d in f.option_sets:
            for name, a in d["attrs"].items():
                f.flex_attrs.setdefault(name, a["kind"])
    elif kinds == {"raw"}:
        f.options_kind = "raw"
        f.raw_lengths = {len(r) for r, _ in f.option_sets}
    elif kinds == {"none"}:
        f.options_kind = "none"
    else:
        f.options_kind = " / ".join(sorted(kinds))


# --------------------------------------------------------------- Python --


def py_literal(v) -> str:
    """A Python literal for a decoded option value (NaN and infinities spelled as float(...))."""
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return f"float({str(v)!r})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(py_literal(x) for x in v) + "]"
    return repr(v)


def _decoded(d: dict):
    if d["kind"] == "flexbuffer map":
        return {e["key"]: e["value"] for e in d["entries"]}
    if d["kind"] == "flex":
        return {"op": d["tf_op"], **{k: a["value"] for k, a in d["attrs"].items()}}
    return None


def _bytes_literal(raw: bytes) -> str:
    hexs = raw.hex()
    if len(hexs) <= 64:
        return f'bytes.fromhex("{hexs}")'
    parts = "\n".join(f'            "{hexs[i : i + 64]}"' for i in range(0, len(hexs), 64))
    return f"bytes.fromhex(\n{parts}\n        )"


# A constant of more elements than this is not written into the generated
# test: it stays a constant there, with random values.
_CONSTANT_MAX = 256


def _quantization(t):
    """A tensor's quantization as run_op takes it, or None (not quantized)."""
    q = t.quantization
    scales, zps = [float(x) for x in q["scales"]], [int(x) for x in q["zero_points"]]
    if not scales:
        return None
    if len(scales) == 1:
        return {"scale": scales[0], "zero_point": zps[0] if zps else 0}
    return {"scale": scales, "zero_point": zps, "quantized_dimension": int(q["quantized_dimension"])}


def _constants(nodes) -> tuple[dict, list[str]]:
    """The constant inputs of the nodes of one option set: {position: values or None}, and comments.

    A position is constant in the test when it is constant in every node
    (a kernel may check that in Prepare); its values are the model's when
    every node holds the same ones and they are few enough to write here,
    else None (random values, still a constant).
    """
    found, notes = {}, []
    for i in range(len(nodes[0][0])):
        if nodes[0][0][i] is None:
            continue  # omitted in this case's nodes: no tensor (see _cases)
        tensors = [ins[i] for ins, _ in nodes if i < len(ins) and ins[i] is not None]
        const = [bool(t.data) for t in tensors]
        if not any(const):
            continue
        if not all(const):
            notes.append(f"Input {i} is a constant in some of the model's nodes only: the test feeds it.")
            continue
        arrays = [t.array() for t in tensors]
        first = arrays[0]
        if first is None:
            found[i] = None
            notes.append(f"Input {i} is a constant in the model, of a type written here as random values.")
        elif any(a is None or a.shape != first.shape or a.tobytes() != first.tobytes() for a in arrays):
            found[i] = None
            notes.append(f"Input {i} is a constant in the model; its nodes hold different values: random ones here.")
        elif first.size > _CONSTANT_MAX:
            found[i] = None
            notes.append(f"Input {i} is a constant in the model, of {first.size} values: random ones here.")
        else:
            found[i] = first.tolist()
            notes.append(f"Input {i} is a constant in the model, with these values.")
    return found, notes


# The generated test holds at most this many cases.
_CASES_MAX = 16


def _cases(op: OpFacts) -> list[tuple[bytes, dict, list]]:
    """The generated test's cases: (raw options, described, nodes), one per option set and omitted inputs.

    Nodes of one option set that omit different inputs make one case each:
    a kernel must take an optional input both given and left out, and the
    test runs it both ways, as the model does.  So do nodes with different
    input counts (the key's length): the case runs the op with the node's
    fewer inputs, and the kernel must cope with the positions past them.
    """
    out = []
    for (raw, d), nodes in zip(op.option_sets, op.set_nodes):
        groups: dict = {}
        for ins, outs in nodes:
            groups.setdefault(tuple(t is None for t in ins), []).append((ins, outs))
        out += [(raw, d, group) for group in groups.values()]
    return out[:_CASES_MAX]


def _case_source(raw: bytes, d: dict, nodes, max_inputs: int) -> str:
    """One entry of the generated test's CASES: a node's options, tensors, constants and quantization.

    ``max_inputs`` is the most inputs a node of the op has: a case of fewer
    says so, as its shorter ``inputs`` list is easy to take for a mistake.
    """
    ins, outs = nodes[0]
    specs = [None if t is None else (t.type_name.lower(), list(_shape(t))) for t in ins]
    lines = [
        f'        "options": {_bytes_literal(raw)},',
        f'        "decoded": {py_literal(_decoded(d)) if _decoded(d) is not None else "None"},',
        f'        "inputs": {py_literal(specs)},',
        f'        "outputs": {py_literal([(t.type_name.lower(), list(_shape(t))) for t in outs])},',
    ]
    left_out = [i for i, t in enumerate(ins) if t is None]
    if left_out:
        lines.append(
            f"        # Input(s) {', '.join(map(str, left_out))} omitted, as in the model's node (-1,"
            " kTfLiteOptionalTensor): None here, and the kernel gets NULL for it."
        )
    if len(ins) < max_inputs:
        past = str(len(ins)) if len(ins) == max_inputs - 1 else f"{len(ins)} to {max_inputs - 1}"
        lines.append(
            f"        # The node has {len(ins)} input(s), others up to {max_inputs}: input(s) {past} left out"
            f" entirely, as in the model (TfLiteOpaqueNodeNumberOfInputs is {len(ins)})."
        )
    constants, notes = _constants(nodes)
    lines += [f"        # {doc_text(n)}" for n in notes]
    if constants:
        lines.append(f'        "constants": {py_literal(constants)},')
    for key, tensors in (("input_quantization", ins), ("output_quantization", outs)):
        # At the real positions: an omitted input keeps its place (and has no quantization).
        q = {k: q for k, t in enumerate(tensors) if t is not None and (q := _quantization(t)) is not None}
        if q:
            lines.append(f'        "{key}": {py_literal(q)},  # as the model quantizes them')
    return "    {\n" + "\n".join(lines) + "\n    },"


def pytest_source(op: OpFacts, package: str, model_name: str) -> str:
    """The pytest file of one op."""
    chosen = _cases(op)
    cases = [_case_source(raw, d, nodes, op.max_inputs) for raw, d, nodes in chosen]
    quantized = any(
        _quantization(t) is not None
        for _, _, nodes in chosen
        for ins, outs in nodes[:1]
        for t in ins + outs
        if t is not None
    )
    version = max(op.versions)
    if op.resize_dims:
        resize_note = (
            "# Dims the model lets change (-1 in the shape signature of every input): each case\n"
            "# runs again with them 3 times the recorded size, so the kernel is tested at another size."
        )
    else:
        resize_note = "# The model lets no dim change: every case runs at the shapes the model records."
    if quantized:
        ref_args, ref_call = "inputs, options, quantization", 'inputs, case["decoded"], quantization'
        ref_doc = (
            '\n    ``quantization`` is {"inputs": [...], "outputs": [...]}: each tensor\'s scale and\n'
            "    zero point as the model quantizes it (None for a tensor that is not)."
        )
    else:
        ref_args, ref_call, ref_doc = "inputs, options", 'inputs, case["decoded"]', ""
    return f'''"""{doc_text(op.name)}: the kernel in ../{package}/c/{op.file_stem}.c against a numpy reference.

Each case is one set of options that {doc_text(model_name)} gives the op, byte for byte,
with the dtypes, shapes, constant inputs and quantization of a node that uses it.
As generated, the test fails: write the kernel's Invoke and reference() below, and it passes.
"""

from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import KernelError
from opaque_ops.testing import run_op

SOURCE = Path(__file__).resolve().parents[1] / "{package}" / "c" / "{op.file_stem}.c"
OP, VERSION = {op.name!r}, {version}

CASES = [
{chr(10).join(cases)}
]

{resize_note}
RESIZE_DIMS = {op.resize_dims!r}


def reference({ref_args}):
    """{doc_text(op.name)} in numpy: the list of its outputs for ``inputs`` (numpy arrays, in order;
    None for an input the case omits, as the model's node does; a shorter list for a node with
    fewer inputs).

    ``options`` is the op's options as Python values: a dict for a flexbuffer
    map (a Flex op's: its TensorFlow ``op`` and attributes), None for raw bytes
    (read ``case["options"]`` with np.frombuffer).{ref_doc}  Return None until written.
    """
    return None


def at_size(specs, resized):
    """The (dtype, shape) specs, with the RESIZE_DIMS 3 times the recorded size when ``resized``
    (None, an omitted input, stays None)."""
    return [
        None if spec is None else
        (spec[0], [max(n, 1) * 3 if resized and i in RESIZE_DIMS else n for i, n in enumerate(spec[1])])
        for spec in specs
    ]


def make_inputs(case, specs, seed=0):
    rng = np.random.default_rng(seed)
    constants = case.get("constants", {{}})
    out = []
    for k, spec in enumerate(specs):
        if spec is None:  # omitted in the model's node: run_op leaves it out (-1) too
            out.append(None)
            continue
        dtype, shape = spec
        dt = np.dtype(dtype) if dtype != "string" else np.dtype(object)
        if constants.get(k) is not None:  # the model's values
            x = np.array(constants[k], dt).reshape(shape)
        elif dt.kind == "f":
            x = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "c":
            x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
        elif dt.kind == "b":
            x = rng.integers(0, 2, shape).astype(bool)
        elif dt.kind in "iu":
            x = rng.integers(0, 10, shape).astype(dt)
        else:
            x = np.zeros(shape, dt)
        out.append(x)
    return out


@pytest.fixture(scope="module")
def ops():
    return oo.compile_ops(SOURCE)


@pytest.mark.parametrize(
    ("case", "resized"),
    [(case, False) for case in CASES] + [(case, True) for case in CASES if RESIZE_DIMS],
    ids=[f"options{{i}}" for i in range(len(CASES))] + [f"options{{i}}-resized" for i in range(len(CASES)) if RESIZE_DIMS],
)
def test_matches_reference(ops, case, resized):
    in_specs, out_specs = at_size(case["inputs"], resized), at_size(case["outputs"], resized)
    inputs = make_inputs(case, in_specs)
    quantization = {{
        "inputs": [case.get("input_quantization", {{}}).get(k) for k in range(len(in_specs))],
        "outputs": [case.get("output_quantization", {{}}).get(k) for k in range(len(out_specs))],
    }}
    not_written = None
    try:
        got = run_op(ops, OP, inputs, options=case["options"], version=VERSION,
                     num_outputs=[(shape, dtype) for dtype, shape in out_specs],
                     constant_inputs=list(case.get("constants", {{}})),
                     input_quantization=quantization["inputs"], output_quantization=quantization["outputs"])
    except KernelError as exc:
        if "not implemented yet" not in str(exc):
            raise
        not_written = str(exc)
    if not_written is not None:
        pytest.fail(f"{{OP}} is not written yet: write {op.c_prefix}Invoke in {{SOURCE}} (it reads the inputs "
                    f"and writes the outputs), and reference() in {{Path(__file__).name}}. The kernel parsed "
                    f"the options as: {{not_written}}", pytrace=False)
    expected = reference({ref_call})
    if expected is None:
        pytest.fail(f"write reference() in {{Path(__file__).name}}: {{OP}} in numpy, returning the list of "
                    f"its {{len(got)}} output(s) for these inputs", pytrace=False)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e, g.dtype), rtol=1e-5, atol=1e-6)
'''


# ---------------------------------------------------------- packaging ---


def _init_py(package: str, ops: list[OpFacts], model_name: str) -> str:
    names = ", ".join(doc_text(f.name) for f in ops)
    return f'''"""Kernels for {names} (from {doc_text(model_name)}), as an opaque_ops kernel package.

``opaque_ops.kernels.{package}()`` and ``--ops kernels:{package}`` find it through
the entry point group ``opaque_ops.kernels`` (see pyproject.toml).
"""

from pathlib import Path


def kernels():
    """Every op of this package as one ``custom_ops`` entry: prebuilt if this wheel has them, else compiled."""
    from opaque_ops.kernels import package_kernels

    return package_kernels({package!r}, Path(__file__).resolve().parent)
'''


def _pyproject(package: str, dist: str) -> str:
    return f'''[build-system]
# Build with --no-build-isolation: setup.py builds the prebuilt libraries with
# the opaque_ops you have installed.
requires = ["setuptools>=64", "wheel", "opaque-ops"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "opaque_ops kernels for {package}"
requires-python = ">=3.9"
dependencies = ["opaque-ops"]

# How opaque_ops finds the package: oo.kernels.{package}() and --ops kernels:{package}.
[project.entry-points."opaque_ops.kernels"]
{package} = "{package}:kernels"

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["c/*.c", "c/*.h"]
'''


_SETUP_PY = '''"""Platform wheels with the kernels prebuilt (the rest is in pyproject.toml).

Without OPAQUE_OPS_WHEEL_ARCH the wheel is pure Python and the kernels are
compiled on first use (opaque_ops.compile_ops, cached).  With
OPAQUE_OPS_WHEEL_ARCH=x86_64 or aarch64 (native = this machine) every C file
is compiled for that architecture by opaque_ops' own build path
(opaque_ops.build.standalone.build_prebuilt; aarch64 needs
aarch64-linux-gnu-gcc) into PACKAGE/prebuilt/<arch>/ with a manifest of
digests, and the wheel is tagged py3-none-manylinux_2_35_<arch>.
"""

import os
import shutil
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

PACKAGE = %(package)r
HERE = os.path.dirname(os.path.abspath(__file__))
ARCHES = {"x86_64", "aarch64"}
GLIBC = "2_35"  # that of the TFLite runtime opaque_ops runs with


def wheel_arch():
    arch = os.environ.get("OPAQUE_OPS_WHEEL_ARCH", "").strip()
    if not arch:
        return None
    if arch == "native":
        import platform

        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    if arch not in ARCHES:
        sys.exit(f"OPAQUE_OPS_WHEEL_ARCH={arch!r}: choose one of {', '.join(sorted(ARCHES))} or native")
    return arch


class BuildPyWithKernels(build_py):
    def run(self):
        # The package is copied afresh: build_py leaves what an earlier build
        # copied (a C file since deleted went into the wheel with no prebuilt
        # library, and then needed a compiler on the Pi), and another arch's
        # prebuilt libraries.
        shutil.rmtree(os.path.join(self.build_lib, PACKAGE), ignore_errors=True)
        super().run()
        target = os.path.join(self.build_lib, PACKAGE, "prebuilt")
        arch = wheel_arch()
        if arch:
            from opaque_ops.build.standalone import build_prebuilt
            from opaque_ops.errors import CompileError

            try:
                manifest = build_prebuilt(arch, os.path.join(target, arch), kernels_dir=os.path.join(HERE, PACKAGE, "c"))
            except CompileError as exc:
                # The compiler's own lines, not setuptools' traceback above them.
                sys.exit(f"error: {exc}")
            print(f"prebuilt {len(manifest['kernels'])} kernels for {arch}")


class PlatformDistribution(Distribution):
    def has_ext_modules(self):
        return bool(wheel_arch()) or super().has_ext_modules()


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        arch = wheel_arch()
        if arch:
            return "py3", "none", f"manylinux_{GLIBC}_{arch}"
        return super().get_tag()


setup(distclass=PlatformDistribution, cmdclass={"build_py": BuildPyWithKernels, "bdist_wheel": PlatformWheel})
'''


def _readme(package: str, ops: list[OpFacts], model_name: str, command: str) -> str:
    files = "\n".join(f"- `{package}/c/{f.file_stem}.c`: {f.name} (test: `tests/test_{f.file_stem}.py`)" for f in ops)
    return f"""# {package}: opaque_ops kernels for {model_name}

Written by `{command}`.

{files}

Each kernel reads the options the model gives it and checks its tensors; its
Invoke fails with "not implemented yet" and the options as it parsed them
until you write it.  Each test runs the op with the model's exact options,
dtypes and shapes against `reference()`, which you write in numpy.

## Develop

    python -m pytest tests          # fails until the kernel and reference() are written

The tests compile the C files in this directory (cached), so an edit is
picked up on the next run.

## Install (compiled on first use)

    pip install --no-build-isolation --no-deps .

Then `opaque_ops.kernels.{package}()` in Python, or `--ops kernels:{package}` on
the command line:

    opaque-ops run {model_name} --ops kernels:{package} --input ...

## Platform wheels (prebuilt: no compiler needed where they are installed)

    OPAQUE_OPS_WHEEL_ARCH=x86_64  pip wheel --no-build-isolation --no-deps -w dist .
    OPAQUE_OPS_WHEEL_ARCH=aarch64 pip wheel --no-build-isolation --no-deps -w dist .   # needs gcc-aarch64-linux-gnu

A prebuilt library is loaded only when the wheel's manifest holds its digest
and its C file's (the same rule as opaque_ops' bundled kernels); otherwise
the C file is compiled.  Building needs setuptools and wheel in the
environment (`pip install setuptools wheel`).
"""


def _taken_by(name: str, out: Path) -> str | None:
    """What else goes by ``name`` in this Python (None: nothing, or this project, scaffolded before).

    The project's distribution is ``name`` with ``-`` for ``_``, and its
    package ``name``: pip uninstalls a distribution of the same name first
    (``--name opaque_ops`` removed opaque_ops itself), and a package of the
    same name as a module shadows it, or is shadowed.
    """
    import importlib.util
    import site
    from importlib import metadata

    from ..kernels import installed_packages

    if name in getattr(sys, "stdlib_module_names", ()):
        return "is a module of Python's standard library"
    dist_name = name.replace("_", "-")

    def normal(n: str) -> str:  # (PEP 503)
        return re.sub(r"[-_.]+", "-", n).lower()

    if normal(installed_packages().get(name, "")) == normal(dist_name):
        return None  # this project, scaffolded and installed before (a kernel package of this name)
    for dist in dict.fromkeys((dist_name, name)):
        try:
            found = metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        return f"is the name of the installed distribution {found.metadata['Name']} {found.version}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    if spec.origin is None or spec.origin == "namespace":
        # A namespace package: a bare directory of that name on the path (the
        # project's own, run from its parent), or one that installed
        # distributions share (google, backports), which a regular package
        # of that name would hide.
        installed = [os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages())]
        shared = [
            p
            for p in spec.submodule_search_locations or ()
            if any(os.path.realpath(p).startswith(d + os.sep) for d in installed)
        ]
        return f"is an installed namespace package ({shared[0]})" if shared else None
    if Path(spec.origin).resolve().is_relative_to(Path(out).resolve()):
        return None  # this project's own package, scaffolded before (--force)
    return f"is already an importable module ({spec.origin})"


def write_project(
    model, out_dir, name: str, only=(), force: bool = False, command: str = "", add: bool = False
) -> list[Path]:
    """Write the kernel package project; return the files written.

    Parameters
    ----------
    model : path-like
        The ``.tflite`` file.
    out_dir : path-like
        The project directory; must be empty or missing unless ``force``.
    name : str
        The package (and kernel) name: a Python identifier, not a bundled kernel's name.
    only : sequence of str
        Op names to scaffold; default the custom ops nobody provides.
    force : bool
        Write into a non-empty directory, replacing the generated files
        (with ``add``: the C and test files of ops the project has already).
    command : str
        The command line, quoted in the files' headers.
    add : bool
        Add the ops to the project scaffolded before in ``out_dir`` (package
        ``name``): only their C and test files are written, and the
        project's own files (pyproject.toml, setup.py, README.md, the
        package's ``__init__.py``), which their author may have edited, are
        left as they are.

    Raises
    ------
    CliError
        A bad name, a non-empty directory without ``force``, an unknown op,
        nothing to do, or with ``add``: no project there, or an op it has
        already (without ``force``).
    """
    from .. import kernels as _kernels
    from ..kernels import names as bundled_names
    from .common import CliError, regular_file

    model = regular_file(model, "model file")
    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise CliError(f"--name {name!r} must be a Python identifier (letters, digits, _), e.g. my_ops")
    if name in bundled_names():
        raise CliError(f"--name {name!r} is a bundled kernel's name; choose another")
    if name in vars(_kernels) and not name.startswith("_"):
        # opaque_ops.kernels.NAME() would be that function, never this package.
        raise CliError(
            f"--name {name!r} is a function of opaque_ops.kernels, so opaque_ops.kernels.{name}() "
            f"would not find the package; choose another, e.g. {name}_ops"
        )
    out = Path(out_dir)
    taken = _taken_by(name, out)
    if taken:
        raise CliError(
            f"--name {name!r} {taken}: installing the project (pip install) would replace or shadow it. "
            f"Choose another name, e.g. {name}_kernels"
        )
    if out.exists() and not out.is_dir():
        raise CliError(f"{out} exists and is not a directory")
    if add and not (out / name / "__init__.py").is_file():
        raise CliError(
            f"--add writes ops into a project scaffolded before, and {out / name / '__init__.py'} is not "
            "there; scaffold without --add to start one (or give the project's --name)"
        )
    if not add and out.is_dir() and any(out.iterdir()) and not force:
        raise CliError(
            f"{out} is not empty: scaffold refuses to overwrite what may be your work "
            "(use --add to add ops to a project scaffolded there, or --force to write the generated "
            "files over it)"
        )
    ops, _ = gather_ops(model, only)
    if add:
        _place_in_project(ops, out / name / "c", force)
    command = command or " ".join(
        shlex.quote(p)
        for p in ["opaque-ops", "scaffold", model.name, "-o", str(out), "--name", name]
        + [x for f in (only or ()) for x in ("--op", f)]
    )
    files = (
        {}
        if add
        else {
            out / "pyproject.toml": _pyproject(name, name.replace("_", "-")),
            out / "setup.py": _SETUP_PY % {"package": name},
            out / "README.md": _readme(name, ops, _utf8(model.name), _utf8(command)),
            out / name / "__init__.py": _init_py(name, ops, model.name),
        }
    )
    for f in ops:
        files[out / name / "c" / f"{f.file_stem}.c"] = kernel_source(f, model.name, command)
        files[out / "tests" / f"test_{f.file_stem}.py"] = pytest_source(f, name, model.name)
    _write_files(out, files)
    return list(files)


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can hold it: a file name's bytes that are not UTF-8 are written as ``\\xNN``.

    (Python keeps such bytes as lone surrogates, which no UTF-8 file can
    hold: the README's write failed with a codec error.)
    """
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _place_in_project(ops: list[OpFacts], c_dir: Path, force: bool) -> None:
    """Give each op of ``ops`` the file name it has in the project's ``c_dir`` (``--add``), or a free one.

    An op is known in a project by the ``OP_NAME`` line of its C file (a
    file name says less: ``My-Op`` and ``my_op`` both make ``my_op``).  An
    op the project has already is refused without ``force`` (its files hold
    the author's kernel and test), and replaced in place with it.
    """
    from .common import CliError

    def op_line(text: str) -> str:
        return next((line for line in text.splitlines() if line.startswith("#define OP_NAME ")), "")

    owners = {}  # the project's file stems -> their OP_NAME line
    for c in sorted(c_dir.glob("*.c")):
        try:
            owners[c.stem] = op_line(c.read_text(errors="replace"))
        except OSError:
            owners[c.stem] = ""
    taken = set(owners)
    for f in ops:
        line = op_line(f"#define OP_NAME {c_string(f.name)}")
        mine = next((stem for stem, owner in owners.items() if owner == line), None)
        if mine is not None:
            if not force:
                raise CliError(
                    f"the project has {f.name!r} already ({c_dir / (mine + '.c')}); --add leaves its kernel and "
                    "test as they are: drop it from --op, or add --force to write them again"
                )
            f.file_stem = mine
            continue
        stem, k = f.file_stem, 2
        while stem in taken:
            stem, k = f"{f.file_stem}_{k}", k + 1
        f.file_stem = stem
        taken.add(stem)


def _write_files(out: Path, files: dict) -> None:
    """Write ``files`` ({path under ``out``: text}) so that a failure leaves no half-written project.

    Why: a write that failed part way (a full disk, a name the file system
    refuses) left some files, one of them empty, and the next run refused
    the directory as the user's work.  A new project is written into a
    hidden directory beside ``out`` and renamed into place once complete;
    over an existing one (``--force``) each file is written beside itself
    and renamed over it, so no file is ever left half-written.

    Raises
    ------
    CliError
        A write failed; what was left as it was is said.
    """
    import secrets
    import shutil

    from .common import CliError

    fresh = not out.exists() or not any(out.iterdir())
    done: list[Path] = []
    try:
        if fresh:
            out.parent.mkdir(parents=True, exist_ok=True)
            # (mkdir, not tempfile.mkdtemp: the project gets the umask's mode, not 0700.)
            staging = out.parent / f".{out.name}.scaffold-{secrets.token_hex(4)}"
            staging.mkdir()
            try:
                for path, text in files.items():
                    target = staging / path.relative_to(out)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text)
                if out.exists():
                    out.rmdir()  # (empty: checked above)
                staging.rename(out)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            return
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
            try:
                part.write_text(text)
                os.replace(part, path)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            done.append(path)
    except OSError as exc:
        kept = (
            f"{out} was left as it was"
            if not done
            else f"{len(done)} of the {len(files)} files were replaced ({', '.join(str(p.relative_to(out)) for p in done)}); "
            "the others were left as they were"
        )
        raise CliError(f"could not write the project: {exc}; {kept}") from None


def cmd_scaffold(args) -> int:
    """``opaque-ops scaffold``: write the project and say what to do next."""
    written = write_project(args.model, args.output, args.name, args.op, args.force, add=args.add)
    out = Path(args.output)
    for path in written:
        print(f"wrote {shown(path)}")  # (a directory's name may hold anything)
    if args.add:
        print(
            f"left pyproject.toml, setup.py, README.md and {args.name}/__init__.py as they were "
            "(the README lists the ops it was written for; the package loads every C file in "
            f"{args.name}/c)"
        )
    print(
        f"next: python -m pytest {shell_word(out / 'tests')}   (fails until each kernel and its reference() are written)"
    )
    print(f"      pip install --no-build-isolation --no-deps {_pip_path(out)}   then --ops kernels:{args.name}")
    return 0


def _pip_path(directory: Path) -> str:
    """``directory`` as pip must be given it, quoted for a shell.

    pip reads a bare word (``my_kernels``) as a project name on the package
    index, not as the directory: it failed, or with another project of that
    name on PyPI would have installed that one.  A relative path gets ``./``.
    """
    text = str(directory)
    if not os.path.isabs(text) and not text.startswith(("./", "../")):
        text = "./" + text
    return shell_word(text)


def add_parser(sub) -> None:
    """Register ``scaffold`` on the ``opaque-ops`` subcommand parser."""
    p = sub.add_parser(
        "scaffold", help="write a kernel package project (C, tests, packaging) for a model's missing custom ops"
    )
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the project directory to write")
    p.add_argument("--name", required=True, help="the package name (a Python identifier): kernels:NAME")
    p.add_argument(
        "--op",
        action="append",
        default=[],
        metavar="OP",
        help="scaffold this custom op (repeatable; default: every custom op nobody provides)",
    )
    p.add_argument(
        "--add",
        action="store_true",
        help="add the ops to the project scaffolded in DIR before: write only their C and test files",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty directory (with --add: write again the files of ops the project has)",
    )
    p.set_defaults(func=cmd_scaffold)
