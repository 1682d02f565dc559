"""``opaque-ops doctor MODEL [--ops LIB ...] [--json]``: will this model run here, and if not, what is needed.

The report is built as a plain dict of facts (:func:`gather`), then either
printed as text (:func:`render`) or, with ``--json``, as that same dict.  It
needs no TensorFlow and never runs the model: the only thing handed to the
TFLite runtime is a probe model holding the model's builtin operator codes
and no operators, which tells whether the runtime has each builtin at the
model's version (TFLite resolves operator codes before it looks at any node).

Exit status, the same meaning as ``inspect --check``'s 0 and 1:

- 0: the model would run as given: the runtime has every builtin at its
  version, every custom op has a provider, and the model checks pass;
- 1: it would be refused (the report says why), or the runtime cannot be
  loaded;
- 2: a usage error.

Status 3 of ``inspect --check`` (the runtime crashed or hung) needs a real
run in an isolated worker, which ``doctor`` does not do.
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
from pathlib import Path

from flatbuffers import flexbuffers

from .common import CHECK_OK, CHECK_REFUSED, PROG, shell_command, shown, terminal_safe

# What the report calls each provider of an op.
RUNTIME, BUNDLED, LIBRARY, NOBODY = "the runtime", "a bundled kernel", "a library given with --ops", "nobody"

# Builtins the XNNPACK delegate of TFLite 2.17 has a visitor for
# (xnnpack_delegate.cc, Subgraph::VisitNode), with the tensor types it takes.
# The delegate also checks shapes and parameters node by node when the
# interpreter is created, so a count from this table is an upper bound.
_XNNPACK_BUILTINS = frozenset(
    """
ABS ADD ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL CEIL CONCATENATION CONV_2D DEPTH_TO_SPACE
DEPTHWISE_CONV_2D DEQUANTIZE DIV ELU FLOOR FULLY_CONNECTED GELU HARD_SWISH LEAKY_RELU LOGISTIC
MAX_POOL_2D MAXIMUM MEAN MINIMUM MUL NEG PAD PADV2 PRELU QUANTIZE READ_VARIABLE RELU RELU_N1_TO_1
RELU6 RESHAPE RESIZE_BILINEAR ROUND RSQRT SLICE SOFTMAX SPACE_TO_DEPTH SPLIT SQRT SQUARE
SQUARED_DIFFERENCE STRIDED_SLICE SUB SUM TANH TRANSPOSE TRANSPOSE_CONV VAR_HANDLE
""".split()
)
_XNNPACK_TYPES = frozenset({"FLOAT32", "FLOAT16", "INT8", "UINT8", "INT32", "RESOURCE"})

# How many values of raw bytes, vectors and option sets the text shows.
_SHOW_VALUES = 16
_SHOW_OPTION_SETS = 4


# ------------------------------------------------------------------ options --


def _flex_type(ref) -> str:
    """A flexbuffer value's type as the report names it: ``int``, ``string``, ``vector of float``..."""
    name = ref._type.name  # flexbuffers.Type: INT, VECTOR_FLOAT, INDIRECT_UINT, VECTOR_INT3...
    name = name.replace("INDIRECT_", "")
    if name.startswith("VECTOR_"):
        elem = re.sub(r"\d$", "", name[len("VECTOR_") :]).replace("_DEPRECATED", "")
        width = name[-1] if name[-1].isdigit() else ""
        return f"vector of {elem.lower()}" + (f" [{width}]" if width else "")
    return name.lower()


