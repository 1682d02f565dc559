"""Write and read TFLite flatbuffer models without TensorFlow.

:class:`ModelBuilder` assembles small models (tensors, constants, builtin and
custom operators, signatures) and serialises them with ``flatbuffers.Builder``.
:func:`read_model` parses a model into plain Python objects.  The reader treats
its input as untrusted: every offset and length is checked against the buffer
before use, and anything malformed is reported as :class:`ModelError`.

Field slot numbers and enum values follow the public TFLite ``schema.fbs``
(schema version 3); no generated schema code is used.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import flatbuffers
import numpy as np
from flatbuffers import flexbuffers

from opaque_ops.errors import ModelError

__all__ = [
    "BUILTIN_OPERATORS",
    "BUILTIN_OPERATOR_NAMES",
    "TENSOR_TYPES",
    "TENSOR_TYPE_NAMES",
    "ACTIVATIONS",
    "ModelBuilder",
    "ModelInfo",
    "SubgraphInfo",
    "TensorInfo",
    "OpInfo",
    "SignatureInfo",
    "read_model",
    "check_model",
    "flex_options",
    "decode_flex_options",
]

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"

# ---------------------------------------------------------------------------
# Schema enums
# ---------------------------------------------------------------------------

# BuiltinOperator values are contiguous from 0, so the position in this list
# is the enum value.  Codes above 206 follow the LiteRT schema (the runtime
# this project targets); one TensorFlow branch assigned 207 differently.
_BUILTIN_OPERATOR_LIST = """
ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE
DEQUANTIZE EMBEDDING_LOOKUP FLOOR FULLY_CONNECTED HASHTABLE_LOOKUP
L2_NORMALIZATION L2_POOL_2D LOCAL_RESPONSE_NORMALIZATION LOGISTIC
LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1 RELU6 RESHAPE
RESIZE_BILINEAR RNN SOFTMAX SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS
SKIP_GRAM CALL CUSTOM EMBEDDING_LOOKUP_SPARSE PAD UNIDIRECTIONAL_SEQUENCE_RNN
GATHER BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND TRANSPOSE MEAN SUB DIV SQUEEZE
UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE BIDIRECTIONAL_SEQUENCE_RNN EXP
TOPK_V2 SPLIT LOG_SOFTMAX DELEGATE BIDIRECTIONAL_SEQUENCE_LSTM CAST PRELU
MAXIMUM ARG_MAX MINIMUM LESS NEG PADV2 GREATER GREATER_EQUAL LESS_EQUAL SELECT
SLICE SIN TRANSPOSE_CONV SPARSE_TO_DENSE TILE EXPAND_DIMS EQUAL NOT_EQUAL LOG
SUM SQRT RSQRT SHAPE POW ARG_MIN FAKE_QUANT REDUCE_PROD REDUCE_MAX PACK
LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT UNPACK REDUCE_MIN FLOOR_DIV
REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR
LEAKY_RELU SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2
ADD_N GATHER_ND COS WHERE RANK ELU REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE
MATRIX_SET_DIAG ROUND HARD_SWISH IF WHILE NON_MAX_SUPPRESSION_V4
NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2 DENSIFY SEGMENT_SUM BATCH_MATMUL
PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE BROADCAST_TO RFFT2D CONV_3D
IMAG REAL COMPLEX_ABS HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE
REDUCE_ALL CONV_3D_TRANSPOSE VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE
BROADCAST_ARGS RANDOM_STANDARD_NORMAL BUCKETIZE RANDOM_UNIFORM MULTINOMIAL GELU
DYNAMIC_UPDATE_SLICE RELU_0_TO_1 UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX
UNSORTED_SEGMENT_SUM ATAN2 UNSORTED_SEGMENT_MIN SIGN BITCAST BITWISE_XOR
RIGHT_SHIFT STABLEHLO_LOGISTIC STABLEHLO_ADD STABLEHLO_DIVIDE
STABLEHLO_MULTIPLY STABLEHLO_MAXIMUM STABLEHLO_RESHAPE STABLEHLO_CLAMP
STABLEHLO_CONCATENATE STABLEHLO_BROADCAST_IN_DIM STABLEHLO_CONVOLUTION
STABLEHLO_SLICE STABLEHLO_CUSTOM_CALL STABLEHLO_REDUCE STABLEHLO_ABS
STABLEHLO_AND STABLEHLO_COSINE STABLEHLO_EXPONENTIAL STABLEHLO_FLOOR
STABLEHLO_LOG STABLEHLO_MINIMUM STABLEHLO_NEGATE STABLEHLO_OR STABLEHLO_POWER
STABLEHLO_REMAINDER STABLEHLO_RSQRT STABLEHLO_SELECT STABLEHLO_SUBTRACT
STABLEHLO_TANH STABLEHLO_SCATTER STABLEHLO_COMPARE STABLEHLO_CONVERT
STABLEHLO_DYNAMIC_SLICE STABLEHLO_DYNAMIC_UPDATE_SLICE STABLEHLO_PAD
STABLEHLO_IOTA STABLEHLO_DOT_GENERAL STABLEHLO_REDUCE_WINDOW STABLEHLO_SORT
STABLEHLO_WHILE STABLEHLO_GATHER STABLEHLO_TRANSPOSE DILATE
STABLEHLO_RNG_BIT_GENERATOR REDUCE_WINDOW STABLEHLO_COMPOSITE STABLEHLO_SHIFT_LEFT
STABLEHLO_CBRT STABLEHLO_CASE
""".split()

#: BuiltinOperator enum of the TFLite schema: op name -> code.
BUILTIN_OPERATORS: dict[str, int] = {n: i for i, n in enumerate(_BUILTIN_OPERATOR_LIST)}
#: Inverse of :data:`BUILTIN_OPERATORS`: code -> op name.
BUILTIN_OPERATOR_NAMES: dict[int, str] = {i: n for n, i in BUILTIN_OPERATORS.items()}

_CUSTOM = BUILTIN_OPERATORS["CUSTOM"]
# Codes at or above this value do not fit the legacy int8 opcode field.
_PLACEHOLDER_FOR_GREATER_OP_CODES = BUILTIN_OPERATORS["PLACEHOLDER_FOR_GREATER_OP_CODES"]

#: TensorType enum of the TFLite schema: type name -> value.
TENSOR_TYPES: dict[str, int] = {
    "FLOAT32": 0, "FLOAT16": 1, "INT32": 2, "UINT8": 3, "INT64": 4,
    "STRING": 5, "BOOL": 6, "INT16": 7, "COMPLEX64": 8, "INT8": 9,
    "FLOAT64": 10, "COMPLEX128": 11, "UINT64": 12, "RESOURCE": 13,
    "VARIANT": 14, "UINT32": 15, "UINT16": 16, "INT4": 17, "BFLOAT16": 18,
    "INT2": 19, "UINT4": 20, "FLOAT8_E4M3FN": 21, "FLOAT8_E5M2": 22,
}
#: Inverse of :data:`TENSOR_TYPES`.
TENSOR_TYPE_NAMES: dict[int, str] = {v: k for k, v in TENSOR_TYPES.items()}

# Types without a numpy equivalent (STRING, RESOURCE, VARIANT, packed
# sub-byte ints, BFLOAT16, FLOAT8) map to None.
_TYPE_TO_NUMPY: dict[int, np.dtype | None] = {
    0: np.dtype(np.float32), 1: np.dtype(np.float16), 2: np.dtype(np.int32),
    3: np.dtype(np.uint8), 4: np.dtype(np.int64), 5: None, 6: np.dtype(np.bool_),
    7: np.dtype(np.int16), 8: np.dtype(np.complex64), 9: np.dtype(np.int8),
    10: np.dtype(np.float64), 11: np.dtype(np.complex128), 12: np.dtype(np.uint64),
    13: None, 14: None, 15: np.dtype(np.uint32), 16: np.dtype(np.uint16),
    17: None, 18: None,
}
_NUMPY_TO_TYPE: dict[np.dtype, int] = {d: t for t, d in _TYPE_TO_NUMPY.items() if d is not None}

#: ActivationFunctionType enum: name -> value.
ACTIVATIONS: dict[str, int] = {
    "NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5,
}
_PADDINGS: dict[str, int] = {"SAME": 0, "VALID": 1}

# BuiltinOptions union members in declaration order; the union type value is
# the position + 1 (0 is NONE).
_BUILTIN_OPTIONS_LIST = """
Conv2DOptions DepthwiseConv2DOptions ConcatEmbeddingsOptions LSHProjectionOptions
Pool2DOptions SVDFOptions RNNOptions FullyConnectedOptions SoftmaxOptions
ConcatenationOptions AddOptions L2NormOptions LocalResponseNormalizationOptions
LSTMOptions ResizeBilinearOptions CallOptions ReshapeOptions SkipGramOptions
SpaceToDepthOptions EmbeddingLookupSparseOptions MulOptions PadOptions
GatherOptions BatchToSpaceNDOptions SpaceToBatchNDOptions TransposeOptions
ReducerOptions SubOptions DivOptions SqueezeOptions SequenceRNNOptions
StridedSliceOptions ExpOptions TopKV2Options SplitOptions LogSoftmaxOptions
CastOptions DequantizeOptions MaximumMinimumOptions ArgMaxOptions LessOptions
NegOptions PadV2Options GreaterOptions GreaterEqualOptions LessEqualOptions
SelectOptions SliceOptions TransposeConvOptions SparseToDenseOptions TileOptions
ExpandDimsOptions EqualOptions NotEqualOptions ShapeOptions PowOptions
ArgMinOptions FakeQuantOptions PackOptions LogicalOrOptions OneHotOptions
LogicalAndOptions LogicalNotOptions UnpackOptions FloorDivOptions SquareOptions
ZerosLikeOptions FillOptions BidirectionalSequenceLSTMOptions
BidirectionalSequenceRNNOptions UnidirectionalSequenceLSTMOptions
FloorModOptions RangeOptions ResizeNearestNeighborOptions LeakyReluOptions
SquaredDifferenceOptions MirrorPadOptions AbsOptions SplitVOptions UniqueOptions
ReverseV2Options AddNOptions GatherNdOptions CosOptions WhereOptions RankOptions
ReverseSequenceOptions MatrixDiagOptions QuantizeOptions MatrixSetDiagOptions
HardSwishOptions IfOptions WhileOptions DepthToSpaceOptions
NonMaxSuppressionV4Options NonMaxSuppressionV5Options ScatterNdOptions
SelectV2Options DensifyOptions SegmentSumOptions BatchMatMulOptions
CumsumOptions CallOnceOptions BroadcastToOptions Rfft2dOptions Conv3DOptions
HashtableOptions HashtableFindOptions HashtableImportOptions
HashtableSizeOptions VarHandleOptions ReadVariableOptions AssignVariableOptions
RandomOptions BucketizeOptions GeluOptions DynamicUpdateSliceOptions
UnsortedSegmentProdOptions UnsortedSegmentMaxOptions UnsortedSegmentMinOptions
UnsortedSegmentSumOptions ATan2Options SignOptions BitcastOptions
BitwiseXorOptions RightShiftOptions
""".split()
_OPTIONS_TYPE: dict[str, int] = {n: i + 1 for i, n in enumerate(_BUILTIN_OPTIONS_LIST)}
_OPTIONS_TYPE_NAMES: dict[int, str] = {i: n for n, i in _OPTIONS_TYPE.items()}

# Field layouts of the option tables this module can write and decode:
# (field name, slot, kind, default).  Kinds: "act" / "pad" / "dtype" are byte
# enums, "i32", "f32", "bool", "[i32]".
_OPTION_FIELDS: dict[str, list[tuple[str, int, str, Any]]] = {
    "Conv2DOptions": [
        ("padding", 0, "pad", 0), ("stride_w", 1, "i32", 0), ("stride_h", 2, "i32", 0),
        ("fused_activation_function", 3, "act", 0),
        ("dilation_w_factor", 4, "i32", 1), ("dilation_h_factor", 5, "i32", 1),
    ],
    "DepthwiseConv2DOptions": [
        ("padding", 0, "pad", 0), ("stride_w", 1, "i32", 0), ("stride_h", 2, "i32", 0),
        ("depth_multiplier", 3, "i32", 0), ("fused_activation_function", 4, "act", 0),
        ("dilation_w_factor", 5, "i32", 1), ("dilation_h_factor", 6, "i32", 1),
    ],
    "Pool2DOptions": [
        ("padding", 0, "pad", 0), ("stride_w", 1, "i32", 0), ("stride_h", 2, "i32", 0),
        ("filter_width", 3, "i32", 0), ("filter_height", 4, "i32", 0),
        ("fused_activation_function", 5, "act", 0),
    ],
    "FullyConnectedOptions": [
        ("fused_activation_function", 0, "act", 0), ("weights_format", 1, "u8", 0),
        ("keep_num_dims", 2, "bool", False), ("asymmetric_quantize_inputs", 3, "bool", False),
    ],
    "SoftmaxOptions": [("beta", 0, "f32", 0.0)],
    "ConcatenationOptions": [("axis", 0, "i32", 0), ("fused_activation_function", 1, "act", 0)],
    "AddOptions": [("fused_activation_function", 0, "act", 0), ("pot_scale_int16", 1, "bool", True)],
    "SubOptions": [("fused_activation_function", 0, "act", 0), ("pot_scale_int16", 1, "bool", True)],
    "MulOptions": [("fused_activation_function", 0, "act", 0)],
    "DivOptions": [("fused_activation_function", 0, "act", 0)],
    "ReshapeOptions": [("new_shape", 0, "[i32]", None)],
    "SqueezeOptions": [("squeeze_dims", 0, "[i32]", None)],
    "ReducerOptions": [("keep_dims", 0, "bool", False)],
    "GatherOptions": [("axis", 0, "i32", 0), ("batch_dims", 1, "i32", 0)],
    "LeakyReluOptions": [("alpha", 0, "f32", 0.0)],
    "CastOptions": [("in_data_type", 0, "dtype", 0), ("out_data_type", 1, "dtype", 0)],
    "DequantizeOptions": [],
    "QuantizeOptions": [],
}

# Which options table a builtin op uses when options are given.
_OP_OPTIONS: dict[str, str] = {
    "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "SOFTMAX": "SoftmaxOptions",
    "CONCATENATION": "ConcatenationOptions",
    "ADD": "AddOptions",
    "SUB": "SubOptions",
    "MUL": "MulOptions",
    "DIV": "DivOptions",
    "RESHAPE": "ReshapeOptions",
    "SQUEEZE": "SqueezeOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "GATHER": "GatherOptions",
    "LEAKY_RELU": "LeakyReluOptions",
    "CAST": "CastOptions",
    "DEQUANTIZE": "DequantizeOptions",
    "QUANTIZE": "QuantizeOptions",
}

# TFLite's kernels read fused activations and strides from these tables and
# some crash or misbehave when the table is absent, so write it even when the
# caller passes no options.
_OPTIONS_ALWAYS = {"ADD", "SUB", "MUL", "DIV", "CONV_2D", "DEPTHWISE_CONV_2D",
                   "AVERAGE_POOL_2D", "MAX_POOL_2D", "FULLY_CONNECTED",
                   "CONCATENATION", "SOFTMAX"}


def _enum_value(kind: str, value: Any, field_name: str) -> int:
    table = {"act": ACTIVATIONS, "pad": _PADDINGS, "dtype": TENSOR_TYPES}.get(kind)
    if isinstance(value, str):
        if table is None or value.upper() not in table:
            raise ValueError(f"unknown value {value!r} for option {field_name!r}")
        return table[value.upper()]
    if kind == "dtype" and not isinstance(value, (int, np.integer)):
        return _tensor_type(value)
    return int(value)


def _tensor_type(dtype: Any) -> int:
    """TensorType value for a numpy dtype (or a TensorType name)."""
    if isinstance(dtype, str) and dtype.upper() in TENSOR_TYPES:
        return TENSOR_TYPES[dtype.upper()]
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r}") from exc
    dt = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    if dt not in _NUMPY_TO_TYPE:
        raise TypeError(f"dtype {dt} has no TFLite tensor type")
    return _NUMPY_TO_TYPE[dt]


# ---------------------------------------------------------------------------
# Flexbuffer custom options
# ---------------------------------------------------------------------------

def _flex_normalize(value: Any, where: str) -> Any:
    """Convert numpy values to Python ones and reject unsupported types.

    Done as a separate pass because flexbuffers.Builder's Map() context
    manager replaces an exception raised inside it with its own error.
    """
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"flexbuffer map keys must be str, got {k!r} in {where}")
            out[k] = _flex_normalize(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_flex_normalize(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"cannot encode {type(value).__name__} as a flexbuffer value ({where})")


_F32_MAX = 3.4028234663852886e38
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def _flex_int(fbb: flexbuffers.Builder, value: int) -> None:
    if _INT64_MIN <= value <= _INT64_MAX:
        fbb.Int(value)
    elif value <= _UINT64_MAX:
        fbb.UInt(value)
    else:
        raise ValueError(f"integer option {value} does not fit in 64 bits")


def _flex_float(fbb: flexbuffers.Builder, value: float) -> None:
    # The flexbuffers package picks the width by packing as float32 first,
    # which raises OverflowError for finite doubles beyond float32's range.
    fbb.Float(value, 8 if abs(value) > _F32_MAX and value == value and abs(value) != float("inf") else 0)


def _flex_add(fbb: flexbuffers.Builder, value: Any) -> None:
    if value is None:
        fbb.Null()
    elif isinstance(value, bool):
        fbb.Bool(value)
    elif isinstance(value, int):
        _flex_int(fbb, value)
    elif isinstance(value, float):
        _flex_float(fbb, value)
    elif isinstance(value, str):
        fbb.String(value)
    elif isinstance(value, bytes):
        fbb.Blob(value)
    elif isinstance(value, dict):
        with fbb.Map():
            for k in sorted(value):
                fbb.Key(k)
                _flex_add(fbb, value[k])
    else:
        items = value
        # Homogeneous numeric lists become typed vectors, as TF's converter
        # writes them; TFLite kernels read them with AsTypedVector().
        if items and all(isinstance(v, bool) for v in items):
            fbb.TypedVectorFromElements(items, flexbuffers.Type.BOOL)
        elif items and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            if not all(_INT64_MIN <= v <= _INT64_MAX for v in items):
                raise ValueError(f"integer list option {items!r} has values outside the int64 range")
            fbb.TypedVectorFromElements(items, flexbuffers.Type.INT)
        elif items and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            with fbb.TypedVector():
                for v in items:
                    _flex_float(fbb, float(v))
        else:
            # Strings and mixed lists: typed string vectors are deprecated in
            # FlexBuffers, so use an untyped vector.
            with fbb.Vector():
                for v in items:
                    _flex_add(fbb, v)


def flex_options(options: Mapping[str, Any]) -> bytes:
    """Encode custom-op options as a FlexBuffer map.

    Parameters
    ----------
    options : mapping of str to value
        Values may be ``bool``, ``int``, ``float``, ``str``, ``bytes``, nested
        mappings, or lists.  Lists of ints or floats (or bools) are written as
        typed vectors; other lists as untyped vectors.  numpy scalars and 1-D
        arrays are accepted and converted to Python values first.

    Returns
    -------
    bytes
        The FlexBuffer, keys sorted, as TFLite custom kernels expect to read it
        with ``flexbuffers::GetRoot(buffer, length).AsMap()``.

    Raises
    ------
    TypeError
        If a key is not a string or a value has an unsupported type.
    ValueError
        If an integer does not fit in 64 bits.
    """
    if not isinstance(options, Mapping):
        raise TypeError(f"flex_options needs a mapping, got {type(options).__name__}")
    fbb = flexbuffers.Builder()
    try:
        _flex_add(fbb, _flex_normalize(options, "options"))
    except RuntimeError as exc:
        # The builder's Map()/Vector() context managers replace an error raised
        # inside them with their own "must be even number of keys"; surface ours.
        if isinstance(exc.__context__, (ValueError, TypeError)):
            raise exc.__context__ from None
        raise
    return bytes(fbb.Finish())


_FLEX_MAX_DEPTH = 64


class _FlexBudget:
    def __init__(self, limit: int):
        self.left = limit

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            # Offsets in a flexbuffer can be shared, so a small hostile buffer
            # can describe an exponentially large value.
            raise ModelError("flexbuffer expands to an implausibly large value")


def _flex_value(ref: Any, budget: _FlexBudget, depth: int, size: int) -> Any:
    budget.take()
    if depth > _FLEX_MAX_DEPTH:
        raise ModelError("flexbuffer is nested too deeply")
    T = flexbuffers.Type
    t = ref._type
    if t == T.NULL:
        return None
    if t == T.BOOL:
        return ref.AsBool
    if ref.IsInt:
        return ref.AsInt
    if ref.IsFloat:
        return ref.AsFloat
    if t == T.KEY:
        return ref.AsKey
    if t == T.STRING:
        s = ref.AsStringBytes
        return s.decode("utf-8")
    if t == T.BLOB:
        return bytes(ref.AsBlob.Bytes)
    if t == T.MAP:
        m = ref.AsMap
        n = len(m)
        if n * 2 > size:
            raise ModelError(f"flexbuffer map claims {n} entries in a {size}-byte buffer")
        keys = m.Keys
        values = m.Values
        if len(keys) != n:
            raise ModelError("flexbuffer map has mismatched key and value counts")
        out = {}
        for i in range(n):
            k = _flex_value(keys[i], budget, depth + 1, size)
            if not isinstance(k, str):
                raise ModelError("flexbuffer map key is not a string")
            out[k] = _flex_value(values[i], budget, depth + 1, size)
        return out
    if t == T.VECTOR:
        v = ref.AsVector
        n = len(v)
        if n > size:
            raise ModelError(f"flexbuffer vector claims {n} elements in a {size}-byte buffer")
        return [_flex_value(v[i], budget, depth + 1, size) for i in range(n)]
    if ref.IsTypedVector or ref.IsFixedTypedVector:
        v = ref.AsTypedVector if ref.IsTypedVector else ref.AsFixedTypedVector
        n = len(v)
        if n > size:
            raise ModelError(f"flexbuffer vector claims {n} elements in a {size}-byte buffer")
        budget.take(n)
        return [_flex_value(v[i], budget, depth + 1, size) for i in range(n)]
    raise ModelError(f"unsupported flexbuffer value type {int(t)}")


def decode_flex_options(data: bytes | bytearray | memoryview) -> dict:
    """Decode a FlexBuffer map (custom-op options) into a dict.

    Parameters
    ----------
    data : bytes-like
        The FlexBuffer bytes, e.g. an operator's ``custom_options``.

    Returns
    -------
    dict
        Keys are strings; values are ``int``, ``float``, ``bool``, ``str``,
        ``bytes``, ``None``, lists or nested dicts.

    Raises
    ------
    ModelError
        If the bytes are not a well-formed FlexBuffer whose root is a map.
    """
    buf = bytes(data)
    if len(buf) < 3:
        raise ModelError(f"flexbuffer of {len(buf)} bytes is too short (needs at least 3)")
    try:
        root = flexbuffers.GetRoot(buf)
        if not root.IsMap:
            raise ModelError("flexbuffer root is not a map")
        value = _flex_value(root, _FlexBudget(16 * len(buf) + 1024), 0, len(buf))
    except ModelError:
        raise
    except (Exception, RecursionError) as exc:  # the flexbuffers reader raises many kinds
        raise ModelError(f"malformed flexbuffer: {type(exc).__name__}: {exc}") from None
    return value


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------

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

    def add_tensor(self, name: str, shape: Sequence[int], dtype: Any = np.float32,
                   shape_signature: Sequence[int] | None = None,
                   quantization: Mapping[str, Any] | None = None,
                   is_variable: bool = False) -> int:
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
        return self._add_tensor(name, shape, _tensor_type(dtype), 0,
                                shape_signature, quantization, is_variable)

    def add_constant(self, name: str, array: Any,
                     quantization: Mapping[str, Any] | None = None,
                     dtype: Any = None) -> int:
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
        return self._add_tensor(name, list(arr.shape), ttype, len(self._buffers) - 1,
                                None, quantization, False)

    def _add_tensor(self, name, shape, ttype, buffer, shape_signature, quantization,
                    is_variable) -> int:
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
                raise ValueError(f"{what}: tensor index {i} does not exist "
                                 f"({len(self._tensors)} tensors so far)")
            out.append(i)
        return out

    def add_op(self, op: str | int, inputs: Sequence[int], outputs: Sequence[int],
               options: Mapping[str, Any] | None = None, version: int = 1) -> int:
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
        spec = _OpSpec(self._opcode(code, None, version),
                       self._check_tensors(inputs, name, True),
                       self._check_tensors(outputs, name, False))
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

    def add_custom_op(self, name: str, inputs: Sequence[int], outputs: Sequence[int],
                      options: Mapping[str, Any] | bytes | bytearray | None = None,
                      version: int = 1) -> int:
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
        spec = _OpSpec(self._opcode(_CUSTOM, name, version),
                       self._check_tensors(inputs, name, True),
                       self._check_tensors(outputs, name, False),
                       custom_options=raw)
        self._ops.append(spec)
        return len(self._ops) - 1

    # -- graph interface ---------------------------------------------------

    def set_inputs(self, inputs: Sequence[int]) -> None:
        """Set the subgraph's input tensor indices."""
        self._inputs = self._check_tensors(inputs, "inputs", False)

    def set_outputs(self, outputs: Sequence[int]) -> None:
        """Set the subgraph's output tensor indices."""
        self._outputs = self._check_tensors(outputs, "outputs", False)

    def add_signature(self, key: str, inputs: Mapping[str, int],
                      outputs: Mapping[str, int]) -> None:
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
        b.StartObject(len(fields))
        for fname, slot, kind, default in fields:
            if fname not in opts:
                continue
            v = opts[fname]
            if kind == "[i32]":
                if fname in vectors:
                    b.PrependUOffsetTRelativeSlot(slot, vectors[fname], 0)
            elif kind in ("act", "pad", "dtype"):
                b.PrependInt8Slot(slot, _enum_value(kind, v, fname), default)
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
            b.Bytes[b.head:b.head + len(data)] = data
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


