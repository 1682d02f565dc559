"""Rules for the model's metadata entries that the TFLite runtime parses itself.

TFLite's flatbuffer verifier checks that a metadata buffer is a byte vector
inside the file, not what its bytes mean.  Two entries are parsed anyway.

``model_control_dependencies`` (``tensorflow/lite/experimental/remat/
metadata_util.cc``), read by ``Interpreter::SetMetadata`` whenever an
interpreter is created: varint-encoded vectors whose element counts are
trusted, so ``std::vector::assign`` is asked for up to 2**32 elements before
the parser notices the bytes run out (an uncaught ``std::bad_alloc``:
SIGABRT, in every configuration).  The rule replays that parser and refuses a
count larger than the bytes left after it (every element takes at least one
byte, so such an entry cannot be well formed); an entry the parser merely
rejects (wrong version, truncated) is ignored by TFLite and passes.

``CONVERSION_METADATA``, a nested flatbuffer (``ConversionMetadata`` of
``tensorflow/lite/schema/conversion_metadata.fbs``), which the 2.17
interpreter builder reads without verifying it when it creates an
interpreter with a telemetry profiler attached (``InterpreterBuilder::
ParseConversionMetadata``, called from ``operator()``; the isolated worker
attaches one).  It follows ``root -> options -> model_optimization_modes`` and
copies that int32 vector; an offset or a length pointing outside the
metadata bytes reads past them (SIGSEGV), or asks for gigabytes (an uncaught
``std::bad_alloc``: SIGABRT).  Found by tools/fuzz_models.py's byte
mutations of microWakeWord's ``okay_nabu.tflite``.

The rule walks exactly the reads the runtime makes, with the same field
defaults, and requires each to lie inside the entry's bytes; a model whose
conversion metadata the converter wrote always passes.
"""

from __future__ import annotations

import struct

from ..errors import ModelError
from .reader import ModelInfo

CONVERSION_METADATA = "CONVERSION_METADATA"
CONTROL_DEPENDENCIES = "model_control_dependencies"

_U16 = struct.Struct("<H").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from


class _OutOfBounds(Exception):
    pass


def check_metadata(info: ModelInfo) -> None:
    """Refuse metadata entries that the runtime would parse into a crash.

    A ``model_control_dependencies`` entry with an element count larger
    than the bytes that follow it; a ``CONVERSION_METADATA`` entry that the
    runtime would read out of bounds.

    Raises
    ------
    ModelError
        Naming the entry's buffer, the field whose read falls outside it,
        and what to do.
    """
    bidx = info.metadata.get(CONTROL_DEPENDENCIES)
    if bidx is not None:
        data = info.buffers[bidx] or b""
        fault = control_dependencies_fault(data)
        if fault is not None:
            raise ModelError(
                f"metadata {CONTROL_DEPENDENCIES!r} (buffer {bidx}, {len(data)} bytes) {fault}; TFLite "
                "allocates that many entries before it reads them, whenever it creates an interpreter. "
                "Remove the entry or write it again (SerializeModelControlDependencies)"
            )
    bidx = info.metadata.get(CONVERSION_METADATA)
    if bidx is None:
        return
    data = info.buffers[bidx] or b""
    fault = conversion_metadata_fault(data)
    if fault is not None:
        raise ModelError(
            f"metadata {CONVERSION_METADATA!r} (buffer {bidx}, {len(data)} bytes) is not a readable "
            f"ConversionMetadata flatbuffer: {fault} lies outside it. TFLite reads this entry unverified "
            "while it creates an interpreter with a telemetry profiler (as in opaque_ops.isolate); "
            "remove the entry or convert the model again"
        )


def conversion_metadata_fault(data: bytes) -> str | None:
    """The first read of TFLite's walk over ``ConversionMetadata`` bytes that falls outside them, or None."""
    size = len(data)

    def need(pos: int, n: int, what: str) -> None:
        if pos < 0 or pos + n > size:
            raise _OutOfBounds(f"{what} at offset {pos} (+{n} bytes)")

    def field(table: int, table_name: str, slot_at: int, name: str) -> int | None:
        """Where a table's offset field points, or None when the field is absent."""
        # Each table starts with a signed offset back to its vtable, whose
        # first uint16 is its size; a field whose slot lies past that size
        # is absent (the runtime checks the size before reading the slot).
        vt = table - _I32(data, table)[0]
        need(vt, 2, f"{table_name}'s vtable")
        if _U16(data, vt)[0] <= slot_at:
            return None
        need(vt + slot_at, 2, f"the vtable slot of '{name}'")
        slot = _U16(data, vt + slot_at)[0]
        if not slot:
            return None
        need(table + slot, 4, f"the offset of '{name}'")
        return table + slot + _U32(data, table + slot)[0]

    try:
        # flatbuffers::GetRoot: a uoffset_t to the root table.
        need(0, 4, "the root offset")
        root = _U32(data, 0)[0]
        need(root, 4, "the root table")
        opts = field(root, "the root table", 6, "options")  # field 1
        if opts is None:
            return None
        need(opts, 4, "the 'options' table")
        vec = field(opts, "the 'options' table", 4, "model_optimization_modes")  # field 0
        if vec is None:
            return None
        need(vec, 4, "the length of 'model_optimization_modes'")
        count = _U32(data, vec)[0]
        # Copied whole into a std::vector<int32>: every element is read.
        need(vec + 4, 4 * count, f"'model_optimization_modes' ({count} int32 values)")
    except _OutOfBounds as exc:
        return str(exc)
    return None


class _Truncated(Exception):
    pass


def control_dependencies_fault(data: bytes) -> str | None:
    """Replay TFLite's ParseModelControlDependencies over ``data``: why it would crash, or None.

    The format: varint ``version`` (1), then a vector (varint count) of
    subgraphs, each a vector of (zigzag varint, zigzag varint) pairs.  The
    runtime allocates each vector from its count before reading the
    elements; a count above the bytes left is refused here.  Anything else
    the runtime's parser rejects (another version, running out of bytes) it
    ignores, and so does this rule.
    """
    pos = 0
    size = len(data)

    def varint() -> int:
        # Unsigned varint as the runtime reads it: 7 bits per byte, the high
        # bit continues, accumulated in a uint32 (wrapping).
        nonlocal pos
        value, mul = 0, 1
        while True:
            if pos >= size:
                raise _Truncated
            byte = data[pos]
            pos += 1
            value = (value + (byte & 0x7F) * mul) & 0xFFFFFFFF
            mul = (mul * 128) & 0xFFFFFFFF
            if not byte & 0x80:
                return value

    def count(what: str) -> int:
        at = pos
        n = varint()
        if n > size - pos:
            raise _Fault(f"claims {n} {what} at offset {at}, but only {size - pos} bytes follow")
        return n

    try:
        if varint() != 1:
            return None
        for _ in range(count("subgraph entries")):
            for _ in range(count("control edges")):
                varint()
                varint()
    except _Truncated:
        return None
    except _Fault as exc:
        return str(exc)
    return None


class _Fault(Exception):
    pass