def _flex_entries(raw: bytes) -> dict | None:
    """A flexbuffer map or vector with each entry's key, type and value; None if not one."""
    # The values come from the model reader's bounded decoder (a hostile
    # buffer can describe an exponentially large value); only the types are
    # read here, from the same references.
    from ..errors import ModelError
    from ..model.flex import _flex_value, _FlexBudget

    if len(raw) < 3:
        return None
    try:
        root = flexbuffers.GetRoot(raw)
        budget = _FlexBudget(16 * len(raw) + 1024)
        if root.IsMap:
            m = root.AsMap
            keys, values = m.Keys, m.Values
            if len(m) * 2 > len(raw) or len(keys) != len(m):
                return None
            entries = [
                {
                    "key": _flex_value(keys[i], budget, 1, len(raw)),
                    "type": _flex_type(values[i]),
                    "value": _flex_value(values[i], budget, 1, len(raw)),
                }
                for i in range(len(m))
            ]
            return {"kind": "flexbuffer map", "entries": entries}
        if root.IsVector:
            v = root.AsVector
            if len(v) > len(raw):
                return None
            entries = [
                {"type": _flex_type(v[i]), "value": _flex_value(v[i], budget, 1, len(raw))} for i in range(len(v))
            ]
            return {"kind": "flexbuffer vector", "entries": entries}
    except (ModelError, Exception, RecursionError):  # noqa: BLE001 - not a flexbuffer: shown raw
        return None
    return None


def _raw(raw: bytes) -> dict:
    out = {"kind": "raw", "length": len(raw), "hex": raw.hex()}
    if len(raw) % 4 == 0:
        n = len(raw) // 4
        out["int32"] = list(struct.unpack(f"<{n}i", raw))
        out["float32"] = [float(f"{x:.7g}") for x in struct.unpack(f"<{n}f", raw)]
    return out


def describe_options(name: str, raw: bytes | None) -> dict:
    """One operator's custom options as facts: flexbuffer entries, a Flex op's NodeDef, or raw bytes.

    Parameters
    ----------
    name : str
        The custom op's name (``Flex...`` options are read as a NodeDef).
    raw : bytes or None
        Its ``custom_options``.

    Returns
    -------
    dict
        ``kind`` is ``"none"``, ``"flexbuffer map"``, ``"flexbuffer vector"``,
        ``"flex"`` (with ``tf_op``, ``node`` and ``attrs``: name -> kind and
        value) or ``"raw"`` (``length``, ``hex``, and ``int32`` / ``float32``
        readings when the length is a multiple of 4).
    """
    from ..errors import ModelError
    from ..model.nodedef import decode_flex_op, is_flex_op

    if not raw:
        return {"kind": "none"}
    if is_flex_op(name):
        try:
            node = decode_flex_op(raw)
        except ModelError as exc:
            return {**_raw(raw), "problem": str(exc)}
        return {
            "kind": "flex",
            "tf_op": node.op,
            "node": node.name,
            "attrs": {k: {"kind": kind, "value": value} for k, (kind, value) in node.attrs.items()},
        }
    return _flex_entries(raw) or _raw(raw)


# ------------------------------------------------------------------ runtime --


def _probe_model(codes) -> bytes:
    """A model with the given builtin ``(code, version)`` operator codes, one empty subgraph and no operators."""
    import flatbuffers

    from ..model.schema import (
        _PLACEHOLDER_FOR_GREATER_OP_CODES,
        FILE_IDENTIFIER,
        SCHEMA_VERSION,
    )

    b = flatbuffers.Builder(256)
    b.StartObject(0)
    buffers = _vector(b, [b.EndObject()])
    empty = _vector(b, [], ints=True)
    b.StartObject(5)
    for slot in range(4):
        b.PrependUOffsetTRelativeSlot(slot, empty, 0)
    subgraphs = _vector(b, [b.EndObject()])
    tables = []
    for code, version in codes:
        b.StartObject(4)
        b.PrependInt8Slot(0, min(code, _PLACEHOLDER_FOR_GREATER_OP_CODES), 0)
        b.PrependInt32Slot(2, version, 1)
        b.PrependInt32Slot(3, code, 0)
        tables.append(b.EndObject())
    opcodes = _vector(b, tables)
    b.StartObject(8)
    b.PrependUint32Slot(0, SCHEMA_VERSION, 0)
    b.PrependUOffsetTRelativeSlot(1, opcodes, 0)
    b.PrependUOffsetTRelativeSlot(2, subgraphs, 0)
    b.PrependUOffsetTRelativeSlot(4, buffers, 0)
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def _vector(b, items, ints=False) -> int:
    b.StartVector(4, len(items), 4)
    for x in reversed(items):
        b.PrependInt32(x) if ints else b.PrependUOffsetTRelative(x)
    return b.EndVector()


