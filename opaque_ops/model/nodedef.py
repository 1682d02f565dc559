"""Flex ops' custom options: the TensorFlow op name and its NodeDef, read without TensorFlow.

A model converted with ``SELECT_TF_OPS`` keeps each TensorFlow op as a custom
op named ``Flex<Op>`` whose custom options are a flexbuffer vector of two
strings, ``[op name, serialized NodeDef]`` (TensorFlow's converter,
``CreateFlexOpCustomOptions`` in ``flatbuffer_export.cc``).  The NodeDef is a
protocol buffer; the messages read here, with their field numbers, are those of
``tensorflow/core/framework/``:

- ``node_def.proto``: NodeDef {1 name, 2 op, 3 input*, 4 device, 5 attr
  map<string, AttrValue>};
- ``attr_value.proto``: AttrValue, a oneof {1 list, 2 s, 3 i, 4 f, 5 b,
  6 type, 7 shape, 8 tensor, 9 placeholder, 10 func}; ListValue {2 s*, 3 i*,
  4 f*, 5 b*, 6 type*, 7 shape*, 8 tensor*, 9 func*}; NameAttrList {1 name};
- ``tensor_shape.proto``: TensorShapeProto {2 dim* {1 size, 2 name},
  3 unknown_rank};
- ``tensor.proto``: TensorProto {1 dtype, 2 tensor_shape, ...};
- ``types.proto``: the DataType enum (:data:`DATA_TYPES`).

Why the wire format is read by hand rather than with the ``protobuf``
package: protobuf can only decode these messages with their schemas compiled
into ``_pb2`` modules, which would mean vendoring generated code for five
TensorFlow ``.proto`` files (tied to the protobuf runtime's version) and adding
a dependency that other packages in a user's environment pin to conflicting
versions.  The part needed here is small and fixed: varints, 32/64-bit
fields and length-delimited fields (the wire format of
https://protobuf.dev/programming-guides/encoding/), about a hundred lines,
bounds-checked because the bytes come from an untrusted model.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import ModelError

#: TensorFlow's DataType enum (types.proto) as numpy-style names.
DATA_TYPES: dict[int, str] = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    14: "bfloat16",
    15: "qint16",
    16: "quint16",
    17: "uint16",
    18: "complex128",
    19: "float16",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
}
# types.proto: each DT_X_REF is DT_X + 100.
_REF_OFFSET = 100

# Wire types of the protobuf encoding.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def dtype_name(code: int) -> str:
    """A DataType enum value as a name: ``8`` -> ``"complex64"``, ``101`` -> ``"float32_ref"``."""
    if code in DATA_TYPES:
        return DATA_TYPES[code]
    if code - _REF_OFFSET in DATA_TYPES:
        return DATA_TYPES[code - _REF_OFFSET] + "_ref"
    return f"DataType({code})"


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise ModelError("malformed NodeDef: a varint runs past the end of its message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ModelError("malformed NodeDef: a varint is longer than 10 bytes")


def _fields(buf: bytes, start: int = 0, end: int | None = None):
    """Yield ``(field number, wire type, value)`` of one message; LEN values as (start, end)."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ModelError("malformed NodeDef: field number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
        elif wire == _I64:
            if pos + 8 > end:
                raise ModelError("malformed NodeDef: a 64-bit field runs past the end of its message")
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == _I32:
            if pos + 4 > end:
                raise ModelError("malformed NodeDef: a 32-bit field runs past the end of its message")
            value, pos = buf[pos : pos + 4], pos + 4
        elif wire == _LEN:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise ModelError(
                    f"malformed NodeDef: field {number} claims {n} bytes, {end - pos} are left in its message"
                )
            value, pos = (pos, pos + n), pos + n
        else:
            # Groups (3, 4) are proto2-only; no TensorFlow message uses them.
            raise ModelError(f"malformed NodeDef: field {number} has wire type {wire}")
        yield number, wire, value


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(buf: bytes, span) -> str:
    return buf[span[0] : span[1]].decode("utf-8", errors="backslashreplace")


