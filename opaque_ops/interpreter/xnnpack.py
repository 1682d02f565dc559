"""XNNPACK for the builtins, registered kernels for the custom ops.

TFLite's XNNPACK delegate carries its own copies of three MediaPipe ops and
takes every node whose *registration* is called one of those names: it
compares ``registration->custom_name`` with ``strcmp`` while choosing nodes
(``tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc``).  Registering a
kernel under the model's op name, as ``TfLiteInterpreterOptionsAddOperator``
does, therefore hands the node to XNNPACK, never to the kernel.

So for those ops the interpreter is built from a private copy of the model in
which the op code's name is replaced by an alias XNNPACK does not know
(:func:`alias_model`), and the kernel is registered under that alias
(``TfLiteInterpreterOptionsAddCustomOp`` with a registration that points at
the kernel's ``TfLiteOperator``; see ``NativeInterpreter``).  XNNPACK then
takes every builtin it supports and leaves the custom node to the kernel.
Only the op code's pointer to its name moves: the alias string is appended to
the copy, so nothing else in the model (a tensor that happens to share the
string, say) changes.  Messages from TFLite name the alias; the interpreter's
error sink puts the real name back (:func:`real_names`).

Why not a custom op resolver (``TfLiteInterpreterOptionsSetOpResolver*``)?  A
resolver set that way replaces TFLite's builtin resolver entirely, and the C
API offers no way to look up a builtin kernel to hand back for the builtins.
"""

from __future__ import annotations

import struct

from ..errors import ModelError
from ..model.cache import xnnpack_hazard

# Custom ops the XNNPACK delegate implements itself and claims by name.
XNNPACK_CUSTOM_OPS = frozenset({"Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D"})
_ARGMAX_PAIR = ("MaxPoolingWithArgmax2D", "MaxUnpooling2D")

# Appended to the op name; no MediaPipe or TF op name contains "@".
ALIAS_SUFFIX = "@opaque_ops"


def plan(info, registered_names, use_xnnpack, runtime) -> tuple[bool, dict[str, str]]:
    """Decide whether XNNPACK is applied and which ops hide from it.

    Parameters are those of :func:`hidden_ops`, plus the loaded ``Runtime``:
    a TFLite C library built without XNNPACK (the armv7 one) gets neither,
    and one without ``TfLiteInterpreterOptionsAddCustomOp`` cannot register
    a kernel under an alias, so there the default keeps XNNPACK off for a
    model with one of XNNPACK's MediaPipe ops, as opaque_ops 0.1 did.

    A model whose value-dependent output (WHERE, UNIQUE, NON_MAX_SUPPRESSION)
    feeds another operator gets no XNNPACK by default, and ``True`` is
    refused for it (see :func:`~opaque_ops.model.checks.type_rules.value_dependent_feed`).

    Returns
    -------
    (bool, dict)
        Whether to add the XNNPACK delegate, and :func:`hidden_ops`' aliases.

    Raises
    ------
    ModelError
        ``use_xnnpack=True`` for a model XNNPACK would plan wrongly.
    """
    if use_xnnpack is not None:
        use_xnnpack = bool(use_xnnpack)
    if use_xnnpack is False or not runtime.has("TfLiteXNNPackDelegateCreate"):
        return False, {}
    feed = xnnpack_hazard(info)
    if feed is not None:
        # Shapes decided while the model runs, flowing into operators that
        # XNNPACK plans ahead (see value_dependent_feed): the default leaves
        # XNNPACK out, an explicit use_xnnpack=True is refused.
        if use_xnnpack is None:
            return False, {}
        sg, op, name, consumer, consumer_name = feed
        from ..model.checks import messages  # the rules' wording (imported on first use, see model.cache._rules)

        raise ModelError(
            f"{messages.operator_at(sg, op, name)} computes the shape of its output from the input values while "
            f"the model runs, and operator {consumer} ({consumer_name}) takes that output; the "
            "XNNPACK delegate plans such operators when the interpreter is created and does not survive "
            "the shape changing. Create the interpreter with use_xnnpack=False (or leave use_xnnpack "
            "unset: the default leaves XNNPACK out for this model)"
        )
    aliases = hidden_ops(info, registered_names, use_xnnpack)
    if aliases and not runtime.has("TfLiteInterpreterOptionsAddCustomOp"):
        return use_xnnpack is True, {}
    return True, aliases


def hidden_ops(info, registered_names, use_xnnpack) -> dict[str, str]:
    """Which of the model's custom ops to hide from XNNPACK, as ``{name: alias}``.

    Parameters
    ----------
    info : opaque_ops.model.ModelInfo
        The model.
    registered_names : set of str
        Names of the ops the caller registered kernels for.
    use_xnnpack : bool or None
        The Interpreter's argument.  ``False``: no XNNPACK, nothing to hide.
        ``None`` (the default): hide all three ops, so a registered kernel
        runs and an op without one is reported unresolved (XNNPACK's
        unpooling crashes on MediaPipe's float argmax indices, so it must
        never run by default).  ``True``: hide the ops that have a kernel;
        XNNPACK runs its own copy of the others, except that
        MaxPoolingWithArgmax2D and MaxUnpooling2D go to XNNPACK only together
        and only where its copies cannot crash (:func:`_argmax_pair_is_xnnpacks`).

    Returns
    -------
    dict
        Model op name -> alias, for :func:`alias_model` and the registration.
    """
    if use_xnnpack is False:
        return {}
    names = {n for n, _ in info.custom_ops()} & XNNPACK_CUSTOM_OPS
    if use_xnnpack is None:
        hide = names
    else:
        hide = names & set(registered_names)
        pair = names & set(_ARGMAX_PAIR)
        if pair and (pair & hide or not _argmax_pair_is_xnnpacks(info)):
            hide |= pair
    return {n: n + ALIAS_SUFFIX for n in sorted(hide)}