# ---------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------

@dataclass
class TensorInfo:
    """One tensor of a subgraph, as stored in the model."""

    index: int
    name: str
    shape: tuple
    shape_signature: tuple | None
    dtype: np.dtype | None
    type_name: str
    buffer: int
    data: bytes | None
    quantization: dict
    is_variable: bool

    def array(self) -> np.ndarray | None:
        """The constant data as a numpy array (None if none or no numpy dtype)."""
        if self.data is None or self.dtype is None:
            return None
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        if count * self.dtype.itemsize != len(self.data):
            return None
        return np.frombuffer(self.data, dtype=self.dtype.newbyteorder("<")).reshape(self.shape)


@dataclass
class OpInfo:
    """One operator of a subgraph."""

    index: int
    opcode_index: int
    builtin_code: int
    op_name: str
    is_custom: bool
    version: int
    inputs: list
    outputs: list
    custom_options: bytes | None
    options: dict | None
    builtin_options_type: int
    builtin_options: dict | None = None


@dataclass
class SubgraphInfo:
    """One subgraph: tensors, operators and its interface."""

    index: int
    name: str
    tensors: list
    inputs: list
    outputs: list
    operators: list


@dataclass
class SignatureInfo:
    """A SignatureDef: named inputs and outputs of one subgraph."""

    key: str
    subgraph_index: int
    inputs: dict
    outputs: dict