def _runtime_has(codes) -> str | None:
    """None if the runtime resolves every builtin ``(code, version)``, else TFLite's message."""
    from ..errors import OpaqueOpsError
    from ..interpreter.core import Interpreter

    try:
        Interpreter(model_content=_probe_model(codes), use_xnnpack=False)
    except OpaqueOpsError as exc:
        return str(exc)
    return None


def _missing_builtins(builtins, runtime_version: str) -> dict:
    """``{(code, version): problem}`` for the builtins the loaded runtime lacks."""
    wanted = sorted(builtins)
    if not wanted or _runtime_has(wanted) is None:
        return {}  # the usual case: one probe
    problems = {}
    for code, version in wanted:
        message = _runtime_has([(code, version)])
        if message is None:
            continue
        name = builtins[(code, version)]
        if "out of range" in message:
            problems[(code, version)] = (
                f"this runtime (TFLite {runtime_version}) does not know builtin code {code}: the model was "
                "made for a newer TFLite; use a runtime that has it (OPAQUE_OPS_TFLITE_LIB)"
            )
        elif version > 1 and _runtime_has([(code, 1)]) is None:
            problems[(code, version)] = (
                f"this runtime (TFLite {runtime_version}) has {name} but not version {version}: the model was "
                "made for a newer TFLite; use a runtime that has it (OPAQUE_OPS_TFLITE_LIB)"
            )
        else:
            problems[(code, version)] = f"this runtime (TFLite {runtime_version}) was built without a kernel for {name}"
    return problems


def _runtime_facts() -> tuple[dict, object]:
    from ..errors import OpaqueOpsError
    from ..runtime import runtime_info

    try:
        rt = runtime_info()
    except OpaqueOpsError as exc:
        return {"loaded": False, "problem": str(exc)}, None
    return {
        "loaded": True,
        "version": rt.version,
        "path": rt.path,
        "found_by": rt.found_by,
        "known_build": rt.known_build,
        "build": rt.build,
        "custom_ops": rt.custom_ops,
        "custom_ops_problem": rt.custom_ops_problem,
        "xnnpack": rt.xnnpack,
        "fast_calls": _fast_calls_facts(),
    }, rt


def _fast_calls_facts() -> dict:
    """Whether set_tensor/invoke/get_tensor run in C here, and the module's file or why not."""
    from ..errors import OpaqueOpsError
    from ..interpreter import fast_calls

    try:
        used, where = fast_calls.status()
    except OpaqueOpsError as exc:
        return {"in_use": False, "where": str(exc)}
    return {"in_use": used, "where": where}


# ---------------------------------------------------------------- providers --


def resolve_custom_ops(custom_ops, libraries) -> dict:
    """Who provides each custom op: the one answer ``inspect`` and ``doctor`` both give.

    Parameters
    ----------
    custom_ops : iterable of (str, int)
        The model's custom ops, ``(name, version)``.
    libraries : list of (str, OpLibrary)
        Each ``--ops`` value with the library it loaded.

    Returns
    -------
    dict
        ``(name, version)`` -> ``{"provider": ..., "by": spec or None,
        "other_versions": [...]}``; the provider is :data:`LIBRARY`,
        :data:`BUNDLED` (a ``kernels:NAME`` given with ``--ops``),
        :data:`RUNTIME` or :data:`NOBODY`.
    """
    from ..model.runtime_ops import RUNTIME_CUSTOM_OPS

    out = {}
    for name, version in custom_ops:
        spec = next((s for s, lib in libraries if (name, version) in lib.ops), None)
        if spec is not None:
            provider = BUNDLED if spec.startswith("kernels:") else LIBRARY
        elif name in RUNTIME_CUSTOM_OPS:
            provider = RUNTIME
        else:
            provider = NOBODY
        others = sorted({v for _, lib in libraries for n, v in lib.ops if n == name and v != version})
        out[(name, version)] = {"provider": provider, "by": spec, "other_versions": others}
    return out


