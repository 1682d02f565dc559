"""The parts of TFLite's ``schema.fbs`` (schema version 3) that this package reads and writes.

Enum values and option-table field slots are written out from the public
schema; no generated flatbuffer code is used."""

from __future__ import annotations

from typing import Any

import numpy as np

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
    "FLOAT32": 0,
    "FLOAT16": 1,
    "INT32": 2,
    "UINT8": 3,
    "INT64": 4,
    "STRING": 5,
    "BOOL": 6,
    "INT16": 7,
    "COMPLEX64": 8,
    "INT8": 9,
    "FLOAT64": 10,
    "COMPLEX128": 11,
    "UINT64": 12,
    "RESOURCE": 13,
    "VARIANT": 14,
    "UINT32": 15,
    "UINT16": 16,
    "INT4": 17,
    "BFLOAT16": 18,
    "INT2": 19,
    "UINT4": 20,
    "FLOAT8_E4M3FN": 21,
    "FLOAT8_E5M2": 22,
}
#: Inverse of :data:`TENSOR_TYPES`.
TENSOR_TYPE_NAMES: dict[int, str] = {v: k for k, v in TENSOR_TYPES.items()}

# Types without a numpy equivalent (STRING, RESOURCE, VARIANT, packed
# sub-byte ints, BFLOAT16, FLOAT8) map to None.
_TYPE_TO_NUMPY: dict[int, np.dtype | None] = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    2: np.dtype(np.int32),
    3: np.dtype(np.uint8),
    4: np.dtype(np.int64),
    5: None,
    6: np.dtype(np.bool_),
    7: np.dtype(np.int16),
    8: np.dtype(np.complex64),
    9: np.dtype(np.int8),
    10: np.dtype(np.float64),
    11: np.dtype(np.complex128),
    12: np.dtype(np.uint64),
    13: None,
    14: None,
    15: np.dtype(np.uint32),
    16: np.dtype(np.uint16),
    17: None,
    18: None,
}
_NUMPY_TO_TYPE: dict[np.dtype, int] = {d: t for t, d in _TYPE_TO_NUMPY.items() if d is not None}

