"""Models with string tensors (builtin ops only) and a kernel that writes broken string buffers.

The string tests of tests/interpreter/test_strings.py and tests/isolate/ share them.
"""

from __future__ import annotations

import numpy as np

from opaque_ops.model import ModelBuilder
from opaque_ops.testing import build_op_model

# name -> (shape, value given to set_tensor)
VALUES = {
    "bytes, NUL inside, empty": ((3,), np.array([b"ab", b"", b"xyz\x00q"])),
    "str, non-ASCII": ((3,), np.array(["ab", "\u00e9", "\u65e5\u672c\u8a9e"])),
    "objects, bytes and str, trailing NUL": ((3,), np.array([b"ab\x00", "\u00e9", b""], dtype=object)),
    "bytes_ array, trailing NULs": ((3,), np.array([b"a\x00\x00", b"\x00b", b"c"])),
    "shape 2x3": ((2, 3), np.array([[b"a", b"bb", b""], ["ccc", "d", "\u00e9t\u00e9"]], dtype=object)),
    "shape 0": ((0,), np.array([], dtype="S1")),
    "a list of str": ((2,), ["x", "yz"]),
    "over 64 KiB": ((2,), np.array([bytes(range(256)) * 280, b"end"], dtype=object)),
}


def reshape_model(shape) -> bytes:
    """y = reshape(x) for string x of ``shape`` (any shape accepted: the signature is all -1)."""
    b = ModelBuilder()
    x = b.add_tensor("x", list(shape), "STRING", shape_signature=[-1] * len(shape))
    s = b.add_constant("s", np.array(shape, np.int32))
    y = b.add_tensor("y", list(shape), "STRING", shape_signature=[-1] * len(shape))
    b.add_op("RESHAPE", [x, s], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("serving_default", {"words": x}, {"same": y})
    return b.build()


GATHER_INDICES = np.array([2, 0, 1, 2], np.int32)


def gather_model() -> bytes:
    """y = x[GATHER_INDICES] for string x of shape [3]: TFLite's GATHER parses x's buffer and writes y's
    (string_util's reader and DynamicBuffer), so y shows whether x was written in TFLite's layout."""
    b = ModelBuilder()
    x = b.add_tensor("x", [3], "STRING")
    i = b.add_constant("i", GATHER_INDICES)
    y = b.add_tensor("y", [len(GATHER_INDICES)], "STRING")
    b.add_op("GATHER", [x, i], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


# BrokenStrings: writes the strings "ab", "c" with TFLite's own
# TfLiteOpaqueTensorWriteStrings (buffer: count 2, offsets 16 18 19, "abc"),
# then breaks the header as its int32 input says: 0 leaves it as TFLite wrote it.
BROKEN_STRINGS = r"""
#include "opaque_ops.h"

static TfLiteStatus BrokenStringsInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
  const int32_t* how = (const int32_t*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetInput(c, n, 0));
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(c, n, 0);
  const char* strings[2] = {"ab", "c"};
  const int lengths[2] = {2, 1};
  if (TfLiteOpaqueTensorWriteStrings(out, strings, 2, lengths) != kTfLiteOk) return kTfLiteError;
  int32_t* head = (int32_t*)TfLiteOpaqueTensorData(out);
  switch (how[0]) {
    case 1: head[0] = 1000; break;        /* more strings than the buffer has offsets for */
    case 2: head[0] = -1; break;          /* a negative count */
    case 3: head[3] = 1 << 20; break;     /* the last string ends far past the buffer */
    case 4: head[2] = 12; break;          /* offsets go backwards */
    case 5: head[1] = 0; break;           /* the first string starts inside the header */
    case 6: head[0] = 1; head[2] = 19; break; /* one string: fewer than the tensor's 2 elements */
  }
  return kTfLiteOk;
}

OPAQUE_OP("BrokenStrings", 1, .invoke = BrokenStringsInvoke);
"""


def broken_strings_model() -> bytes:
    """One BrokenStrings op: int32 [1] in, string [2] out."""
    return build_op_model("BrokenStrings", [np.zeros(1, np.int32)], [([2], "STRING")])