@dataclass
class ModelInfo:
    """A parsed model.  Produced by :func:`read_model`."""

    version: int
    description: str
    operator_codes: list
    subgraphs: list
    signatures: list
    buffers: list = field(repr=False, default_factory=list)
    has_identifier: bool = True

    def custom_ops(self) -> list[tuple[str, int]]:
        """Sorted ``(name, version)`` pairs of the custom ops the model uses."""
        used = set()
        for sg in self.subgraphs:
            for op in sg.operators:
                if op.is_custom:
                    used.add((op.op_name, op.version))
        return sorted(used)


class _Reader:
    """Bounds-checked access to a flatbuffer in memory."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.size = len(buf)
        # Tables and vectors may legally be shared, but a hostile file can
        # make thousands of entries point at one big vector; cap total work
        # in proportion to the file size.
        self.budget = 8 * self.size + (1 << 20)

    def charge(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise ModelError(f"{what}: the model references far more data than it contains "
                             "(overlapping or self-referencing offsets)")

    def need(self, pos: int, n: int, what: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise ModelError(f"truncated: {what} at offset {pos} (+{n} bytes) points past "
                             f"the end of the {self.size}-byte buffer")

    def unpack(self, fmt: str, pos: int, what: str):
        n = struct.calcsize(fmt)
        self.need(pos, n, what)
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def table(self, pos: int, what: str) -> "_Table":
        self.charge(1, what)
        soff = self.unpack("<i", pos, what)
        vt = pos - soff
        self.need(vt, 4, f"vtable of {what}")
        vt_size, tbl_size = struct.unpack_from("<HH", self.buf, vt)
        if vt_size < 4 or vt_size % 2:
            raise ModelError(f"{what}: vtable at offset {vt} has invalid size {vt_size}")
        self.need(vt, vt_size, f"vtable of {what}")
        if tbl_size < 4:
            raise ModelError(f"{what}: table at offset {pos} has invalid size {tbl_size}")
        self.need(pos, tbl_size, what)
        return _Table(self, pos, vt, vt_size, tbl_size, what)

    def deref(self, pos: int, what: str) -> int:
        target = pos + self.unpack("<I", pos, what)
        if target >= self.size:
            raise ModelError(f"truncated: {what} at offset {pos} points to offset {target}, "
                             f"past the end of the {self.size}-byte buffer")
        return target

    def vector(self, pos: int, elem_size: int, what: str) -> tuple[int, int]:
        """(start, count) of the vector at `pos`, checked to fit the buffer."""
        n = self.unpack("<I", pos, f"length of {what}")
        start = pos + 4
        if n * elem_size > self.size - start:
            raise ModelError(f"truncated: {what} at offset {pos} claims {n} elements of "
                             f"{elem_size} bytes, past the end of the {self.size}-byte buffer")
        self.charge(n, what)
        return start, n


class _Table:
    __slots__ = ("r", "pos", "vt", "vt_size", "tbl_size", "what")

    def __init__(self, r, pos, vt, vt_size, tbl_size, what):
        self.r, self.pos, self.vt, self.vt_size, self.tbl_size, self.what = (
            r, pos, vt, vt_size, tbl_size, what)

    def field(self, slot: int, size: int) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vt_size:
            return None
        off = struct.unpack_from("<H", self.r.buf, self.vt + entry)[0]
        if off == 0:
            return None
        if off + size > self.tbl_size:
            raise ModelError(f"{self.what}: field {slot} at offset {self.pos + off} lies "
                             f"outside its {self.tbl_size}-byte table")
        return self.pos + off

    def scalar(self, slot: int, fmt: str, default):
        pos = self.field(slot, struct.calcsize(fmt))
        if pos is None:
            return default
        return struct.unpack_from(fmt, self.r.buf, pos)[0]

    def offset(self, slot: int, what: str) -> int | None:
        pos = self.field(slot, 4)
        if pos is None:
            return None
        return self.r.deref(pos, f"{self.what}.{what}")

    def sub_table(self, slot: int, what: str) -> "_Table | None":
        pos = self.offset(slot, what)
        return None if pos is None else self.r.table(pos, f"{self.what}.{what}")

    def string(self, slot: int, what: str) -> str | None:
        pos = self.offset(slot, what)
        if pos is None:
            return None
        start, n = self.r.vector(pos, 1, f"{self.what}.{what}")
        try:
            return self.r.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelError(f"{self.what}.{what} at offset {pos} is not valid UTF-8: {exc}") from None

    def raw_vector(self, slot: int, elem_size: int, what: str) -> tuple[int, int] | None:
        pos = self.offset(slot, what)
        if pos is None:
            return None
        return self.r.vector(pos, elem_size, f"{self.what}.{what}")

    def array(self, slot: int, dtype: str, what: str) -> np.ndarray | None:
        dt = np.dtype(dtype)
        v = self.raw_vector(slot, dt.itemsize, what)
        if v is None:
            return None
        start, n = v
        return np.frombuffer(self.r.buf, dtype=dt, count=n, offset=start).copy()

    def bytes_(self, slot: int, what: str) -> bytes | None:
        v = self.raw_vector(slot, 1, what)
        if v is None:
            return None
        start, n = v
        return bytes(self.r.buf[start:start + n])

    def tables(self, slot: int, what: str) -> list["_Table"]:
        v = self.raw_vector(slot, 4, what)
        if v is None:
            return []
        start, n = v
        return [self.r.table(self.r.deref(start + 4 * i, f"{self.what}.{what}[{i}]"),
                             f"{self.what}.{what}[{i}]") for i in range(n)]


def _int_list(a: np.ndarray | None) -> list[int]:
    return [] if a is None else [int(v) for v in a]


def _decode_builtin_options(tbl: _Table | None, type_: int) -> dict | None:
    name = _OPTIONS_TYPE_NAMES.get(type_)
    if tbl is None or name not in _OPTION_FIELDS:
        return None
    out: dict[str, Any] = {}
    act_names = {v: k for k, v in ACTIVATIONS.items()}
    pad_names = {v: k for k, v in _PADDINGS.items()}
    for fname, slot, kind, default in _OPTION_FIELDS[name]:
        if kind == "[i32]":
            arr = tbl.array(slot, "<i4", fname)
            out[fname] = None if arr is None else _int_list(arr)
        elif kind == "act":
            v = tbl.scalar(slot, "<b", default)
            out[fname] = act_names.get(v, v)
        elif kind == "pad":
            v = tbl.scalar(slot, "<b", default)
            out[fname] = pad_names.get(v, v)
        elif kind == "dtype":
            v = tbl.scalar(slot, "<b", default)
            out[fname] = TENSOR_TYPE_NAMES.get(v, v)
        elif kind == "u8":
            out[fname] = tbl.scalar(slot, "<B", default)
        elif kind == "i32":
            out[fname] = tbl.scalar(slot, "<i", default)
        elif kind == "f32":
            out[fname] = tbl.scalar(slot, "<f", default)
        elif kind == "bool":
            out[fname] = bool(tbl.scalar(slot, "<B", int(default)))
    return out


def _parse(buf: bytes) -> ModelInfo:
    r = _Reader(buf)
    root = r.table(r.unpack("<I", 0, "root offset"), "Model")
    version = root.scalar(0, "<I", 0)
    description = root.string(3, "description") or ""

    # Buffers first: tensors refer to them by index.
    buffers: list[bytes | None] = []
    data_cache: dict[tuple[int, int], bytes] = {}
    for i, bt in enumerate(root.tables(4, "buffers")):
        v = bt.raw_vector(0, 1, "data")
        if v is not None:
            start, n = v
        else:
            # Models over 2 GB keep data outside the flatbuffer, addressed
            # from the start of the file; offsets 0 and 1 mean "none".
            off = bt.scalar(1, "<Q", 0)
            n = bt.scalar(2, "<Q", 0)
            if off <= 1:
                buffers.append(None)
                continue
            if off + n > r.size:
                raise ModelError(f"truncated: buffer {i} data at offset {off} (+{n} bytes) "
                                 f"points past the end of the {r.size}-byte buffer")
            start = off
        key = (start, n)
        if key not in data_cache:
            r.charge(n, f"buffer {i}")
            data_cache[key] = bytes(buf[start:start + n])
        buffers.append(data_cache[key] if n else None)

    opcodes = []
    for i, ot in enumerate(root.tables(1, "operator_codes")):
        dep = ot.scalar(0, "<b", 0)
        custom = ot.string(1, "custom_code")
        ver = ot.scalar(2, "<i", 1)
        code = ot.scalar(3, "<i", 0)
        # Old converters only fill the int8 field; newer ones fill both, and
        # codes >= 127 only live in builtin_code.
        code = max(code, dep)
        opcodes.append((int(code), custom, int(ver)))

    subgraphs = []
    for si, st in enumerate(root.tables(2, "subgraphs")):
        sname = st.string(4, "name") or ""
        tensors = []
        for ti, tt in enumerate(st.tables(0, "tensors")):
            shape = tt.array(0, "<i4", "shape")
            ttype = tt.scalar(1, "<b", 0)
            bidx = tt.scalar(2, "<I", 0)
            tname = tt.string(3, "name") or ""
            qt = tt.sub_table(4, "quantization")
            sig = tt.array(7, "<i4", "shape_signature")
            if bidx >= max(len(buffers), 1):
                raise ModelError(f"subgraph {si} tensor {ti} ({tname!r}) refers to buffer "
                                 f"{bidx} but the model has {len(buffers)} buffers")
            if qt is not None:
                scales = qt.array(2, "<f4", "scale")
                zps = qt.array(3, "<i8", "zero_point")
                qdim = qt.scalar(6, "<i", 0)
            else:
                scales = zps = None
                qdim = 0
            quant = {
                "scales": (np.zeros(0, np.float32) if scales is None
                           else scales.astype(np.float32)),
                "zero_points": (np.zeros(0, np.int64) if zps is None
                                else zps.astype(np.int64)),
                "quantized_dimension": int(qdim),
            }
            tensors.append(TensorInfo(
                index=ti, name=tname,
                shape=tuple(_int_list(shape)),
                shape_signature=None if sig is None else tuple(_int_list(sig)),
                dtype=_TYPE_TO_NUMPY.get(ttype),
                type_name=TENSOR_TYPE_NAMES.get(ttype, f"UNKNOWN_{ttype}"),
                buffer=int(bidx),
                data=buffers[bidx] if buffers else None,
                quantization=quant,
                is_variable=bool(tt.scalar(5, "<B", 0)),
            ))
        ntens = len(tensors)

        def check_idx(values, what, optional_ok):
            for v in values:
                if (v == -1 and optional_ok) or 0 <= v < ntens:
                    continue
                raise ModelError(f"subgraph {si} {what} refers to tensor {v}, "
                                 f"but the subgraph has {ntens} tensors")
            return values

        inputs = check_idx(_int_list(st.array(1, "<i4", "inputs")), "inputs", False)
        outputs = check_idx(_int_list(st.array(2, "<i4", "outputs")), "outputs", False)
        ops = []
        for oi, ot in enumerate(st.tables(3, "operators")):
            opcode_index = ot.scalar(0, "<I", 0)
            if opcode_index >= len(opcodes):
                raise ModelError(f"subgraph {si} operator {oi} uses opcode index {opcode_index} "
                                 f"but the model has {len(opcodes)} operator codes")
            code, custom, ver = opcodes[opcode_index]
            is_custom = code == _CUSTOM
            op_name = (custom or "") if is_custom else BUILTIN_OPERATOR_NAMES.get(code, f"BUILTIN_{code}")
            op_in = check_idx(_int_list(ot.array(1, "<i4", "inputs")), f"operator {oi} inputs", True)
            op_out = check_idx(_int_list(ot.array(2, "<i4", "outputs")), f"operator {oi} outputs", True)
            opt_type = ot.scalar(3, "<B", 0)
            opt_tbl = ot.sub_table(4, "builtin_options") if opt_type else None
            custom_options = ot.bytes_(5, "custom_options")
            if custom_options is None:
                off = ot.scalar(9, "<Q", 0)
                n = ot.scalar(10, "<Q", 0)
                if off > 1:
                    if off + n > r.size:
                        raise ModelError(f"truncated: operator {oi} custom options at offset {off} "
                                         f"(+{n} bytes) point past the end of the {r.size}-byte buffer")
                    r.charge(n, "custom options")
                    custom_options = bytes(buf[off:off + n])
            options = None
            if custom_options:
                try:
                    options = decode_flex_options(custom_options)
                except ModelError:
                    options = None
            ops.append(OpInfo(
                index=oi, opcode_index=int(opcode_index), builtin_code=code, op_name=op_name,
                is_custom=is_custom, version=ver, inputs=op_in, outputs=op_out,
                custom_options=custom_options, options=options,
                builtin_options_type=int(opt_type),
                builtin_options=_decode_builtin_options(opt_tbl, opt_type),
            ))
        subgraphs.append(SubgraphInfo(si, sname, tensors, inputs, outputs, ops))

    signatures = []
    for gi, gt in enumerate(root.tables(7, "signature_defs")):
        key = gt.string(2, "signature_key") or ""
        sub = gt.scalar(4, "<I", 0)
        if sub >= len(subgraphs):
            raise ModelError(f"signature {key!r} refers to subgraph {sub} but the model has "
                             f"{len(subgraphs)} subgraphs")
        ntens = len(subgraphs[sub].tensors)
        maps = []
        for slot, what in ((0, "inputs"), (1, "outputs")):
            m = {}
            for mt in gt.tables(slot, what):
                nm = mt.string(0, "name") or ""
                idx = mt.scalar(1, "<I", 0)
                if idx >= ntens:
                    raise ModelError(f"signature {key!r} {what} {nm!r} refers to tensor {idx}, "
                                     f"but subgraph {sub} has {ntens} tensors")
                m[nm] = int(idx)
            maps.append(m)
        signatures.append(SignatureInfo(key, int(sub), maps[0], maps[1]))

    return ModelInfo(version=int(version), description=description, operator_codes=opcodes,
                     subgraphs=subgraphs, signatures=signatures, buffers=buffers)


def read_model(source: bytes | bytearray | memoryview | str | os.PathLike) -> ModelInfo:
    """Parse a TFLite model.

    Parameters
    ----------
    source : bytes-like or path
        The model bytes, or the path of a ``.tflite`` file.

    Returns
    -------
    ModelInfo
        ``version``, ``description``, ``operator_codes`` (list of
        ``(builtin_code, custom_name or None, version)``), ``subgraphs``
        (:class:`SubgraphInfo` with :class:`TensorInfo` and :class:`OpInfo`
        entries), ``signatures`` (:class:`SignatureInfo`) and
        :meth:`ModelInfo.custom_ops`.

    Raises
    ------
    ModelError
        If the bytes are not a well-formed TFLite model: truncated, corrupt,
        hostile offsets or lengths, or no ``TFL3`` identifier and no parsable
        root table.  The message says what is wrong and where.
    OSError
        If `source` is a path that cannot be read.
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            buf = f.read()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        buf = bytes(source)
    else:
        raise TypeError(f"read_model needs bytes or a path, got {type(source).__name__}")
    if len(buf) < 8:
        raise ModelError(f"truncated: {len(buf)} bytes is too short for a TFLite model")
    has_id = buf[4:8] == FILE_IDENTIFIER
    try:
        model = _parse(buf)
    except ModelError as exc:
        if has_id:
            raise
        raise ModelError(f"not a TFLite model: no 'TFL3' file identifier (found {buf[4:8]!r}) "
                         f"and the root table does not parse: {exc}") from None
    except RecursionError:
        raise ModelError("model structure is nested too deeply") from None
    except (struct.error, ValueError, IndexError, OverflowError, MemoryError) as exc:
        # Defensive: every read is bounds-checked, so reaching this is a bug
        # in the checks, but callers still get the documented exception.
        raise ModelError(f"malformed model: {type(exc).__name__}: {exc}") from None
    model.has_identifier = has_id
    return model


