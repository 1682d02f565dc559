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
new tensor placed *after* the model's own tensors and a new buffer after its
own buffers, so every tensor index the caller can name keeps its meaning,
and the original constant keeps its values.

Why a prefix: flatbuffer offsets are unsigned and point forward, so a grown
vector (the subgraph's tensors, the operators, the buffers) cannot be
appended after tables that it must point back to.  Placed *in front of* the
old bytes, the new tables can point forward into them; every old offset is
relative and stays valid when the old bytes move as one block.  So the copy
is: a new root, a new Model table (a copy of the old one with three fields
re-pointed), new vectors that point at the old tensors, operators, op codes
and buffers plus the new ones, then the old bytes unchanged.  The prefix's
length is a multiple of 64, so every old position keeps its alignment.

Not covered: a left operand whose shape is known only while the model runs
(a dynamic tensor) is not checked by the allocation-time shape rules, so if
it became rank 1 there, FULLY_CONNECTED would compute where BATCH_MATMUL
refuses.
"""

from __future__ import annotations

import struct

import numpy as np

# BuiltinOperator codes (schema.fbs).
_FULLY_CONNECTED = 9
_BATCH_MATMUL = 126
# BuiltinOptions union tags (schema.fbs).
_FULLY_CONNECTED_OPTIONS = 8
_BATCH_MATMUL_OPTIONS = 101
_FLOAT32 = 0  # TensorType
_PREFIX_ALIGN = 64

# Slots of the tables this module copies, and which of them hold offsets.
# A table with a slot beyond these (a later schema) is left alone: a copy
# could not re-point a field it does not know.
_MODEL_OFFSET_SLOTS = (1, 2, 3, 4, 5, 6, 7)  # slot 0: version (uint32)
_MODEL_SLOTS = 8
_SUBGRAPH_OFFSET_SLOTS = (0, 1, 2, 3, 4)  # slot 5: debug_metadata_index (int32)
_SUBGRAPH_SLOTS = 6

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


class _Reader:
    """Bounds-trusting little-endian reads of a flatbuffer that ``read_model`` already checked."""

    def __init__(self, buf):
        self.buf = buf

    def u8(self, p: int) -> int:
        return self.buf[p]

    def u16(self, p: int) -> int:
        return struct.unpack_from("<H", self.buf, p)[0]

    def u32(self, p: int) -> int:
        return struct.unpack_from("<I", self.buf, p)[0]

    def i32(self, p: int) -> int:
        return struct.unpack_from("<i", self.buf, p)[0]

    def vtable(self, table: int) -> int:
        return table - self.i32(table)

    def slots(self, table: int) -> int:
        """How many field slots the table's vtable has."""
        return (self.u16(self.vtable(table)) - 4) // 2

    def field(self, table: int, slot: int) -> int:
        """Absolute position of ``slot``'s value in ``table``, or 0 if absent."""
        if slot >= self.slots(table):
            return 0
        off = self.u16(self.vtable(table) + 4 + 2 * slot)
        return table + off if off else 0

    def present(self, table: int) -> set[int]:
        return {s for s in range(self.slots(table)) if self.field(table, s)}

    def ref(self, table: int, slot: int) -> int:
        """The position an offset field points at, or 0 if absent."""
        f = self.field(table, slot)
        return f + self.u32(f) if f else 0

    def scalar(self, table: int, slot: int, fmt: str, default=0):
        f = self.field(table, slot)
        return struct.unpack_from(fmt, self.buf, f)[0] if f else default

    def vector(self, table: int, slot: int) -> tuple[int, int]:
        """``(count, position of the first element)`` of a vector field; ``(0, 0)`` if absent."""
        v = self.ref(table, slot)
        return (self.u32(v), v + 4) if v else (0, 0)

    def ints(self, table: int, slot: int) -> list[int]:
        n, p = self.vector(table, slot)
        return list(struct.unpack_from(f"<{n}i", self.buf, p)) if n else []

    def tables(self, table: int, slot: int) -> list[int]:
        """Positions of the tables a vector of tables points at."""
        n, p = self.vector(table, slot)
        return [p + 4 * i + self.u32(p + 4 * i) for i in range(n)]


def _float_constant(r: _Reader, tensor: int, buffers: list[int]) -> tuple[int, int] | None:
    """``(K, N)`` if ``tensor`` is a plain float32 constant of rank 2 with its data in the flatbuffer."""
    if r.scalar(tensor, 1, "<B") != _FLOAT32 or r.scalar(tensor, 5, "<B"):  # type, is_variable
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


def _unquantized(r: _Reader, tensor: int) -> bool:
    q = r.ref(tensor, 4)  # QuantizationParameters
    if not q:
        return True
    # min, max, scale, zero_point empty; no details.
    return all(r.vector(q, s)[0] == 0 for s in range(4)) and not r.scalar(q, 4, "<B")


def _candidates(r: _Reader, sg: int, bmm_codes: set[int], buffers: list[int]) -> list[tuple[int, int, int, int]]:
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
        if r.scalar(ta, 1, "<B") != _FLOAT32 or r.scalar(ty, 1, "<B") != _FLOAT32:
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


class _Prefix:
    """The bytes placed in front of the old model, laid out front to back.

    Offsets are recorded as ``(field position, target)`` and written at the
    end, when the prefix's length (and so where the old bytes start) is known;
    a target is ``("new", position)`` or ``("old", position in the old bytes)``.
    """

    def __init__(self) -> None:
        self.out = bytearray(8)  # root offset, file identifier
        self.patches: list[tuple[int, str, int]] = []

    def align(self, n: int, phase: int = 0) -> None:
        self.out += bytes((phase - len(self.out)) % n)

    def put(self, data: bytes, align: int = 4) -> int:
        self.align(align)
        pos = len(self.out)
        self.out += data
        return pos

    def offset(self, field: int, where: str, target: int) -> None:
        self.patches.append((field, where, target))

    def table(self, fields: list[tuple[int, str, object]]) -> tuple[int, dict[int, int]]:
        """A new table of ``(slot, kind, value)`` fields; kinds "u8", "i8", "u32", "i32", "off".

        Returns the table's position and each slot's field position (an
        "off" field is written later through :meth:`offset`).
        """
        sizes = {"u8": 1, "i8": 1, "u32": 4, "i32": 4, "off": 4}
        fmts = {"u8": "<B", "i8": "<b", "u32": "<I", "i32": "<i", "off": "<I"}
        # Four-byte fields first, then the bytes: each is aligned.
        order = sorted(fields, key=lambda f: -sizes[f[1]])
        layout, size = {}, 4
        for slot, kind, _ in order:
            layout[slot] = size
            size += sizes[kind]
        size += -size % 4
        nslots = max(s for s, _, _ in fields) + 1
        vt = struct.pack(f"<{2 + nslots}H", 4 + 2 * nslots, size, *(layout.get(s, 0) for s in range(nslots)))
        self.align(4, phase=-len(vt) % 4)
        vpos = len(self.out)
        self.out += vt
        tpos = len(self.out)
        body = bytearray(size)
        struct.pack_into("<i", body, 0, tpos - vpos)
        for slot, kind, value in fields:
            if kind != "off":
                struct.pack_into(fmts[kind], body, layout[slot], value)
        self.out += body
        return tpos, {s: tpos + o for s, o in layout.items()}

    def copy_table(self, r: _Reader, table: int, offset_slots) -> tuple[int, dict[int, int]]:
        """A copy of an old table whose offset fields still point at the old targets."""
        vt = r.vtable(table)
        vsize, tsize = r.u16(vt), r.u16(vt + 2)
        self.align(2)
        vpos = len(self.out)
        self.out += bytes(r.buf[vt : vt + vsize])
        # Same position modulo 8 as the original, so each field keeps its alignment.
        self.align(8, phase=table % 8)
        tpos = len(self.out)
        self.out += bytes(r.buf[table : table + tsize])
        struct.pack_into("<i", self.out, tpos, tpos - vpos)
        fields = {}
        for s in range(r.slots(table)):
            f = r.field(table, s)
            if f:
                fields[s] = tpos + (f - table)
                if s in offset_slots:
                    self.offset(fields[s], "old", f + r.u32(f))
        return tpos, fields

    def repoint(self, field: int, where: str, target: int) -> None:
        self.patches = [p for p in self.patches if p[0] != field]
        self.offset(field, where, target)

    def table_vector(self, targets: list[tuple[str, int]]) -> tuple[int, list[int]]:
        """A vector of offsets to tables; returns its position and each slot's position."""
        pos = self.put(struct.pack("<I", len(targets)) + bytes(4 * len(targets)))
        slots = [pos + 4 + 4 * i for i in range(len(targets))]
        for slot, (where, target) in zip(slots, targets):
            if where != "later":
                self.offset(slot, where, target)
        return pos, slots

    def ints(self, values) -> int:
        return self.put(struct.pack(f"<I{len(values)}i", len(values), *values))

    def string(self, s: bytes) -> int:
        return self.put(struct.pack("<I", len(s)) + s + b"\0")

    def finish(self, old: bytes) -> bytes:
        self.align(_PREFIX_ALIGN)
        base = len(self.out)
        for field, where, target in self.patches:
            dest = target if where == "new" else base + target
            assert dest > field, "flatbuffer offsets point forward"
            struct.pack_into("<I", self.out, field, dest - field)
        return b"".join((self.out, old))


def main_tensor_count(data: bytes) -> int:
    """How many tensors subgraph 0 of ``data`` has (the caller's index range, before any rewrite).

    Parameters
    ----------
    data : bytes
        A model that :func:`~opaque_ops.model.read_model` accepted.

    Returns
    -------
    int
    """
    r = _Reader(data)
    return r.vector(r.tables(r.u32(0), 2)[0], 0)[0]


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
    r = _Reader(data)
    root = r.u32(0)
    if r.slots(root) > _MODEL_SLOTS:
        return data
    codes = r.tables(root, 1)
    bmm_codes = set()
    for i, code in enumerate(codes):
        builtin = max(r.scalar(code, 0, "<b"), r.scalar(code, 3, "<i"))
        if builtin == _BATCH_MATMUL and not r.field(code, 1):
            bmm_codes.add(i)
    if not bmm_codes:
        return data
    buffers = r.tables(root, 4)
    if any(r.field(b, 1) or r.field(b, 2) for b in buffers):  # Buffer.offset / Buffer.size: data after the flatbuffer
        return data
    subgraphs = r.tables(root, 2)
    plans = {}
    for s, sg in enumerate(subgraphs):
        if r.slots(sg) > _SUBGRAPH_SLOTS:
            continue
        found = _candidates(r, sg, bmm_codes, buffers)
        if found:
            plans[s] = found
    if not plans:
        return data
    return _write(r, data, root, codes, buffers, subgraphs, plans)


def _write(r: _Reader, data: bytes, root: int, codes, buffers, subgraphs, plans) -> bytes:
    p = _Prefix()
    p.out[4:8] = bytes(data[4:8])  # file identifier ("TFL3"), or whatever was there
    model, mfields = p.copy_table(r, root, _MODEL_OFFSET_SLOTS)
    p.offset(0, "new", model)
    fc_code = len(codes)
    new_buffers: list[bytes] = []
    # subgraphs vector: the touched ones are copies.
    sg_vec, sg_slots = p.table_vector([("later", 0) if s in plans else ("old", t) for s, t in enumerate(subgraphs)])
    p.repoint(mfields[2], "new", sg_vec)
    for s, found in sorted(plans.items()):
        sg = subgraphs[s]
        new_sg, sfields = p.copy_table(r, sg, _SUBGRAPH_OFFSET_SLOTS)
        p.offset(sg_slots[s], "new", new_sg)
        tensors = r.tables(sg, 0)
        ops = r.tables(sg, 3)
        # tensors: the old ones, then one transposed weight per rewritten op.
        t_vec, t_slots = p.table_vector([("old", t) for t in tensors] + [("later", 0)] * len(found))
        p.repoint(sfields[0], "new", t_vec)
        weight_index = {}
        for j, (i, _a, b, _y) in enumerate(found):
            tb = tensors[b]
            k, n = r.ints(tb, 0)
            bp = r.vector(buffers[r.scalar(tb, 2, "<I")], 0)[1]
            w = np.frombuffer(data, dtype="<f4", count=k * n, offset=bp).reshape(k, n)
            new_buffers.append(np.ascontiguousarray(w.T).tobytes())
            buf_index = len(buffers) + len(new_buffers) - 1
            name_pos = r.ref(tb, 3)
            name = bytes(data[name_pos + 4 : name_pos + 4 + r.u32(name_pos)]) if name_pos else b""
            tpos, tf = p.table([(0, "off", None), (1, "u8", _FLOAT32), (2, "u32", buf_index), (3, "off", None)])
            p.offset(t_slots[len(tensors) + j], "new", tpos)
            p.offset(tf[0], "new", p.ints([n, k]))
            p.offset(tf[3], "new", p.string(name + b"/transposed@opaque_ops"))
            weight_index[i] = len(tensors) + j
        # operators: the old ones, the rewritten ones replaced.
        o_vec, o_slots = p.table_vector(
            [("later", 0) if i in weight_index else ("old", op) for i, op in enumerate(ops)]
        )
        p.repoint(sfields[3], "new", o_vec)
        for i, a, _b, y in found:
            op, f = p.table(
                [
                    (0, "u32", fc_code),
                    (1, "off", None),
                    (2, "off", None),
                    (3, "u8", _FULLY_CONNECTED_OPTIONS),
                    (4, "off", None),
                ]
            )
            p.offset(o_slots[i], "new", op)
            p.offset(f[1], "new", p.ints([a, weight_index[i], -1]))
            p.offset(f[2], "new", p.ints([y]))
            p.offset(f[4], "new", p.table([(2, "u8", 1)])[0])  # FullyConnectedOptions.keep_num_dims
    # operator codes: the old ones and FULLY_CONNECTED v1.
    c_vec, c_slots = p.table_vector([("old", c) for c in codes] + [("later", 0)])
    p.repoint(mfields[1], "new", c_vec)
    code, _ = p.table([(0, "i8", _FULLY_CONNECTED), (2, "i32", 1), (3, "i32", _FULLY_CONNECTED)])
    p.offset(c_slots[-1], "new", code)
    # buffers: the old ones and the transposed weights, 16-byte aligned as the converter stores them.
    b_vec, b_slots = p.table_vector([("old", b) for b in buffers] + [("later", 0)] * len(new_buffers))
    p.repoint(mfields[4], "new", b_vec)
    for j, blob in enumerate(new_buffers):
        bpos, bf = p.table([(0, "off", None)])
        p.offset(b_slots[len(buffers) + j], "new", bpos)
        p.align(16, phase=-4 % 16)
        p.offset(bf[0], "new", p.put(struct.pack("<I", len(blob)) + blob))
    return p.finish(data)