def _package_name(model: Path) -> str:
    name = re.sub(r"[^0-9a-zA-Z]+", "_", model.stem).strip("_").lower() or "model"
    return ("ops_" + name if name[0].isdigit() else name) + "_ops"


def scaffold_command(model: Path, ops) -> str:
    """The exact ``opaque-ops scaffold`` command that writes a kernel project for ``ops``."""
    name = _package_name(model)
    parts = ["opaque-ops", "scaffold", str(model), "-o", name, "--name", name]
    for op in ops:
        parts += ["--op", op]
    # Op names come from the model: quoted so that the line pastes as it is
    # whatever they hold, and with no control character on the screen.
    return shell_command(parts)


# -------------------------------------------------------------------- facts --


def _xnnpack(info, rt) -> dict:
    from ..interpreter.xnnpack import XNNPACK_CUSTOM_OPS

    total = taken = 0
    for sg in info.subgraphs:
        for op in sg.operators:
            total += 1
            if op.is_custom or op.op_name not in _XNNPACK_BUILTINS:
                continue
            tensors = [sg.tensors[t] for t in list(op.inputs) + list(op.outputs) if t >= 0]
            if all(
                t.type_name in _XNNPACK_TYPES and (t.data is not None or -1 not in (t.shape_signature or ()))
                for t in tensors
            ):
                taken += 1
    available = bool(rt is not None and rt.xnnpack)
    mediapipe = sorted({n for n, _ in info.custom_ops()} & XNNPACK_CUSTOM_OPS)
    return {
        "available": available,
        "nodes": taken if available else 0,
        "of": total,
        "estimate": True,
        "own_copies_unused": mediapipe,
    }


def _state(info) -> dict:
    variables, resources = [], []
    for sg in info.subgraphs:
        for t in sg.tensors:
            if t.is_variable:
                variables.append(
                    {
                        "subgraph": sg.index,
                        "tensor": t.index,
                        "name": t.name,
                        "shape": list(t.shape),
                        "type": t.type_name,
                    }
                )
        for op in sg.operators:
            if op.op_name == "VAR_HANDLE" and not op.is_custom:
                opts = op.builtin_options or {}
                resources.append(
                    {
                        "subgraph": sg.index,
                        "operator": op.index,
                        "shared_name": opts.get("shared_name") or opts.get("container") or "",
                    }
                )
    return {"variable_tensors": variables, "resource_variables": resources}


def _dynamic(info) -> list:
    out = []
    for sg in info.subgraphs:
        for t in sg.tensors:
            if t.shape_signature and -1 in t.shape_signature:
                out.append(
                    {
                        "subgraph": sg.index,
                        "tensor": t.index,
                        "name": t.name,
                        "shape_signature": list(t.shape_signature),
                        "input": t.index in sg.inputs,
                    }
                )
    return out


def _tensor_facts(sg, idxs) -> list:
    out = []
    for i in idxs:
        t = sg.tensors[i]
        out.append(
            {
                "name": t.name,
                "tensor": i,
                "type": t.dtype.name if t.dtype is not None else t.type_name,
                "shape": list(t.shape_signature) if t.shape_signature else list(t.shape),
            }
        )
    return out


