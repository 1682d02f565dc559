"""The sizes the runtime's kernels can count: shared by the rules on the model and on planned shapes."""

from __future__ import annotations

import math

from ..schema import BUILTIN_OPERATORS
from .options import called_subgraphs

# XNNPACK's tensors have at most XNN_MAX_TENSOR_DIMS (6) dimensions; a deeper
# shape overruns its fixed-size shape arrays (rank 64 crashes the process, a
# rank-7 FULLY_CONNECTED silently gets a wrong output shape), and TFLite's
# own kernels handle at most 6 (most at most 4 or 5; a rank-8 constant added
# to a vector in a WHILE body crashed 2.17.1, tests/corpus).  The exceptions
# are the tensors of :func:`any_rank_tensors`.
MAX_RANK = 6

# Builtins whose kernels take tensors of any rank, so a tensor only they read
# and write may have more than MAX_RANK dimensions.  GATHER_ND
# (tensorflow/lite/kernels/gather_nd.cc) asks of its inputs only rank >= 1
# and an index depth inside the params' rank; its output has
# rank(indices) - 1 + rank(params) - depth dimensions, and it walks them with
# a RuntimeShape (heap-held beyond 6 dimensions) and a std::vector.  Measured
# on 2.17.1, 2.23.0 and ai-edge-litert: outputs of rank 7 to 10, params of
# rank 7 and 8, indices of rank 8 and an index depth of 7 all give the
# values of a numpy reference (tests/model/test_any_rank.py).  XNNPACK
# delegates no GATHER_ND, so its 6-dimension arrays never see these tensors.
#
# The others copy or convert values without looking at more than a flat
# split of the shape: GATHER (gather.cc: outer, gathered and inner sizes,
# indices of any rank), SQUEEZE (squeeze.cc: an input of at most 8
# dimensions, beyond which Prepare fails cleanly, then a memcpy),
# EXPAND_DIMS (expand_dims.cc: a new dimension, then a memcpy), CAST
# (cast.cc: element by element over the flat size), PACK and UNPACK
# (pack.cc, unpack.cc: outer and copy sizes around the axis).  Measured in
# child processes, each as the only operator, tensors of rank 7 (rank 8 for
# SQUEEZE's input and EXPAND_DIMS's output), float32, float16 and int8, on
# 2.17.1, 2.23.0 and ai-edge-litert with XNNPACK on and off: numpy's values
# everywhere, both declared deep and declared at rank 6 or less and resized
# deeper before the allocation (so that XNNPACK saw the node at a depth it
# takes; tests/model/test_any_rank.py), and so at rank 63 (64 for
# EXPAND_DIMS's and PACK's outputs) resized from a node declared at rank 2,
# where XNNPACK's fixed arrays would overflow if it kept the node.  A
# SQUEEZE input of rank 9 or more fails to prepare on every runtime, an
# error opaque_ops raises.  As for GATHER_ND, none of them is measured in
# a subgraph that control flow runs: that exclusion stays
# (:func:`any_rank_tensors`, called.py).
#
# Not here, measured the same way (tests/helpers/deep_ops.py), the refusal
# stays for each: RESHAPE, CONCATENATION, QUANTIZE and DEQUANTIZE run right
# when their tensors are declared deep (XNNPACK then leaves the node to
# TFLite's kernel).  Declared at rank 6 or less and resized to rank 7,
# XNNPACK keeps the node: RESHAPE and ADD then fail to prepare (an error),
# but CONCATENATION, QUANTIZE and DEQUANTIZE return a wrong shape on 2.17.1
# (QUANTIZE: [2, 1, 2, 1, 2, 1, 768] for [2, 1, 2, 1, 2, 1, 3]; 2.23.0
# fails to prepare), and a RESHAPE to a new shape of 7 entries whose output
# is declared shallower takes the process down at creation (refused by
# builtin_rules._reshape).  Allowing them would take a rule on the declared
# shapes and the runtime.
ANY_RANK_OPS = frozenset({"GATHER_ND", "GATHER", "SQUEEZE", "EXPAND_DIMS", "CAST", "PACK", "UNPACK"})

# Operators of any rank whose output may have more dimensions than any of
# their inputs (EXPAND_DIMS and PACK add one; GATHER's output has
# rank(params) - 1 + rank(indices), GATHER_ND's rank(indices) - 1 +
# rank(params) - depth): from inputs of 6 dimensions or less they can make a
# deep tensor (see allocated.deep_reach).
ADDS_DIMENSIONS = frozenset({"EXPAND_DIMS", "PACK", "GATHER", "GATHER_ND"})

