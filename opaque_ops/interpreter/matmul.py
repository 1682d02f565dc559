"""BATCH_MATMUL by a constant matrix, run as FULLY_CONNECTED in the private model copy.

TFLite 2.17.1's XNNPACK delegate runs a float BATCH_MATMUL whose second
operand is a constant [K, N] matrix several times slower than the same
product as FULLY_CONNECTED (openWakeWord's melspectrogram: 7.7 µs against
0.7 µs for [1,1,5,257] x [257,32]; ``bench/README.md``, "Fifth pass").
``out = x @ B`` with ``B`` of shape [K, N] is exactly FULLY_CONNECTED with
``keep_num_dims=true`` on the weights ``B.T`` ([N, K]) and no bias: both give
``x.shape[:-1] + [N]`` and the same products, summed in another order.

:func:`rewrite_model` builds that form in the bytes handed to
``TfLiteModelCreate``; the model the caller sees (``Interpreter._info``,
read from the original bytes) is unchanged.  The transposed weights become a
new tensor after the subgraph's own tensors (``model_copy.py``: how the copy
is written, and why every index the caller can name keeps its meaning).

Not covered: a left operand whose shape is known only while the model runs
(a dynamic tensor) is not checked by the allocation-time shape rules, so if
it became rank 1 there, FULLY_CONNECTED would compute where BATCH_MATMUL
refuses.
"""

from __future__ import annotations

import numpy as np

from .model_copy import FLOAT32, NewOperator, NewTensor, Opened, Plan, Reader, main_tensor_count, open_model, write_copy

# BuiltinOperator codes (schema.fbs).
_FULLY_CONNECTED = 9
_BATCH_MATMUL = 126
# BuiltinOptions union tags (schema.fbs).
_FULLY_CONNECTED_OPTIONS = 8
_BATCH_MATMUL_OPTIONS = 101

__all__ = ["main_tensor_count", "rewrite_model", "worth_it"]

# Which runtimes run the FULLY_CONNECTED form faster, by (major, minor) and
# whether XNNPACK is applied.  Measured per node, [1,1,5,257] x [257,32]
# (invoke only, best of 15 rounds; bench/README.md "Fifth pass"):
#   2.17 XNNPACK:     BATCH_MATMUL 7.7 µs, FULLY_CONNECTED 0.74 µs -> rewrite
#   2.17 no XNNPACK:  BATCH_MATMUL 2.2 µs, FULLY_CONNECTED 2.9 µs  -> leave
#   2.23 XNNPACK:     BATCH_MATMUL 0.68 µs, FULLY_CONNECTED 0.66 µs -> leave (no gain)
#   2.23 no XNNPACK:  BATCH_MATMUL 15.0 µs, FULLY_CONNECTED 1.7 µs -> leave, although faster:
#     without XNNPACK, TFLite's BATCH_MATMUL kernel refuses a left operand of
#     rank 6 (the allocation checks then report a wrong planned output shape)
#     where FULLY_CONNECTED computes it, so a resize to rank 6 would behave
#     differently.  With XNNPACK both forms compute rank 6, and both refuse
#     rank 0-1 (refused by the shape checks before either runs: model/shapes.py).
# Other versions were not measured and are left alone.
_FASTER = {((2, 17), True)}


def worth_it(version: str, xnnpack: bool, delegates: int = 0) -> bool:
    """Whether :func:`rewrite_model` makes the model faster on this runtime.

    Parameters
    ----------
    version : str
        ``TfLiteVersion()`` of the loaded runtime, e.g. ``"2.17.1"``.
    xnnpack : bool
        Whether the XNNPACK delegate is applied.
    delegates : int, optional
        How many of the caller's delegates are applied.  With any, nothing is
        rewritten: a delegate chooses its nodes by operator, and must see
        the model's own.

    Returns
    -------
    bool
    """
    if delegates:
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return ((major, minor), bool(xnnpack)) in _FASTER


def _float_constant(r: Reader, tensor: int, buffers: list[int]) -> tuple[int, int] | None:
    """``(K, N)`` if ``tensor`` is a plain float32 constant of rank 2 with its data in the flatbuffer."""
    if r.scalar(tensor, 1, "<B") != FLOAT32 or r.scalar(tensor, 5, "<B"):  # type, is_variable
        return None
    if r.field(tensor, 6):  # sparsity
        return None
    if not _unquantized(r, tensor):
        return None
    shape = r.ints(tensor, 0)
    if len(shape) != 2 or min(shape) < 1:
        return None
    sig = r.ints(tensor, 7)  # shape_signature
    if sig and sig != shape:
        return None
    buf = r.scalar(tensor, 2, "<I")
    if not 0 < buf < len(buffers):
        return None
    n, _ = r.vector(buffers[buf], 0)
    if n != shape[0] * shape[1] * 4:
        return None
    return shape[0], shape[1]


def _unquantized(r: Reader, tensor: int) -> bool:
    q = r.ref(tensor, 4)  # QuantizationParameters
    if not q:
        return True
    # min, max, scale, zero_point empty; no details.
    return all(r.vector(q, s)[0] == 0 for s in range(4)) and not r.scalar(q, 4, "<B")