def check_model(info: ModelInfo) -> None:
    """Reject graph structures that the TFLite runtime does not verify but trusts.

    TFLite's own verifier checks the flatbuffer layout and tensor byte sizes,
    but not the data flow between operators: a tensor written by two
    operators, or an operator writing its own input, makes the memory planner
    give two live tensors the same arena bytes (or a resource tensor a bogus
    handle), and ``invoke()`` then corrupts the heap or segfaults.  Each rule
    here was added for a crash that model fuzzing (tools/fuzz_models.py)
    found in the 2.17.1 runtime or its XNNPACK delegate:

    - at least one subgraph; constant data no longer than its shape says;
    - quantization scales finite, positive and normal; zero points inside
      the tensor type's range;
    - every tensor written by at most one operator, never by the operator
      that reads it, never a subgraph input or a constant; no omitted (-1)
      outputs; omitted inputs only on builtins whose schema allows them;
    - no operator reads a tensor before the operator that writes it runs;
      every subgraph output is written, an input, or a constant;
    - common builtins have their number of inputs, and an output;
    - quantized CONV_2D / DEPTHWISE_CONV_2D have a bias; strides, dilations
      and pooling windows are at least 1, padding is SAME or VALID;
    - READ_VARIABLE's declared output shape matches what ASSIGN_VARIABLE
      stores in the same variable.

    All are linear in the size of the model.

    Parameters
    ----------
    info : ModelInfo
        From :func:`read_model`.

    Raises
    ------
    ModelError
        The message names the subgraph, operator and tensor at fault.
    """
    if not info.subgraphs:
        # The XNNPACK delegate indexes subgraph 0 unconditionally.
        raise ModelError("the model has no subgraphs")
    for sg in info.subgraphs:
        tensors = sg.tensors
        sg_inputs = set(sg.inputs)
        for t in tensors:
            if t.data is not None and t.dtype is not None and t.dtype != object and all(d >= 0 for d in t.shape):
                # TFLite only checks that dense data is not shorter than the
                # shape (sparse tensors are legitimately shorter, so that is
                # left to it); a longer buffer with a zero dimension (a
                # 1x0x1x32 filter holding 160 bytes) divides by zero in the
                # kernels.
                want = int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize if t.shape else t.dtype.itemsize
                if len(t.data) > want:
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has shape {list(t.shape)} "
                        f"({want} bytes of {t.type_name}) but {len(t.data)} bytes of data")
            scales = t.quantization["scales"]
            # XNNPACK derives requantization multipliers from the scales when
            # the interpreter is created; a NaN or infinite one crashes it.
            # Subnormal scales overflow the same multipliers.
            good = np.isfinite(scales) & (scales >= np.finfo(np.float32).tiny)
            if not good.all():
                raise ModelError(
                    f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has quantization scale(s) "
                    f"{scales[~good][:4].tolist()}: scales must be finite and positive (normal floats)")
            zps = t.quantization["zero_points"]
            lim = _ZERO_POINT_RANGE.get(t.type_name)
            if lim is not None and len(zps) and ((zps < lim[0]) | (zps > lim[1])).any():
                bad = zps[(zps < lim[0]) | (zps > lim[1])][:4].tolist()
                raise ModelError(
                    f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has zero point(s) {bad} outside "
                    f"the {t.type_name} range [{lim[0]}, {lim[1]}]")
        producer: dict[int, int] = {}
        for op in sg.operators:
            ins = [t for t in op.inputs if t >= 0]
            for t in op.outputs:
                if t < 0:
                    if not op.is_custom:
                        # No builtin has optional outputs; kernels write them unchecked.
                        raise ModelError(
                            f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted "
                            "(-1) output")
                    continue
                if t in producer:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        f"which operator {producer[t]} already writes: each tensor may have one producer")
                if t in ins:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is also one of its own inputs")
                if t in sg_inputs:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is an input of the subgraph")
                if tensors[t].data is not None:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is a constant (it has data in the model)")
                producer[t] = op.index
        # An operator reading a tensor that only a later operator writes
        # reads arena memory planned for someone else.
        assigned: dict[int, tuple] = {}
        for op in sg.operators:
            if -1 in op.inputs and not op.is_custom:
                # Builtin kernels fetch their inputs without a null check
                # unless the schema makes the input optional.
                pos = [k for k, t in enumerate(op.inputs) if t == -1]
                allowed = _OPTIONAL_POSITIONS.get(op.op_name)
                if op.op_name not in _OPTIONAL_INPUT_OPS:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted (-1) input "
                        f"at position {pos[0]}, but {op.op_name} has no optional inputs")
                if allowed is not None and not set(pos) <= allowed:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted (-1) input "
                        f"at position {min(set(pos) - allowed)}; only input(s) {sorted(allowed)} may be omitted")
            need = _MIN_INPUTS.get(op.op_name)
            if need is not None and not op.is_custom:
                most = _MAX_INPUTS.get(op.op_name, need)
                # The XNNPACK delegate reads a node's inputs while it builds
                # its graph, before any kernel's Prepare counts them.
                if len(op.inputs) < need:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {len(op.inputs)} "
                        f"input(s); {op.op_name} takes at least {need}")
                if most is not None and len(op.inputs) > most:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {len(op.inputs)} "
                        f"inputs; {op.op_name} takes at most {most}")
            if not op.outputs and not op.is_custom and op.op_name not in ("ASSIGN_VARIABLE", "CALL_ONCE"):
                raise ModelError(
                    f"subgraph {sg.index} operator {op.index} ({op.op_name}) has no outputs")
            if (op.op_name in ("CONV_2D", "DEPTHWISE_CONV_2D") and op.inputs and op.inputs[0] >= 0
                    and tensors[op.inputs[0]].type_name in ("INT8", "UINT8", "INT16")
                    and (len(op.inputs) < 3 or op.inputs[2] < 0)):
                # The quantized kernels add the bias without checking it exists.
                raise ModelError(
                    f"subgraph {sg.index} operator {op.index} ({op.op_name}) is quantized "
                    f"({tensors[op.inputs[0]].type_name}) but has no bias input; quantized "
                    "convolutions need one")
            if op.op_name in _WINDOW_OPTIONS and op.builtin_options:
                pad = op.builtin_options.get("padding")
                if pad not in (None, "SAME", "VALID"):
                    # An unknown padding enum leaves the output size undefined.
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has padding {pad!r}; "
                        "it must be SAME or VALID")
                # Kernels divide by strides and multiply by dilations unchecked.
                for key in _WINDOW_OPTIONS[op.op_name]:
                    v = op.builtin_options.get(key)
                    if v is not None and v < 1:
                        raise ModelError(
                            f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {key}={v}; "
                            "it must be at least 1")
            if op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and min(op.inputs) >= 0:
                assigned.setdefault(op.inputs[0], tensors[op.inputs[1]].shape)
            for t in op.inputs:
                p = producer.get(t)
                if p is not None and p >= op.index:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) reads tensor {t} "
                        f"before operator {p} writes it (operators must be in execution order)")
        for t in sg.outputs:
            if t not in producer and t not in sg_inputs and tensors[t].data is None and not tensors[t].is_variable:
                raise ModelError(
                    f"subgraph {sg.index} output tensor {t} ({tensors[t].name!r}) is written by no "
                    "operator and is neither an input nor a constant")
        # READ_VARIABLE's output is planned with its declared shape, but at
        # run time it takes the stored value's: a disagreement makes the next
        # operator read past the value's memory.
        for op in sg.operators:
            if op.op_name == "READ_VARIABLE" and op.inputs and op.outputs and op.inputs[0] in assigned:
                out = tensors[op.outputs[0]].shape
                val = assigned[op.inputs[0]]
                if out != val and -1 not in out and -1 not in val:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} (READ_VARIABLE) declares output shape "
                        f"{list(out)}, but the variable it reads holds values of shape {list(val)}")