def _argmax_pair_is_xnnpacks(info) -> bool:
    """True if XNNPACK can run the model's argmax pooling and unpooling safely.

    Two ways XNNPACK's copies kill the process (seen with TFLite 2.17.1):

    - its pooling writes integer index bits into the float tensor and its
      unpooling reads them back as integers, so the two only agree with each
      other: its unpooling on any other indices (MediaPipe's float
      ``ky*fW + kx + 0.1``, or a model input) writes out of bounds;
    - its pooling writes both outputs even when nothing reads one of them,
      and TFLite gives such a tensor no memory (2.23 refuses the node instead).

    So: every MaxUnpooling2D reads its indices straight from a
    MaxPoolingWithArgmax2D, and every output of every MaxPoolingWithArgmax2D
    is read by some op or is a subgraph output.
    """
    for sg in info.subgraphs:
        used = {i for op in sg.operators for i in op.inputs} | set(sg.outputs)
        pool_indices = set()
        for op in sg.operators:
            if op.op_name == _ARGMAX_PAIR[0]:
                if len(op.outputs) < 2 or not set(op.outputs) <= used:
                    return False
                pool_indices.add(op.outputs[1])
        for op in sg.operators:
            if op.op_name == _ARGMAX_PAIR[1] and (len(op.inputs) < 2 or op.inputs[1] not in pool_indices):
                return False
    return True


def _custom_code_fields(buf) -> list[tuple[int, bytes]]:
    """``(position, name)`` of every OperatorCode.custom_code offset field in the model.

    Four flatbuffer reads by hand with ``struct``: the flatbuffers package's
    generic ``Table`` does the same walk about ten times slower (0.1 ms on
    the selfie model), which creating an interpreter would pay every time.
    Only called on bytes that ``read_model`` has bounds-checked.
    """
    u32, i32, u16 = struct.Struct("<I").unpack_from, struct.Struct("<i").unpack_from, struct.Struct("<H").unpack_from

    def field(table: int, slot: int) -> int:
        """Absolute position of ``slot``'s value in ``table``, or 0 if absent."""
        vtable = table - i32(buf, table)[0]
        entry = 4 + 2 * slot
        if entry + 2 > u16(buf, vtable)[0]:
            return 0
        off = u16(buf, vtable + entry)[0]
        return table + off if off else 0

    root = u32(buf, 0)[0]
    codes = field(root, 1)  # Model.operator_codes
    if not codes:
        return []
    vec = codes + u32(buf, codes)[0]
    out = []
    for i in range(u32(buf, vec)[0]):
        slot = vec + 4 + 4 * i
        code = slot + u32(buf, slot)[0]
        name_field = field(code, 1)  # OperatorCode.custom_code
        if name_field:
            s = name_field + u32(buf, name_field)[0]
            out.append((name_field, bytes(buf[s + 4 : s + 4 + u32(buf, s)[0]])))
    return out


def alias_model(data: bytes, aliases: dict[str, str]) -> bytes:
    """A copy of the model whose custom op codes in ``aliases`` are renamed.

    Each new name is appended to the end of the copy (4-byte aligned, as
    flatbuffers lays out strings) and the op code's ``custom_code`` offset
    is pointed at it.  Offsets are unsigned and forward, which an appended
    string always satisfies.  The rest of the model is untouched.  The copy
    is one ``bytes.join`` (0.02 ms for a 250 kB model; a zero-filled
    bytearray of that size costs 30 times more in fresh pages).
    """
    if not aliases:
        return data
    wanted = {k.encode(): v.encode() for k, v in aliases.items()}
    fields = sorted((pos, wanted[name]) for pos, name in _custom_code_fields(data) if name in wanted)
    tail = bytearray()
    placed: dict[bytes, int] = {}
    for _, alias in fields:
        if alias not in placed:
            tail += bytes(-(len(data) + len(tail)) % 4)
            placed[alias] = len(data) + len(tail)
            tail += struct.pack("<I", len(alias)) + alias + b"\0"
    view = memoryview(data)
    pieces, prev = [], 0
    for pos, alias in fields:
        pieces += [view[prev:pos], struct.pack("<I", placed[alias] - pos)]
        prev = pos + 4
    pieces += [view[prev:], tail]
    return b"".join(pieces)


def unresolved_hint(names) -> str:
    """A sentence for the unresolved-ops error when XNNPACK has a copy of a missing op."""
    known = sorted(set(names) & XNNPACK_CUSTOM_OPS)
    if not known:
        return ""
    return (
        f" opaque_ops.kernels.mediapipe() provides {', '.join(known)}; XNNPACK's own "
        "copy runs only with use_xnnpack=True and no kernel registered."
    )


def real_names(message: str, aliases: dict[str, str]) -> str:
    """``message`` with every alias replaced by the model's own op name."""
    for name, alias in aliases.items():
        if alias in message:
            message = message.replace(alias, name)
    return message