def _candidates(r: Reader, sg: int, bmm_codes: set[int], buffers: list[int]) -> list[tuple[int, int, int, int]]:
    """``(operator index, lhs, constant, output)`` of each BATCH_MATMUL of subgraph ``sg`` to rewrite."""
    tensors = r.tables(sg, 0)
    ops = r.tables(sg, 3)
    sg_io = set(r.ints(sg, 1)) | set(r.ints(sg, 2))
    # How many times each tensor is read, and which are written, in this subgraph.
    reads: dict[int, int] = {}
    written: set[int] = set()
    op_io = []
    for op in ops:
        ins, outs = r.ints(op, 1), r.ints(op, 2)
        op_io.append((ins, outs))
        for t in ins:
            reads[t] = reads.get(t, 0) + 1
        written.update(outs)
        # An op's intermediates are tensors it uses too.
        for t in r.ints(op, 7):
            reads[t] = reads.get(t, 0) + 1
    found = []
    for i, op in enumerate(ops):
        if r.scalar(op, 0, "<I") not in bmm_codes:
            continue
        # Only opcode_index, inputs, outputs and the options: no custom
        # options, mutating inputs, intermediates or newer fields.
        if not r.present(op) <= {0, 1, 2, 3, 4}:
            continue
        ins, outs = op_io[i]
        if len(ins) != 2 or len(outs) != 1 or min(ins + outs) < 0 or max(ins + outs) >= len(tensors):
            continue
        kind = r.scalar(op, 3, "<B")
        if kind not in (0, _BATCH_MATMUL_OPTIONS):
            continue
        opts = r.ref(op, 4)
        if opts and any(r.scalar(opts, s, "<B") for s in range(3)):  # adj_x, adj_y, asymmetric_quantize_inputs
            continue
        a, b = ins
        (y,) = outs
        if a == b or b in sg_io or b in written or reads.get(b) != 1:
            continue
        kn = _float_constant(r, tensors[b], buffers)
        if kn is None:
            continue
        ta, ty = tensors[a], tensors[y]
        if r.scalar(ta, 1, "<B") != FLOAT32 or r.scalar(ty, 1, "<B") != FLOAT32:
            continue
        # The left operand's rank and depth must be what BATCH_MATMUL accepts
        # (2..5, K) and fixed: a resize that changed them would make the two
        # ops disagree on what is an error.  So it is not an input of the
        # subgraph (the one tensor a caller resizes), and its stored shape
        # and signature say rank 2..5 and depth K.
        shape_a, sig_a = r.ints(ta, 0), r.ints(ta, 7)
        if a in sg_io or not 2 <= len(shape_a) <= 5 or shape_a[-1] != kn[0]:
            continue
        if sig_a and (len(sig_a) != len(shape_a) or sig_a[-1] != kn[0]):
            continue
        if r.field(ta, 6) or not _unquantized(r, ta) or not _unquantized(r, ty):
            continue
        found.append((i, a, b, y))
    return found


def rewrite_model(data: bytes) -> bytes:
    """``data`` with every qualifying BATCH_MATMUL replaced by FULLY_CONNECTED.

    A BATCH_MATMUL qualifies when it is exactly ``x @ B``: float32, no
    ``adj_x``/``adj_y``/``asymmetric_quantize_inputs`` and no other operator
    fields; ``B`` a rank-2 float32 constant stored in the flatbuffer,
    unquantized, dense, read by this operator only and by no subgraph
    input or output; ``x`` not a subgraph input, of stored rank 2 to 5 and
    depth K.  Everything else, and every model whose buffers are stored
    outside the flatbuffer (``Buffer.offset``), is returned as it was.

    Parameters
    ----------
    data : bytes
        A model that :func:`~opaque_ops.model.read_model` accepted.

    Returns
    -------
    bytes
        ``data`` itself when nothing qualifies, or the rewritten copy.
    """
    m = open_model(data)
    if m is None:
        return data
    bmm_codes = m.builtin_codes(_BATCH_MATMUL)
    if not bmm_codes:
        return data
    plans = {}
    for s, sg in enumerate(m.subgraphs):
        if not m.copyable(s):
            continue
        found = _candidates(m.reader, sg, bmm_codes, m.buffers)
        if found:
            plans[s] = _plan(m, data, sg, found)
    if not plans:
        return data
    return write_copy(m, data, plans, _FULLY_CONNECTED)


def _plan(m: Opened, data: bytes, sg: int, found) -> Plan:
    """Each BATCH_MATMUL of ``found`` as FULLY_CONNECTED(x, B.T) with ``keep_num_dims``, B.T a new tensor."""
    r = m.reader
    tensors = r.tables(sg, 0)
    new_tensors, operators = [], {}
    for i, a, b, y in found:
        tb = tensors[b]
        k, n = r.ints(tb, 0)
        bp = r.vector(m.buffers[r.scalar(tb, 2, "<I")], 0)[1]
        w = np.frombuffer(data, dtype="<f4", count=k * n, offset=bp).reshape(k, n)
        name_pos = r.ref(tb, 3)
        name = bytes(data[name_pos + 4 : name_pos + 4 + r.u32(name_pos)]) if name_pos else b""
        weight = len(tensors) + len(new_tensors)
        new_tensors.append(
            NewTensor((n, k), FLOAT32, np.ascontiguousarray(w.T).tobytes(), name + b"/transposed@opaque_ops")
        )
        # FullyConnectedOptions.keep_num_dims (slot 2); no bias (-1).
        operators[i] = NewOperator((a, weight, -1), (y,), _FULLY_CONNECTED_OPTIONS, ((2, "u8", 1),))
    return Plan(tuple(new_tensors), operators)