def _repeated(buf: bytes, wire: int, value, scalar: str) -> list:
    """The values of a repeated scalar field, packed (one LEN field) or not."""
    if wire == _LEN:
        start, end = value
        out = []
        if scalar == "f":
            if (end - start) % 4:
                raise ModelError("malformed NodeDef: a packed float list is not a multiple of 4 bytes")
            return [v for (v,) in struct.iter_unpack("<f", buf[start:end])]
        pos = start
        while pos < end:
            v, pos = _varint(buf, pos, end)
            out.append(v)
        return out
    if scalar == "f":
        if wire != _I32:
            raise ModelError("malformed NodeDef: a float list entry is not a 32-bit field")
        return [struct.unpack("<f", value)[0]]
    if wire != _VARINT:
        raise ModelError("malformed NodeDef: an integer list entry is not a varint")
    return [value]


def _shape(buf: bytes, span) -> list | None:
    """A TensorShapeProto as a list of sizes (-1 unknown), or None for unknown rank."""
    dims = []
    for number, wire, value in _fields(buf, *span):
        if number == 3 and wire == _VARINT and value:
            return None
        if number == 2 and wire == _LEN:
            size = 0
            for n, w, v in _fields(buf, *value):
                if n == 1 and w == _VARINT:
                    size = _int64(v)
            dims.append(size)
    return dims


def _tensor(buf: bytes, span) -> dict:
    """A TensorProto summarised: its dtype and shape (the values are not decoded)."""
    out = {"dtype": "DataType(0)", "shape": [], "bytes": span[1] - span[0]}
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == _VARINT:
            out["dtype"] = dtype_name(value)
        elif number == 2 and wire == _LEN:
            out["shape"] = _shape(buf, value)
    return out


def _func(buf: bytes, span) -> str:
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == _LEN:
            return _text(buf, value)
    return ""


# ListValue fields: number -> (kind shown for the attribute, how to read one value).
_LIST_KINDS = {2: "string", 3: "int", 4: "float", 5: "bool", 6: "type", 7: "shape", 8: "tensor", 9: "func"}


def _list(buf: bytes, span) -> tuple[str, list]:
    kinds = []
    values: list = []
    for number, wire, value in _fields(buf, *span):
        kind = _LIST_KINDS.get(number)
        if kind is None:
            continue
        if kind not in kinds:
            kinds.append(kind)
        if kind == "string":
            values.append(_text(buf, value) if wire == _LEN else value)
        elif kind == "int":
            values += [_int64(v) for v in _repeated(buf, wire, value, "i")]
        elif kind == "float":
            values += _repeated(buf, wire, value, "f")
        elif kind == "bool":
            values += [bool(v) for v in _repeated(buf, wire, value, "b")]
        elif kind == "type":
            values += [dtype_name(v) for v in _repeated(buf, wire, value, "t")]
        elif kind == "shape" and wire == _LEN:
            values.append(_shape(buf, value))
        elif kind == "tensor" and wire == _LEN:
            values.append(_tensor(buf, value))
        elif kind == "func" and wire == _LEN:
            values.append(_func(buf, value))
    # An empty list carries no field at all, so its element kind is unknown.
    return f"list({'|'.join(kinds)})", values


def _attr_value(buf: bytes, span) -> tuple[str, object]:
    """One AttrValue as ``(kind, value)``: ``("type", "complex64")``, ``("list(int)", [1, 2])``..."""
    kind, val = "none", None
    # A oneof: the last field present wins, as in protobuf's own parser.
    for number, wire, value in _fields(buf, *span):
        if number == 1 and wire == _LEN:
            kind, val = _list(buf, value)
        elif number == 2 and wire == _LEN:
            raw = buf[value[0] : value[1]]
            try:
                kind, val = "string", raw.decode("utf-8")
            except UnicodeDecodeError:
                kind, val = "bytes", raw
        elif number == 3 and wire == _VARINT:
            kind, val = "int", _int64(value)
        elif number == 4 and wire == _I32:
            kind, val = "float", struct.unpack("<f", value)[0]
        elif number == 5 and wire == _VARINT:
            kind, val = "bool", bool(value)
        elif number == 6 and wire == _VARINT:
            kind, val = "type", dtype_name(value)
        elif number == 7 and wire == _LEN:
            kind, val = "shape", _shape(buf, value)
        elif number == 8 and wire == _LEN:
            kind, val = "tensor", _tensor(buf, value)
        elif number == 9 and wire == _LEN:
            kind, val = "placeholder", _text(buf, value)
        elif number == 10 and wire == _LEN:
            kind, val = "func", _func(buf, value)
    return kind, val