def gather(model, ops=(), libraries=None) -> dict:
    """The doctor's facts about a model, as a plain (JSON-able) dict.

    Parameters
    ----------
    model : path-like
        The ``.tflite`` file.
    ops : sequence of str
        The ``--ops`` values (``.so``, ``.c`` or ``kernels:NAME``).
    libraries : list of (str, OpLibrary), optional
        The same, already loaded (``inspect`` passes its own).

    Returns
    -------
    dict
        ``model``, ``runtime``, ``libraries``, ``inputs``, ``outputs``,
        ``operators`` (one entry per op and version: kind, count, provider,
        problem, options, next step), ``xnnpack``, ``state``, ``dynamic``,
        ``signatures``, ``checks`` and ``verdict`` (``runs``, ``exit``,
        ``reasons``).
    """
    from ..errors import ModelError
    from ..kernels import provided_ops
    from ..model import check_model
    from .common import load_libs, read_model_file

    path, info = read_model_file(model)
    if libraries is None:
        libraries = list(zip(ops, load_libs(ops)))
    runtime, rt = _runtime_facts()
    sg0 = info.subgraphs[0] if info.subgraphs else None
    facts: dict = {
        "model": {
            "path": str(path),
            "bytes": path.stat().st_size,
            "schema_version": info.version,
            "subgraphs": len(info.subgraphs),
            "description": info.description or "",
        },
        "runtime": runtime,
        "libraries": [{"spec": s, "ops": sorted(f"{n} v{v}" for n, v in lib.ops)} for s, lib in libraries],
        "inputs": _tensor_facts(sg0, sg0.inputs) if sg0 else [],
        "outputs": _tensor_facts(sg0, sg0.outputs) if sg0 else [],
    }

    # Operators, one entry per (kind, name, version), in first-use order.
    entries: dict = {}
    builtins: dict = {}
    for sg in info.subgraphs:
        for op in sg.operators:
            key = (op.is_custom, op.op_name, op.version)
            e = entries.get(key)
            if e is None:
                e = entries[key] = {
                    "name": op.op_name,
                    "kind": "custom" if op.is_custom else "builtin",
                    "code": op.builtin_code,
                    "version": op.version,
                    "count": 0,
                    "provider": RUNTIME,
                    "by": None,
                    "problem": None,
                    "next_step": None,
                    "options": [],
                    "_raw": set(),
                }
                if not op.is_custom:
                    builtins[(op.builtin_code, op.version)] = op.op_name
            e["count"] += 1
            if op.is_custom and op.custom_options not in e["_raw"] and len(e["_raw"]) < 64:
                e["_raw"].add(op.custom_options)
                e["options"].append(describe_options(op.op_name, op.custom_options))
    lacking = _missing_builtins(builtins, runtime["version"]) if rt is not None else {}
    resolved = resolve_custom_ops([(n, v) for (c, n, v) in entries if c], libraries)
    bundled = provided_ops()
    missing_names = []
    for (custom, name, version), e in entries.items():
        del e["_raw"]
        if not custom:
            problem = lacking.get((e["code"], version))
            if problem:
                e["provider"], e["problem"] = NOBODY, problem
            continue
        r = resolved[(name, version)]
        e["provider"], e["by"] = r["provider"], r["by"]
        if r["provider"] == NOBODY:
            e["problem"] = "no kernel for it" + (
                f" (the libraries given have it as v{', v'.join(map(str, r['other_versions']))})"
                if r["other_versions"]
                else ""
            )
            if (name, version) in bundled:
                e["next_step"] = f"--ops kernels:{bundled[(name, version)]}"
            else:
                e["next_step"] = scaffold_command(path, [name])
                missing_names.append(name)
        elif r["provider"] != RUNTIME and rt is not None and not rt.custom_ops:
            e["problem"] = f"this runtime cannot run custom kernels: {rt.custom_ops_problem}"
    facts["operators"] = list(entries.values())
    facts["scaffold_all"] = scaffold_command(path, missing_names) if len(missing_names) > 1 else None
    from ..kernels import MEDIAPIPE

    files = {
        bundled[(e["name"], e["version"])]
        for e in entries.values()
        if e["next_step"] and e["next_step"].startswith("--ops kernels:")
    }
    # Several of MediaPipe's ops: the bundle is one --ops.
    facts["bundle_all"] = "--ops kernels:mediapipe" if len(files) > 1 and files <= set(MEDIAPIPE) else None
    facts["xnnpack"] = _xnnpack(info, rt)
    facts["state"] = _state(info)
    facts["dynamic"] = _dynamic(info)
    facts["signatures"] = [
        {"key": s.key, "subgraph": s.subgraph_index, "inputs": sorted(s.inputs), "outputs": sorted(s.outputs)}
        for s in info.signatures
    ]
    registered = {n for _, lib in libraries for n, _ in lib.ops}
    try:
        check_model(info, registered=registered)
        facts["checks"] = {"passed": True, "refused": None}
    except ModelError as exc:
        facts["checks"] = {"passed": False, "refused": str(exc)}

    reasons = []
    if rt is None:
        reasons.append(f"the TFLite runtime cannot be loaded: {runtime['problem']}")
    for e in facts["operators"]:
        if e["problem"]:
            reasons.append(f"{e['kind']} op {e['name']} v{e['version']}: {e['problem']}")
    if not facts["checks"]["passed"]:
        reasons.append(f"the model checks refuse it: {facts['checks']['refused']}")
    facts["verdict"] = {"runs": not reasons, "exit": CHECK_OK if not reasons else CHECK_REFUSED, "reasons": reasons}
    return _jsonable(facts)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": len(v), "hex": bytes(v).hex()}
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