# Zero points a quantized tensor of each type can hold.
_ZERO_POINT_RANGE = {"INT8": (-128, 127), "UINT8": (0, 255), "INT16": (-32768, 32767), "INT4": (-8, 7)}

# Fewest inputs each builtin takes (the ones the XNNPACK delegate handles).
_MIN_INPUTS = {
    **dict.fromkeys(
        "ABS AVERAGE_POOL_2D CEIL CONCATENATION DEPTH_TO_SPACE DEQUANTIZE ELU EXP FLOOR GELU HARD_SWISH "
        "LEAKY_RELU LOG LOGISTIC L2_NORMALIZATION MAX_POOL_2D NEG QUANTIZE RELU RELU6 RELU_N1_TO_1 "
        "RESHAPE ROUND RSQRT SOFTMAX SPACE_TO_DEPTH SQRT SQUARE TANH SIN COS SQUEEZE".split(), 1),
    **dict.fromkeys(
        "ADD BATCH_MATMUL CONV_2D DEPTHWISE_CONV_2D DIV FULLY_CONNECTED MAXIMUM MEAN MINIMUM MUL PAD "
        "PRELU RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR SPLIT SQUARED_DIFFERENCE SUB SUM TRANSPOSE "
        "REDUCE_MAX REDUCE_MIN REDUCE_PROD EXPAND_DIMS GATHER POW ASSIGN_VARIABLE".split(), 2),
    **dict.fromkeys("PADV2 SLICE SPLIT_V TRANSPOSE_CONV".split(), 3),
    "STRIDED_SLICE": 4,
    "READ_VARIABLE": 1,
}

# Most inputs, where it differs from the fewest (None: no limit).
_MAX_INPUTS = {"CONCATENATION": None, "RESHAPE": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 3,
               "FULLY_CONNECTED": 3, "TRANSPOSE_CONV": 4}

# Window options that must be positive, per op.
_WINDOW_OPTIONS = {
    "CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "DEPTHWISE_CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "TRANSPOSE_CONV": ("stride_w", "stride_h"),
    "AVERAGE_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "MAX_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "L2_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
}

# Where the conv-like ops allow an omitted input: the bias only.
_OPTIONAL_POSITIONS = {"CONV_2D": {2}, "DEPTHWISE_CONV_2D": {2}, "FULLY_CONNECTED": {2},
                       "TRANSPOSE_CONV": {3}, "CONV_3D": {2}, "CONV_3D_TRANSPOSE": {3}}

# Builtin ops whose schema allows an omitted (-1) input, e.g. a missing bias.
_OPTIONAL_INPUT_OPS = {
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D",
    "CONV_3D_TRANSPOSE", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN", "RNN", "UNIDIRECTIONAL_SEQUENCE_RNN", "SVDF", "LSH_PROJECTION",
    "CALL_ONCE", "WHILE", "IF", "STABLEHLO_COMPOSITE",
}