@dataclass
class NodeDef:
    """A TensorFlow NodeDef, as much of it as a Flex op's options carry.

    Attributes
    ----------
    name : str
        The node's name in the TensorFlow graph.
    op : str
        The TensorFlow op (``"Complex"``, ``"RFFT"``...).
    inputs : list of str
        The node's input names.
    device : str
        The requested device, usually empty.
    attrs : dict
        Attribute name -> ``(kind, value)``.  ``kind`` is the AttrValue
        field set: ``"type"`` (value a dtype name such as ``"complex64"``),
        ``"int"``, ``"float"``, ``"bool"``, ``"string"``, ``"bytes"``,
        ``"shape"`` (a list, -1 unknown; None for unknown rank),
        ``"tensor"`` (a dict of dtype, shape and byte size), ``"func"``,
        ``"placeholder"``, or ``"list(KIND)"`` with a list value.
    """

    name: str = ""
    op: str = ""
    inputs: list = field(default_factory=list)
    device: str = ""
    attrs: dict = field(default_factory=dict)


def read_node_def(data: bytes | bytearray | memoryview) -> NodeDef:
    """Decode a serialized TensorFlow NodeDef.

    Parameters
    ----------
    data : bytes-like
        The protocol buffer bytes.

    Returns
    -------
    NodeDef

    Raises
    ------
    ModelError
        If the bytes are not a well-formed protocol buffer message.
    """
    buf = bytes(data)
    node = NodeDef()
    for number, wire, value in _fields(buf):
        if wire != _LEN:
            continue
        if number == 1:
            node.name = _text(buf, value)
        elif number == 2:
            node.op = _text(buf, value)
        elif number == 3:
            node.inputs.append(_text(buf, value))
        elif number == 4:
            node.device = _text(buf, value)
        elif number == 5:
            # A map entry is a message {1: key, 2: value}.
            key, attr = "", ("none", None)
            for n, w, v in _fields(buf, *value):
                if n == 1 and w == _LEN:
                    key = _text(buf, v)
                elif n == 2 and w == _LEN:
                    attr = _attr_value(buf, v)
            node.attrs[key] = attr
    return node


def is_flex_op(name: str) -> bool:
    """True for the custom op names TensorFlow's converter gives select TF ops (``Flex...``)."""
    return name.startswith("Flex") and len(name) > 4


def decode_flex_op(custom_options: bytes | bytearray | memoryview) -> NodeDef:
    """Decode a Flex op's custom options: the flexbuffer vector ``[op name, NodeDef bytes]``.

    Parameters
    ----------
    custom_options : bytes-like
        The operator's ``custom_options``.

    Returns
    -------
    NodeDef
        ``op`` is the TensorFlow op name (the vector's first entry when the
        NodeDef leaves it empty).

    Raises
    ------
    ModelError
        If the options are not such a vector or the NodeDef is malformed.
    """
    from flatbuffers import flexbuffers  # on first use (see flex.decode_flex_options)

    buf = bytes(custom_options)
    if len(buf) < 3:
        raise ModelError(f"Flex op options of {len(buf)} bytes are too short for a flexbuffer")
    try:
        root = flexbuffers.GetRoot(buf)
        if not root.IsVector or root.IsMap:
            raise ModelError("Flex op options are not a flexbuffer vector [op name, NodeDef]")
        vec = root.AsVector
        if len(vec) < 2:
            raise ModelError(f"Flex op options hold {len(vec)} entries; [op name, NodeDef] needs 2")
        op_name, node_bytes = (_flex_bytes(vec[i]) for i in (0, 1))
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the flexbuffers reader raises many kinds
        raise ModelError(f"malformed Flex op options: {type(exc).__name__}: {exc}") from None
    node = read_node_def(node_bytes)
    if not node.op:
        node.op = op_name.decode("utf-8", errors="backslashreplace")
    return node


def _flex_bytes(ref) -> bytes:
    # TensorFlow writes both entries with Builder::String; the NodeDef bytes
    # are binary, so they are read as bytes, never decoded as text.
    if ref.IsString:
        return bytes(ref.AsStringBytes)
    if ref.IsBlob:
        return bytes(ref.AsBlob)
    raise ModelError("Flex op options: an entry of [op name, NodeDef] is not a string")