# --------------------------------------------------------------------- text --


# The facts' stand-ins for the floats JSON has no numbers for (see _jsonable).
_FLOAT_WORDS = frozenset({"nan", "inf", "-inf"})


def _value(v, limit=_SHOW_VALUES, floats=False) -> str:
    """One value as the text shows it; ``floats``: the value is known to be a float or floats.

    Only then is a "nan", "inf" or "-inf" string the facts' way of writing
    that float, shown bare; in a value of any other type it is the string.
    """
    if isinstance(v, list):
        items = ", ".join(_value(x, limit, floats) for x in v[:limit])
        return f"[{items}{', ...' if len(v) > limit else ''}]" + (f" ({len(v)} values)" if len(v) > limit else "")
    if isinstance(v, dict) and set(v) == {"bytes", "hex"}:
        return f"<{v['bytes']} bytes {v['hex'][:32]}{'...' if v['bytes'] > 16 else ''}>"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{shown(k)}: {_value(x, limit)}" for k, x in v.items()) + "}"
    if isinstance(v, str) and floats and v in _FLOAT_WORDS:
        return v
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _options_lines(o: dict) -> list[str]:
    kind = o["kind"]
    if kind == "none":
        return ["options: none"]
    if kind in ("flexbuffer map", "flexbuffer vector"):
        lines = [f"options: {kind}, {len(o['entries'])} entr{'y' if len(o['entries']) == 1 else 'ies'}"]
        for i, e in enumerate(o["entries"]):
            label = shown(e["key"]) if "key" in e else f"[{i}]"
            # (type "float", "vector of float" or "vector of float [3]")
            floats = e["type"].split(" [")[0] in ("float", "vector of float")
            lines.append(f"  {label}: {e['type']} = {_value(e['value'], floats=floats)}")
        return lines
    if kind == "flex":
        lines = [
            f"options: Flex op, TensorFlow op {shown(o['tf_op'])}"
            + (f" (node {o['node']!r})" if o["node"] else "")
            + f", {len(o['attrs'])} attribute(s)"
        ]
        for k, a in o["attrs"].items():
            # A type attribute reads as TensorFlow writes it: Tcomplex: complex64.
            floats = a["kind"] in ("float", "list(float)")
            text = a["value"] if a["kind"] == "type" else f"{a['kind']} = {_value(a['value'], floats=floats)}"
            lines.append(f"  {shown(k)}: {text}")
        return lines
    hexs = o["hex"]
    words = " ".join(hexs[i : i + 8] for i in range(0, min(len(hexs), 8 * _SHOW_VALUES), 8))
    lines = [f"options: raw {o['length']} bytes: {words}{' ...' if o['length'] > 4 * _SHOW_VALUES else ''}"]
    if "int32" in o:
        lines.append(f"  as int32: {_value(o['int32'])}")
        # NaN and infinities are strings in the facts (JSON has no such numbers); shown bare.
        floats = o["float32"][:_SHOW_VALUES]
        more = ", ..." if len(o["float32"]) > _SHOW_VALUES else ""
        lines.append(f"  as float32: [{', '.join(str(x) for x in floats)}{more}]")
    if o.get("problem"):
        lines.append(f"  (not a Flex op's [op name, NodeDef]: {o['problem']})")
    return lines