#: ActivationFunctionType enum: name -> value.
ACTIVATIONS: dict[str, int] = {
    "NONE": 0,
    "RELU": 1,
    "RELU_N1_TO_1": 2,
    "RELU6": 3,
    "TANH": 4,
    "SIGN_BIT": 5,
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
# enums read as their names, "i8" one read as its number (TFLite's bytes are
# signed), "u8", "i32", "f32", "bool", "[i32]", "str" (a string; both readers
# keep bytes that are not UTF-8 as surrogate escapes, since TFLite takes any
# bytes there).  tests/model/test_writer.py
# checks every slot and kind against TFLite's generated schema.
_OPTION_FIELDS: dict[str, list[tuple[str, int, str, Any]]] = {
    "Conv2DOptions": [
        ("padding", 0, "pad", 0),
        ("stride_w", 1, "i32", 0),
        ("stride_h", 2, "i32", 0),
        ("fused_activation_function", 3, "act", 0),
        ("dilation_w_factor", 4, "i32", 1),
        ("dilation_h_factor", 5, "i32", 1),
    ],
    "DepthwiseConv2DOptions": [
        ("padding", 0, "pad", 0),
        ("stride_w", 1, "i32", 0),
        ("stride_h", 2, "i32", 0),
        ("depth_multiplier", 3, "i32", 0),
        ("fused_activation_function", 4, "act", 0),
        ("dilation_w_factor", 5, "i32", 1),
        ("dilation_h_factor", 6, "i32", 1),
    ],
    "Pool2DOptions": [
        ("padding", 0, "pad", 0),
        ("stride_w", 1, "i32", 0),
        ("stride_h", 2, "i32", 0),
        ("filter_width", 3, "i32", 0),
        ("filter_height", 4, "i32", 0),
        ("fused_activation_function", 5, "act", 0),
    ],
    "FullyConnectedOptions": [
        ("fused_activation_function", 0, "act", 0),
        ("weights_format", 1, "i8", 0),
        ("keep_num_dims", 2, "bool", False),
        ("asymmetric_quantize_inputs", 3, "bool", False),
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
    "UniqueOptions": [("idx_out_type", 0, "dtype", 2)],
    "ShapeOptions": [("out_type", 0, "dtype", 0)],
    "DequantizeOptions": [],
    "QuantizeOptions": [],
    "SplitOptions": [("num_splits", 0, "i32", 0)],
    "SplitVOptions": [("num_splits", 0, "i32", 0)],
    "StridedSliceOptions": [
        ("begin_mask", 0, "i32", 0),
        ("end_mask", 1, "i32", 0),
        ("ellipsis_mask", 2, "i32", 0),
        ("new_axis_mask", 3, "i32", 0),
        ("shrink_axis_mask", 4, "i32", 0),
        ("offset", 5, "bool", False),
    ],
    "TransposeConvOptions": [
        ("padding", 0, "pad", 0),
        ("stride_w", 1, "i32", 0),
        ("stride_h", 2, "i32", 0),
        ("fused_activation_function", 3, "act", 0),
    ],
    "PackOptions": [("values_count", 0, "i32", 0), ("axis", 1, "i32", 0)],
    "UnpackOptions": [("num", 0, "i32", 0), ("axis", 1, "i32", 0)],
    "DepthToSpaceOptions": [("block_size", 0, "i32", 0)],
    "SpaceToDepthOptions": [("block_size", 0, "i32", 0)],
    "BatchMatMulOptions": [
        ("adj_x", 0, "bool", False),
        ("adj_y", 1, "bool", False),
        ("asymmetric_quantize_inputs", 2, "bool", False),
    ],
    "ResizeBilinearOptions": [("align_corners", 2, "bool", False), ("half_pixel_centers", 3, "bool", False)],
    "ResizeNearestNeighborOptions": [("align_corners", 0, "bool", False), ("half_pixel_centers", 1, "bool", False)],
    "WhileOptions": [("cond_subgraph_index", 0, "i32", 0), ("body_subgraph_index", 1, "i32", 0)],
    "IfOptions": [("then_subgraph_index", 0, "i32", 0), ("else_subgraph_index", 1, "i32", 0)],
    "CallOnceOptions": [("init_subgraph_index", 0, "i32", 0)],
    "VarHandleOptions": [("container", 0, "str", ""), ("shared_name", 1, "str", "")],
    "MirrorPadOptions": [("mode", 0, "i8", 0)],
    "ArgMaxOptions": [("output_type", 0, "dtype", 0)],
    "ArgMinOptions": [("output_type", 0, "dtype", 0)],
    "OneHotOptions": [("axis", 0, "i32", 0)],
    "ReverseSequenceOptions": [("seq_dim", 0, "i32", 0), ("batch_dim", 1, "i32", 0)],
    "Conv3DOptions": [
        ("padding", 0, "pad", 0),
        ("stride_d", 1, "i32", 0),
        ("stride_w", 2, "i32", 0),
        ("stride_h", 3, "i32", 0),
        ("fused_activation_function", 4, "act", 0),
        ("dilation_d_factor", 5, "i32", 1),
        ("dilation_w_factor", 6, "i32", 1),
        ("dilation_h_factor", 7, "i32", 1),
    ],
    "L2NormOptions": [("fused_activation_function", 0, "act", 0)],
    "LocalResponseNormalizationOptions": [
        ("radius", 0, "i32", 0),
        ("bias", 1, "f32", 0.0),
        ("alpha", 2, "f32", 0.0),
        ("beta", 3, "f32", 0.0),
    ],
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
    "SHAPE": "ShapeOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "GATHER": "GatherOptions",
    "LEAKY_RELU": "LeakyReluOptions",
    "CAST": "CastOptions",
    "UNIQUE": "UniqueOptions",
    "DEQUANTIZE": "DequantizeOptions",
    "QUANTIZE": "QuantizeOptions",
    "SPLIT": "SplitOptions",
    "SPLIT_V": "SplitVOptions",
    "STRIDED_SLICE": "StridedSliceOptions",
    "TRANSPOSE_CONV": "TransposeConvOptions",
    "PACK": "PackOptions",
    "UNPACK": "UnpackOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions",
    "SPACE_TO_DEPTH": "SpaceToDepthOptions",
    "BATCH_MATMUL": "BatchMatMulOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "WHILE": "WhileOptions",
    "IF": "IfOptions",
    "CALL_ONCE": "CallOnceOptions",
    "VAR_HANDLE": "VarHandleOptions",
    "MIRROR_PAD": "MirrorPadOptions",
    "ARG_MAX": "ArgMaxOptions",
    "ARG_MIN": "ArgMinOptions",
    "ONE_HOT": "OneHotOptions",
    "REVERSE_SEQUENCE": "ReverseSequenceOptions",
    "CONV_3D": "Conv3DOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions",
}

# TFLite's kernels read fused activations and strides from these tables and
# some crash or misbehave when the table is absent, so write it even when the
# caller passes no options.
_OPTIONS_ALWAYS = {
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "FULLY_CONNECTED",
    "CONCATENATION",
    "SOFTMAX",
}


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