# Builtins whose deep tensors depend on the runtime, so the model's tensors
# may be declared up to MAX_RANK_2_23 deep and the decision is
# taken where the runtime is known.  tensorflow/lite/kernels/add.cc, sub.cc
# and mul.cc take the elementwise path when both inputs have one shape (a
# flat loop: any rank) and broadcast otherwise.  2.17.1's broadcast helpers
# handle at most 6 dimensions (BroadcastAdd6DSlow, kMaxMulBroadcastDim in
# tensorflow/lite/kernels/internal/reference/add.h, mul.h): a rank-7
# broadcast gives wrong values (ADD, SUB) or aborts the process (MUL), in
# Eval, XNNPACK on or off.  2.23.0's broadcasts take 8 dimensions and abort
# in Eval on 9: those are judged on the planned shapes
# (version_rules.check_deep_elementwise).  TRANSPOSE (transpose.cc) takes
# "1D-6D" on 2.17.1 and "1D-8D" on 2.23.0, failing to prepare beyond (an
# error); 2.17.1's XNNPACK delegate copies the permutation into a 6-entry
# array while the interpreter is created (from 15 entries on, SIGSEGV), so
# a permutation of more than 6 entries is refused before the creation there
# (interpreter/core.py, model.cache.deep_transposes), and of more than 8 on
# every runtime (builtin_rules._transpose).  Measured in child processes,
# float32 (and int32 for ADD and MUL), each as the only operator: one shape or a broadcast, and
# TRANSPOSE (a reversal, a rotation), at ranks 7 and 8 declared deep give
# numpy's values on 2.23.0 and ai-edge-litert, XNNPACK on and off (XNNPACK
# leaves a node deeper than 6 dimensions to TFLite's kernel), and on 2.17.1
# the ADD, SUB and MUL whose inputs have one shape (tests/model/test_any_rank.py).
# A graph input declared at rank 6 or less and resized deeper stays refused
# (check_resize asks any_rank_tensors without these): XNNPACK then keeps the
# node, fails to prepare it at ranks 7 to 11 and overruns its fixed arrays
# from rank 12 on (SIGSEGV, 2.23.0).
DEEP_OPS_2_23 = frozenset({"ADD", "SUB", "MUL", "TRANSPOSE"})
MAX_RANK_2_23 = 8

# TFLite's kernels count elements in an ``int`` (RuntimeShape::FlatSize,
# NumElements used as int): beyond this the count wraps and they index
# outside their buffers.
MAX_ELEMENTS = 2**31 - 1

# Strides, dilations and pooling windows above this are refused.  1 is the
# schema's floor (kernels divide by strides); the ceiling is measured: on
# TFLite 2.17.1 the reference CONV_2D kernel dies (SIGFPE, or bad_alloc)
# from a stride of 2**15 on, and no real model comes near 4096.
MAX_WINDOW_PARAM = 4096


def elements(shape) -> int:
    """The element count of ``shape`` (Python ints: no overflow)."""
    return math.prod(map(int, shape))


# Their operator codes: the model's operator codes say whether one is used,
# without a pass over the operators.
_ADDS_DIMENSIONS_CODES = frozenset(BUILTIN_OPERATORS[name] for name in ADDS_DIMENSIONS)


def adds_dimensions(info) -> bool:
    """Whether a builtin of :data:`ADDS_DIMENSIONS` is among the operator codes of ``info`` (any subgraph)."""
    return any(code in _ADDS_DIMENSIONS_CODES for code, _custom, _version in info.operator_codes)


def any_rank_tensors(info, sg, from_2_23: bool = False) -> frozenset[int]:
    """The tensors of ``sg`` that may have more than :data:`MAX_RANK` dimensions.

    Parameters
    ----------
    info : ModelInfo
        The model (for the control flow that may call ``sg``).
    sg : SubgraphInfo
        One of its subgraphs (``info.subgraphs[0]`` may be another subgraph
        moved there: ``sg.index`` is its index in the model as stored).
    from_2_23 : bool, optional
        Count the builtins of :data:`DEEP_OPS_2_23` with those of
        :data:`ANY_RANK_OPS` (for the declared and planned shapes, whose
        depth the runtime's rule then judges; not for a resize, which
        XNNPACK would see in a node it kept).

    Returns
    -------
    frozenset of int
        The tensors some operator of ``sg`` reads or writes and that only
        builtins of :data:`ANY_RANK_OPS` (and :data:`DEEP_OPS_2_23`,
        with ``from_2_23``) read and write; none in a subgraph that WHILE,
        IF or CALL_ONCE call.

    Notes
    -----
    A called subgraph is left out because its declared shapes are not the
    ones it runs on (its kernel prepares it on the caller's), and those
    kernels copy its outputs' shapes to the caller's tensors, which other
    operators read.  A deep shape that GATHER_ND gives there is followed
    from the caller's planned shapes instead
    (:func:`~.allocated.check_allocated_shapes`, :mod:`.called`).  Run only
    when a tensor is deeper than :data:`MAX_RANK` (one pass over the
    operators).
    """
    for other in info.subgraphs:
        for op in other.operators:
            if sg.index in called_subgraphs(op):
                return frozenset()
    used: set[int] = set()
    refused: set[int] = set()
    allowed = ANY_RANK_OPS | DEEP_OPS_2_23 if from_2_23 else ANY_RANK_OPS
    for op in sg.operators:
        into = used if op.op_name in allowed and not op.is_custom else refused
        into.update(t for t in (*op.inputs, *op.outputs) if t >= 0)
    return frozenset(used - refused)


def deep_transposes(info) -> tuple:
    """The TRANSPOSEs of ``info`` whose permutation has more than :data:`MAX_RANK` entries.

    Parameters
    ----------
    info : ModelInfo
        The model (every subgraph).

    Returns
    -------
    tuple
        ``(subgraph, operator, entries)`` for each: indices, and the
        permutation's declared length.  A runtime older than 2.23 refuses
        them before its interpreter is created (see :data:`DEEP_OPS_2_23`);
        kept in the model's record by :func:`opaque_ops.model.cache.deep_transposes`.
    """
    found = []
    for sg in info.subgraphs:
        for op in sg.operators:
            if op.op_name == "TRANSPOSE" and not op.is_custom and len(op.inputs) >= 2 and op.inputs[1] >= 0:
                perm = sg.tensors[op.inputs[1]].shape
                if len(perm) == 1 and perm[0] > MAX_RANK:
                    found.append((sg.index, op.index, int(perm[0])))
    return tuple(found)