def render(facts: dict) -> str:
    """The doctor's report as text, from :func:`gather`'s facts."""
    out = []
    m = facts["model"]
    out.append(
        f"model: {shown(m['path'])} ({m['bytes']} bytes, schema v{m['schema_version']}, {m['subgraphs']} subgraph(s))"
    )
    if m["description"]:
        out.append(f"description: {shown(m['description'])}")
    r = facts["runtime"]
    if r["loaded"]:
        known = f"known build: {r['build']}" if r["known_build"] else "NOT a known build"
        out.append(
            f"runtime: TFLite {r['version']} at {r['path']} (found by {r['found_by']}; {known}; "
            f"XNNPACK {'yes' if r['xnnpack'] else 'no'}; custom kernels "
            f"{'yes' if r['custom_ops'] else 'NO: ' + str(r['custom_ops_problem'])})"
        )
        fast = r["fast_calls"]
        out.append(
            f"fast calls: in use ({fast['where']}): set_tensor/invoke/get_tensor, the model reader and the "
            "allocation's planned-tensor reads run in C"
            if fast["in_use"]
            else "fast calls: not in use, set_tensor/invoke/get_tensor, the model reader and the planned-tensor "
            f"reads run in Python ({fast['where']})"
        )
    else:
        out.append(f"runtime: NOT LOADED: {r['problem']}")
    for lib in facts["libraries"]:
        out.append(f"--ops {shown(lib['spec'])}: {', '.join(shown(n) for n in lib['ops']) or 'no ops'}")
    for title in ("inputs", "outputs"):
        out.append(f"{title}:" + ("" if facts[title] else " none"))
        for t in facts[title]:
            out.append(f"  {shown(t['name'])}  {t['shape']}  {t['type']}  (tensor {t['tensor']})")
    ops = facts["operators"]
    out.append(f"operators: {sum(e['count'] for e in ops)} nodes of {len(ops)} kinds")
    for e in ops:
        who = e["provider"] + (f" ({e['by']})" if e["by"] else "")
        if e["problem"]:
            who = ("MISSING: " if e["kind"] == "custom" else "NOT IN THIS RUNTIME: ") + e["problem"]
        code = f" (code {e['code']})" if e["kind"] == "builtin" and e["problem"] else ""
        out.append(f"  {e['kind']:7s} {shown(e['name'])} v{e['version']}{code}  x{e['count']}  {who}")
        for o in e["options"][:_SHOW_OPTION_SETS]:
            out += ["      " + line for line in _options_lines(o)]
        if len(e["options"]) > _SHOW_OPTION_SETS:
            out.append(f"      ... and {len(e['options']) - _SHOW_OPTION_SETS} more option sets (--json has all)")
        if e["next_step"]:
            out.append(f"      next step: {e['next_step']}")
    if facts["bundle_all"]:
        out.append(f"  all the missing MediaPipe ops at once: {facts['bundle_all']}")
    if facts["scaffold_all"]:
        out.append(f"  all missing ops in one project: {facts['scaffold_all']}")
    x = facts["xnnpack"]
    if x["available"]:
        line = (
            f"xnnpack: takes up to {x['nodes']} of {x['of']} nodes (by op and tensor type; the delegate "
            "checks each node's parameters when the interpreter is created)"
        )
    else:
        line = f"xnnpack: not available in this runtime; TFLite's own kernels run all {x['of']} nodes"
    out.append(line)
    if x["own_copies_unused"]:
        out.append(
            f"  XNNPACK's own copies of {', '.join(x['own_copies_unused'])} run only with "
            "use_xnnpack=True and no kernel given; by default they need a kernel (kernels:mediapipe)"
        )
    s = facts["state"]
    if s["variable_tensors"] or s["resource_variables"]:
        out.append(
            f"state: {len(s['variable_tensors'])} variable tensor(s), "
            f"{len(s['resource_variables'])} resource variable(s) (VAR_HANDLE): the model keeps state "
            "between invoke() calls"
        )
        for v in s["variable_tensors"][:_SHOW_VALUES]:
            out.append(
                f"  {shown(v['name'])}  {v['shape']}  {v['type']}  (subgraph {v['subgraph']} tensor {v['tensor']})"
            )
    else:
        out.append("state: none (no variables: each invoke() is independent)")
    d = facts["dynamic"]
    if d:
        out.append(f"dynamic shapes: {len(d)} tensor(s) with -1 in shape_signature")
        for t in d[:_SHOW_VALUES]:
            out.append(
                f"  {shown(t['name'])}  {t['shape_signature']}"
                + ("  (input: resize it before allocating)" if t["input"] else "")
            )
    else:
        out.append("dynamic shapes: none")
    if facts["signatures"]:
        out.append("signatures:")
        for sig in facts["signatures"]:
            out.append(
                f"  {shown(sig['key'])} (subgraph {sig['subgraph']}): inputs {sig['inputs']} -> outputs {sig['outputs']}"
            )
    else:
        out.append("signatures: none")
    c = facts["checks"]
    out.append("checks: passed" if c["passed"] else f"checks: REFUSED: {c['refused']}")
    v = facts["verdict"]
    if v["runs"]:
        out.append(f"verdict: will run as given (exit {v['exit']})")
    else:
        out.append(f"verdict: will NOT run as given (exit {v['exit']}):")
        out += [f"  - {reason}" for reason in v["reasons"]]
    # The names above are shown(); this catches a model's strings inside
    # messages (a reason naming an op, a check's refusal) too.
    return terminal_safe("\n".join(out))


