"""``ModelBuilder``: assemble small TFLite models without TensorFlow."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np

from .flex import flex_options
from .schema import (
    _CUSTOM,
    _OP_OPTIONS,
    _OPTION_FIELDS,
    _OPTIONS_ALWAYS,
    _OPTIONS_TYPE,
    _PLACEHOLDER_FOR_GREATER_OP_CODES,
    BUILTIN_OPERATOR_NAMES,
    BUILTIN_OPERATORS,
    FILE_IDENTIFIER,
    SCHEMA_VERSION,
    _enum_value,
    _tensor_type,
)


@dataclass
class _TensorSpec:
    name: str
    shape: list[int]
    ttype: int
    buffer: int
    shape_signature: list[int] | None
    quantization: dict | None
    is_variable: bool


@dataclass
class _OpSpec:
    opcode_index: int
    inputs: list[int]
    outputs: list[int]
    options_type: int = 0
    options: tuple[str, dict] | None = None
    custom_options: bytes | None = None


class ModelBuilder:
    """Assemble a single-subgraph TFLite model and serialise it.

    Parameters
    ----------
    description : str, optional
        Stored in the model's ``description`` field.
    subgraph_name : str, optional
        Name of the (only) subgraph.

    Examples
    --------
    >>> b = ModelBuilder(description="y = x + 1")
    >>> x = b.add_tensor("x", [1, 3], np.float32)
    >>> one = b.add_constant("one", np.ones(3, np.float32))
    >>> y = b.add_tensor("y", [1, 3], np.float32)
    >>> b.add_op("ADD", [x, one], [y])
    0
    >>> b.set_inputs([x]); b.set_outputs([y])
    >>> data = b.build()
    """

    def __init__(self, description: str = "", subgraph_name: str = "main"):
        self.description = description
        self.subgraph_name = subgraph_name
        self._tensors: list[_TensorSpec] = []
        # Buffer 0 is the schema's mandatory empty sentinel.
        self._buffers: list[bytes] = [b""]
        self._opcodes: list[tuple[int, str | None, int]] = []
        self._ops: list[_OpSpec] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._signatures: list[tuple[str, dict[str, int], dict[str, int]]] = []

    # -- tensors -----------------------------------------------------------

    def add_tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: Any = np.float32,
        shape_signature: Sequence[int] | None = None,
        quantization: Mapping[str, Any] | None = None,
        is_variable: bool = False,
    ) -> int:
        """Add a tensor without data (an input, output or intermediate).

        Parameters
        ----------
        name : str
            Tensor name.
        shape : sequence of int
            Static shape; use 1 for dimensions that are dynamic and describe
            them as -1 in `shape_signature`.
        dtype : numpy dtype or TensorType name, optional
            Element type (float32, float16, float64, int8, uint8, int16,
            uint16, int32, uint32, int64, uint64, bool, complex64/128) or a
            name such as ``"STRING"``.
        shape_signature : sequence of int, optional
            Shape with -1 for unknown dimensions.
        quantization : mapping, optional
            ``scale`` (list of float), ``zero_point`` (list of int) and
            optionally ``quantized_dimension`` (int); ``scales`` /
            ``zero_points`` are accepted as aliases.
        is_variable : bool, optional
            Mark the tensor as a variable.

        Returns
        -------
        int
            Index of the new tensor in the subgraph.
        """
        return self._add_tensor(name, shape, _tensor_type(dtype), 0, shape_signature, quantization, is_variable)

    def add_constant(
        self, name: str, array: Any, quantization: Mapping[str, Any] | None = None, dtype: Any = None
    ) -> int:
        """Add a constant tensor whose data is stored in the model.

        Parameters
        ----------
        name : str
            Tensor name.
        array : array_like
            The data; dtype and shape are taken from it (after converting to
            `dtype` if given).
        quantization : mapping, optional
            As for :meth:`add_tensor`.
        dtype : numpy dtype, optional
            Convert `array` to this dtype first.

        Returns
        -------
        int
            Index of the new tensor.
        """
        arr = np.asarray(array, dtype=dtype)
        ttype = _tensor_type(arr.dtype)
        # The flatbuffer stores raw little-endian, row-major element data.
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        self._buffers.append(data)
        return self._add_tensor(name, list(arr.shape), ttype, len(self._buffers) - 1, None, quantization, False)

    def _add_tensor(self, name, shape, ttype, buffer, shape_signature, quantization, is_variable) -> int:
        shape = [int(d) for d in shape]
        sig = None if shape_signature is None else [int(d) for d in shape_signature]
        if sig is not None and len(sig) != len(shape):
            raise ValueError(f"shape_signature {sig} has a different rank than shape {shape}")
        q = None
        if quantization is not None:
            scale = quantization.get("scale", quantization.get("scales", []))
            zp = quantization.get("zero_point", quantization.get("zero_points", []))
            q = {
                "scale": np.atleast_1d(np.asarray(scale, np.float32)),
                "zero_point": np.atleast_1d(np.asarray(zp, np.int64)),
                "quantized_dimension": int(quantization.get("quantized_dimension", 0)),
            }
            if q["zero_point"].size == 0 and q["scale"].size:
                q["zero_point"] = np.zeros(q["scale"].size, np.int64)
        self._tensors.append(_TensorSpec(str(name), shape, ttype, buffer, sig, q, bool(is_variable)))
        return len(self._tensors) - 1

    # -- operators ---------------------------------------------------------

    def _opcode(self, code: int, custom: str | None, version: int) -> int:
        key = (code, custom, int(version))
        if key not in self._opcodes:
            self._opcodes.append(key)
        return self._opcodes.index(key)

    def _check_tensors(self, idx: Sequence[int], what: str, optional_ok: bool) -> list[int]:
        out = []
        for i in idx:
            i = int(i)
            if i == -1 and optional_ok:
                out.append(i)
                continue
            if not 0 <= i < len(self._tensors):
                raise ValueError(f"{what}: tensor index {i} does not exist ({len(self._tensors)} tensors so far)")
            out.append(i)
        return out

    def add_op(
        self,
        op: str | int,
        inputs: Sequence[int],
        outputs: Sequence[int],
        options: Mapping[str, Any] | None = None,
        version: int = 1,
    ) -> int:
        """Add a builtin operator.

        Parameters
        ----------
        op : str or int
            Builtin operator name (``"ADD"``) or code.
        inputs, outputs : sequence of int
            Tensor indices; -1 marks an omitted optional input.
        options : mapping, optional
            Fields of the op's options table, e.g. ``{"padding": "SAME",
            "stride_w": 1, "stride_h": 1}`` for CONV_2D.  Enum fields accept
            names (``"RELU6"``) or values.  Supported tables: Conv2D,
            DepthwiseConv2D, Pool2D, FullyConnected, Softmax, Concatenation,
            Add, Sub, Mul, Div, Reshape, Squeeze, Reducer, Gather, LeakyRelu,
            Cast, Dequantize, Quantize.  Ops without an options table take no
            options.
        version : int, optional
            Operator version recorded in the opcode.

        Returns
        -------
        int
            Index of the operator.

        Raises
        ------
        ValueError
            Unknown op name, unknown option field, or bad tensor index.
        """
        if isinstance(op, str):
            name = op.upper()
            if name not in BUILTIN_OPERATORS:
                raise ValueError(f"unknown builtin operator {op!r}")
            code = BUILTIN_OPERATORS[name]
        else:
            code = int(op)
            if code not in BUILTIN_OPERATOR_NAMES:
                raise ValueError(f"unknown builtin operator code {code}")
            name = BUILTIN_OPERATOR_NAMES[code]
        if code == _CUSTOM:
            raise ValueError("use add_custom_op() for custom operators")
        spec = _OpSpec(
            self._opcode(code, None, version),
            self._check_tensors(inputs, name, True),
            self._check_tensors(outputs, name, False),
        )
        table = _OP_OPTIONS.get(name)
        if options:
            if table is None:
                raise ValueError(f"options for {name} are not supported by this writer")
            known = {f[0] for f in _OPTION_FIELDS[table]}
            unknown = set(options) - known
            if unknown:
                raise ValueError(f"unknown {table} field(s) {sorted(unknown)}; known: {sorted(known)}")
        if table is not None and (options or name in _OPTIONS_ALWAYS):
            spec.options_type = _OPTIONS_TYPE[table]
            spec.options = (table, dict(options or {}))
        self._ops.append(spec)
        return len(self._ops) - 1

    def add_custom_op(
        self,
        name: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        options: Mapping[str, Any] | bytes | bytearray | None = None,
        version: int = 1,
    ) -> int:
        """Add a custom operator.

        Parameters
        ----------
        name : str
            The custom code the runtime resolves (e.g. ``"Atan"``).
        inputs, outputs : sequence of int
            Tensor indices; -1 marks an omitted optional input.
        options : mapping or bytes, optional
            A mapping is encoded with :func:`flex_options`; bytes are stored
            verbatim as ``custom_options``.
        version : int, optional
            Operator version.

        Returns
        -------
        int
            Index of the operator.
        """
        if not isinstance(name, str) or not name:
            raise ValueError("custom op name must be a non-empty string")
        if options is None:
            raw = None
        elif isinstance(options, (bytes, bytearray, memoryview)):
            raw = bytes(options)
        else:
            raw = flex_options(options)
        spec = _OpSpec(
            self._opcode(_CUSTOM, name, version),
            self._check_tensors(inputs, name, True),
            self._check_tensors(outputs, name, False),
            custom_options=raw,
        )
        self._ops.append(spec)
        return len(self._ops) - 1

    # -- graph interface ---------------------------------------------------

    def set_inputs(self, inputs: Sequence[int]) -> None:
        """Set the subgraph's input tensor indices."""
        self._inputs = self._check_tensors(inputs, "inputs", False)

    def set_outputs(self, outputs: Sequence[int]) -> None:
        """Set the subgraph's output tensor indices."""
        self._outputs = self._check_tensors(outputs, "outputs", False)

    def add_signature(self, key: str, inputs: Mapping[str, int], outputs: Mapping[str, int]) -> None:
        """Add a SignatureDef for the subgraph.

        Parameters
        ----------
        key : str
            Signature key, e.g. ``"serving_default"``.
        inputs, outputs : mapping of str to int
            Signature names -> tensor indices.
        """
        ins = dict(zip(inputs, self._check_tensors(list(inputs.values()), key, False)))
        outs = dict(zip(outputs, self._check_tensors(list(outputs.values()), key, False)))
        self._signatures.append((str(key), ins, outs))

    # -- serialisation -----------------------------------------------------

    @staticmethod
    def _int_vector(b: flatbuffers.Builder, values, dtype=np.int32) -> int:
        return b.CreateNumpyVector(np.asarray(list(values), dtype=dtype).reshape(-1))

    @staticmethod
    def _offset_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def _build_options(self, b: flatbuffers.Builder, table: str, opts: dict) -> int:
        fields = _OPTION_FIELDS[table]
        vectors = {}
        for fname, _slot, kind, _default in fields:
            if kind == "[i32]" and opts.get(fname) is not None:
                vectors[fname] = self._int_vector(b, opts[fname])
            elif kind == "str" and opts.get(fname) is not None:
                vectors[fname] = b.CreateString(opts[fname], "utf-8", "surrogateescape")
        b.StartObject(len(fields))
        for fname, slot, kind, default in fields:
            if fname not in opts:
                continue
            v = opts[fname]
            if kind in ("[i32]", "str"):
                if fname in vectors:
                    b.PrependUOffsetTRelativeSlot(slot, vectors[fname], 0)
            elif kind in ("act", "pad", "dtype"):
                b.PrependInt8Slot(slot, _enum_value(kind, v, fname), default)
            elif kind == "i8":
                b.PrependInt8Slot(slot, int(v), default)
            elif kind == "u8":
                b.PrependUint8Slot(slot, int(v), default)
            elif kind == "i32":
                b.PrependInt32Slot(slot, int(v), default)
            elif kind == "f32":
                b.PrependFloat32Slot(slot, float(v), default)
            elif kind == "bool":
                b.PrependBoolSlot(slot, bool(v), default)
        return b.EndObject()

    def _build_tensor(self, b: flatbuffers.Builder, t: _TensorSpec) -> int:
        name = b.CreateString(t.name)
        shape = self._int_vector(b, t.shape)
        sig = self._int_vector(b, t.shape_signature) if t.shape_signature is not None else None
        quant = None
        if t.quantization is not None:
            scale = b.CreateNumpyVector(t.quantization["scale"])
            zp = b.CreateNumpyVector(t.quantization["zero_point"])
            b.StartObject(7)
            b.PrependUOffsetTRelativeSlot(2, scale, 0)
            b.PrependUOffsetTRelativeSlot(3, zp, 0)
            b.PrependInt32Slot(6, t.quantization["quantized_dimension"], 0)
            quant = b.EndObject()
        b.StartObject(10)
        b.PrependUOffsetTRelativeSlot(0, shape, 0)
        b.PrependInt8Slot(1, t.ttype, -1)  # -1 forces FLOAT32 (0) to be written
        b.PrependUint32Slot(2, t.buffer, 0)
        b.PrependUOffsetTRelativeSlot(3, name, 0)
        if quant is not None:
            b.PrependUOffsetTRelativeSlot(4, quant, 0)
        b.PrependBoolSlot(5, t.is_variable, False)
        if sig is not None:
            b.PrependUOffsetTRelativeSlot(7, sig, 0)
        # has_rank distinguishes scalars (shape []) from unknown rank.
        b.PrependBoolSlot(8, True, False)
        return b.EndObject()

    def _build_operator(self, b: flatbuffers.Builder, op: _OpSpec) -> int:
        ins = self._int_vector(b, op.inputs)
        outs = self._int_vector(b, op.outputs)
        opts = self._build_options(b, *op.options) if op.options is not None else None
        custom = None
        if op.custom_options is not None:
            custom = b.CreateByteVector(op.custom_options)
        b.StartObject(13)
        b.PrependUint32Slot(0, op.opcode_index, 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        if opts is not None:
            b.PrependUint8Slot(3, op.options_type, 0)
            b.PrependUOffsetTRelativeSlot(4, opts, 0)
        if custom is not None:
            b.PrependUOffsetTRelativeSlot(5, custom, 0)
            b.PrependInt8Slot(6, 0, -1)  # FLEXBUFFERS, written explicitly
        return b.EndObject()

    def _build_buffer(self, b: flatbuffers.Builder, data: bytes) -> int:
        vec = None
        if data:
            # Buffer.data is force_align 16 in the schema so that the runtime
            # can use constant data in place (SIMD loads, mmap).
            b.StartVector(1, len(data), 16)
            b.head = b.head - len(data)
            b.Bytes[b.head : b.head + len(data)] = data
            vec = b.EndVector()
        b.StartObject(3)
        if vec is not None:
            b.PrependUOffsetTRelativeSlot(0, vec, 0)
        return b.EndObject()

    def _build_tensor_maps(self, b: flatbuffers.Builder, m: dict[str, int]) -> int:
        offs = []
        for name, idx in m.items():
            s = b.CreateString(name)
            b.StartObject(2)
            b.PrependUOffsetTRelativeSlot(0, s, 0)
            b.PrependUint32Slot(1, idx, 0)
            offs.append(b.EndObject())
        return self._offset_vector(b, offs)

    def build(self) -> bytes:
        """Serialise the model.

        Returns
        -------
        bytes
            A TFLite flatbuffer (schema version 3, file identifier ``TFL3``).
        """
        total = sum(len(d) for d in self._buffers)
        b = flatbuffers.Builder(max(1024, total + 4096))

        # Children must be finished before their parents start, so build
        # bottom-up: buffers, tensors, operators, subgraph, then the model.
        buffers = self._offset_vector(b, [self._build_buffer(b, d) for d in self._buffers])
        tensors = self._offset_vector(b, [self._build_tensor(b, t) for t in self._tensors])
        operators = self._offset_vector(b, [self._build_operator(b, o) for o in self._ops])
        inputs = self._int_vector(b, self._inputs)
        outputs = self._int_vector(b, self._outputs)
        sg_name = b.CreateString(self.subgraph_name)
        b.StartObject(5)
        b.PrependUOffsetTRelativeSlot(0, tensors, 0)
        b.PrependUOffsetTRelativeSlot(1, inputs, 0)
        b.PrependUOffsetTRelativeSlot(2, outputs, 0)
        b.PrependUOffsetTRelativeSlot(3, operators, 0)
        b.PrependUOffsetTRelativeSlot(4, sg_name, 0)
        subgraphs = self._offset_vector(b, [b.EndObject()])

        codes = []
        for code, custom, version in self._opcodes:
            cname = b.CreateString(custom) if custom is not None else None
            b.StartObject(4)
            b.PrependInt8Slot(0, min(code, _PLACEHOLDER_FOR_GREATER_OP_CODES), 0)
            if cname is not None:
                b.PrependUOffsetTRelativeSlot(1, cname, 0)
            b.PrependInt32Slot(2, version, 1)
            b.PrependInt32Slot(3, code, 0)
            codes.append(b.EndObject())
        opcodes = self._offset_vector(b, codes)

        sigs = []
        for key, ins, outs in self._signatures:
            vin = self._build_tensor_maps(b, ins)
            vout = self._build_tensor_maps(b, outs)
            k = b.CreateString(key)
            b.StartObject(5)
            b.PrependUOffsetTRelativeSlot(0, vin, 0)
            b.PrependUOffsetTRelativeSlot(1, vout, 0)
            b.PrependUOffsetTRelativeSlot(2, k, 0)
            b.PrependUint32Slot(4, 0, 0)
            sigs.append(b.EndObject())
        signatures = self._offset_vector(b, sigs) if sigs else None

        desc = b.CreateString(self.description)
        b.StartObject(8)
        b.PrependUint32Slot(0, SCHEMA_VERSION, 0)
        b.PrependUOffsetTRelativeSlot(1, opcodes, 0)
        b.PrependUOffsetTRelativeSlot(2, subgraphs, 0)
        b.PrependUOffsetTRelativeSlot(3, desc, 0)
        b.PrependUOffsetTRelativeSlot(4, buffers, 0)
        if signatures is not None:
            b.PrependUOffsetTRelativeSlot(7, signatures, 0)
        root = b.EndObject()
        b.Finish(root, file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())
