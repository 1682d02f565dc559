"""Copies of a model's flatbuffer with some operators replaced, for the private model copy.

The Interpreter may hand TFLite a rewritten copy of the model where a
runtime runs another form of an operator faster (``matmul.py``:
BATCH_MATMUL by a constant as FULLY_CONNECTED; ``slices.py``: a fixed
STRIDED_SLICE as SLICE).  The model the caller sees (``Interpreter._info``,
read from the original bytes) is unchanged.  New tensors are placed *after*
a subgraph's own tensors, new buffers after the model's own buffers and the
one new operator code after the model's own, so every tensor index the
caller can name keeps its meaning and every old constant keeps its values.

Why a prefix: flatbuffer offsets are unsigned and point forward, so a grown
vector (a subgraph's tensors, its operators, the buffers) cannot be
appended after tables that it must point back to.  Placed *in front of* the
old bytes, the new tables can point forward into them; every old offset is
relative and stays valid when the old bytes move as one block.  So the copy
is: a new root, a new Model table (a copy of the old one with three fields
re-pointed), new vectors that point at the old tensors, operators, op codes
and buffers plus the new ones, then the old bytes unchanged.  The prefix's
length is a multiple of 64, so every old position keeps its alignment.

Hand-written rather than through ``flatbuffers``' object API (as
``bench/slice_rewrite.py`` does): unpacking and re-packing a whole model
costs tens of milliseconds at every start, and would move every constant.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FLOAT32 = 0  # TensorType
INT32 = 2  # TensorType
_PREFIX_ALIGN = 64

# Slots of the tables this module copies, and which of them hold offsets.
# A table with a slot beyond these (a later schema) is left alone: a copy
# could not re-point a field it does not know.
_MODEL_OFFSET_SLOTS = (1, 2, 3, 4, 5, 6, 7)  # slot 0: version (uint32)
_MODEL_SLOTS = 8
_SUBGRAPH_OFFSET_SLOTS = (0, 1, 2, 3, 4)  # slot 5: debug_metadata_index (int32)
_SUBGRAPH_SLOTS = 6


@dataclass(frozen=True)
class NewTensor:
    """A constant tensor added to a subgraph of the copy, with a buffer of its own."""

    shape: tuple
    type: int  # TensorType
    data: bytes
    name: bytes


@dataclass(frozen=True)
class NewOperator:
    """An operator of the copy's new operator code, in place of an old one.

    ``inputs`` may name the plan's new tensors: the j-th is index
    ``len(subgraph's tensors) + j``.  ``options`` are the fields of the
    options table, ``(slot, kind, value)`` as :meth:`_Prefix.table` takes
    them; none, with ``options_type`` 0, writes no options at all.
    """

    inputs: tuple
    outputs: tuple
    options_type: int = 0
    options: tuple = ()


@dataclass(frozen=True)
class Plan:
    """What changes in one subgraph: new tensors, and ``{operator index: NewOperator}``."""

    tensors: tuple
    operators: dict


class Reader:
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

    def copy_table(self, r: Reader, table: int, offset_slots) -> tuple[int, dict[int, int]]:
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
    r = Reader(data)
    return r.vector(r.tables(r.u32(0), 2)[0], 0)[0]


@dataclass(frozen=True)
class Opened:
    """The parts of a model a rewrite reads: its root table and the positions of its vectors' tables."""

    reader: Reader
    root: int
    codes: list
    buffers: list
    subgraphs: list

    def builtin_codes(self, builtin: int) -> set[int]:
        """Indices of the operator codes that name ``builtin`` (not a custom op)."""
        r = self.reader
        return {
            i
            for i, code in enumerate(self.codes)
            if max(r.scalar(code, 0, "<b"), r.scalar(code, 3, "<i")) == builtin and not r.field(code, 1)
        }

    def copyable(self, subgraph: int) -> bool:
        """Whether ``subgraph``'s table has only the fields a copy knows how to re-point."""
        return self.reader.slots(self.subgraphs[subgraph]) <= _SUBGRAPH_SLOTS


def open_model(data: bytes) -> Opened | None:
    """``data``'s tables for a rewrite, or None where no copy can be made.

    None for a Model table of a later schema (a field a copy could not
    re-point), and for a model whose buffers are stored after the flatbuffer
    (``Buffer.offset`` / ``Buffer.size``): their offsets count from the file's
    start, which the prefix would move.
    """
    r = Reader(data)
    root = r.u32(0)
    if r.slots(root) > _MODEL_SLOTS:
        return None
    buffers = r.tables(root, 4)
    if any(r.field(b, 1) or r.field(b, 2) for b in buffers):
        return None
    return Opened(r, root, r.tables(root, 1), buffers, r.tables(root, 2))


def write_copy(m: Opened, data: bytes, plans: dict, new_code: int) -> bytes:
    """A copy of ``data`` with ``plans`` (``{subgraph index: Plan}``) applied; one new code, ``new_code``, version 1.

    Every new operator gets the new operator code; each new tensor, a new
    buffer holding its data (16-byte aligned, as the converter stores them).
    """
    r = m.reader
    p = _Prefix()
    p.out[4:8] = bytes(data[4:8])  # file identifier ("TFL3"), or whatever was there
    model, mfields = p.copy_table(r, m.root, _MODEL_OFFSET_SLOTS)
    p.offset(0, "new", model)
    code_index = len(m.codes)
    new_buffers: list[bytes] = []
    # subgraphs vector: the touched ones are copies.
    sg_vec, sg_slots = p.table_vector([("later", 0) if s in plans else ("old", t) for s, t in enumerate(m.subgraphs)])
    p.repoint(mfields[2], "new", sg_vec)
    for s, plan in sorted(plans.items()):
        sg = m.subgraphs[s]
        new_sg, sfields = p.copy_table(r, sg, _SUBGRAPH_OFFSET_SLOTS)
        p.offset(sg_slots[s], "new", new_sg)
        tensors = r.tables(sg, 0)
        ops = r.tables(sg, 3)
        # tensors: the old ones, then the plan's.
        t_vec, t_slots = p.table_vector([("old", t) for t in tensors] + [("later", 0)] * len(plan.tensors))
        p.repoint(sfields[0], "new", t_vec)
        for j, t in enumerate(plan.tensors):
            new_buffers.append(t.data)
            buf_index = len(m.buffers) + len(new_buffers) - 1
            tpos, tf = p.table([(0, "off", None), (1, "u8", t.type), (2, "u32", buf_index), (3, "off", None)])
            p.offset(t_slots[len(tensors) + j], "new", tpos)
            p.offset(tf[0], "new", p.ints(list(t.shape)))
            p.offset(tf[3], "new", p.string(t.name))
        # operators: the old ones, the replaced ones new.
        o_vec, o_slots = p.table_vector(
            [("later", 0) if i in plan.operators else ("old", op) for i, op in enumerate(ops)]
        )
        p.repoint(sfields[3], "new", o_vec)
        for i, new in sorted(plan.operators.items()):
            fields = [(0, "u32", code_index), (1, "off", None), (2, "off", None)]
            if new.options_type:
                fields += [(3, "u8", new.options_type), (4, "off", None)]
            op, f = p.table(fields)
            p.offset(o_slots[i], "new", op)
            p.offset(f[1], "new", p.ints(list(new.inputs)))
            p.offset(f[2], "new", p.ints(list(new.outputs)))
            if new.options_type:
                p.offset(f[4], "new", p.table(list(new.options))[0])
    # operator codes: the old ones and the new one, version 1
    # (deprecated_builtin_code holds codes up to 127; above, 127 says "see builtin_code").
    c_vec, c_slots = p.table_vector([("old", c) for c in m.codes] + [("later", 0)])
    p.repoint(mfields[1], "new", c_vec)
    code, _ = p.table([(0, "i8", min(new_code, 127)), (2, "i32", 1), (3, "i32", new_code)])
    p.offset(c_slots[-1], "new", code)
    # buffers: the old ones and the new tensors' data.
    b_vec, b_slots = p.table_vector([("old", b) for b in m.buffers] + [("later", 0)] * len(new_buffers))
    p.repoint(mfields[4], "new", b_vec)
    for j, blob in enumerate(new_buffers):
        bpos, bf = p.table([(0, "off", None)])
        p.offset(b_slots[len(m.buffers) + j], "new", bpos)
        p.align(16, phase=-4 % 16)
        p.offset(bf[0], "new", p.put(struct.pack("<I", len(blob)) + blob))
    return p.finish(data)