def cmd_doctor(args) -> int:
    """``opaque-ops doctor``: print the report (or its facts as JSON) and exit with its verdict."""
    from ..errors import OpaqueOpsError
    from .common import CliError

    try:
        facts = gather(args.model, args.ops)
    except (CliError, OpaqueOpsError, OSError, ValueError) as exc:
        if not args.json:
            raise
        # A program reading --json gets JSON whatever happened: the error,
        # as the verdict's reason (the message goes to stderr too).
        message = str(exc) or type(exc).__name__
        facts = {"model": str(args.model), "error": message}
        facts["verdict"] = {"runs": False, "exit": CHECK_REFUSED, "reasons": [message]}
        print(terminal_safe(f"{PROG}: error: {message}"), file=sys.stderr)
    print(json.dumps(facts, indent=2) if args.json else render(facts))
    return facts["verdict"]["exit"]


def add_parser(sub, ops_help: str) -> None:
    """Register ``doctor`` on the ``opaque-ops`` subcommand parser."""
    p = sub.add_parser(
        "doctor",
        help="will this model run here, and if not, what is needed "
        "(exit status 0: it would run as given, 1: it would not)",
    )
    p.add_argument("model")
    p.add_argument("--ops", action="append", default=[], metavar="LIB", help=ops_help)
    p.add_argument("--json", action="store_true", help="print the report's facts as JSON")
    p.set_defaults(func=cmd_doctor)
