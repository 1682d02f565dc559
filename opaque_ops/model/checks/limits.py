"""The sizes the runtime's kernels can count: shared by the rules on the model and on planned shapes."""

from __future__ import annotations

import math

# XNNPACK's tensors have at most XNN_MAX_TENSOR_DIMS (6) dimensions; a deeper
# shape overruns its fixed-size shape arrays (rank 64 crashes the process, a
# rank-7 FULLY_CONNECTED silently gets a wrong output shape), and TFLite's
# own kernels handle at most 6 (most at most 4 or 5).
MAX_RANK = 6

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
