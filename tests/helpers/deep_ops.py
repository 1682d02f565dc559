"""One-op models whose tensors have 7 dimensions, with a numpy reference from each op's definition.

Shared by tests/model/test_any_rank.py and the child processes it starts
(the runs that could crash a runtime are made there).  Each case gives the
model, its inputs (in the graph's input order) and numpy's outputs.  A
case built ``resized`` declares each graph input and output of rank 6 or 7 one
dimension shallower (its two first dimensions merged) and is resized to the real, rank-7 shapes
before the allocation: the XNNPACK delegate, applied when the interpreter
is created, then sees rank-6 tensors only.
"""

from __future__ import annotations

import numpy as np

from opaque_ops.model import ModelBuilder

F32, I8, I32 = np.float32, np.int8, np.int32

# The rank-7 shapes the cases use; B broadcasts against A.
A = (2, 1, 2, 1, 2, 1, 3)
B = (1, 2, 1, 2, 1, 2, 1)
SIX = (2, 2, 2, 2, 2, 3)
QUANT = {"scale": [0.05], "zero_point": [3]}


def _merged(shape) -> list[int]:
    """``shape`` with its first two dimensions merged when it has 6 or more (7 -> 6, 6 -> 5)."""
    shape = list(shape)
    return [shape[0] * shape[1], *shape[2:]] if len(shape) >= 6 else shape


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _values(name: str, shape, dtype) -> np.ndarray:
    rng = _rng(name + str(shape))
    if np.dtype(dtype) == np.int8:
        return rng.integers(-128, 128, shape).astype(dtype)
    # (Away from the .5 ties where numpy's rounding and TFLite's differ.)
    return (rng.integers(-40, 40, shape) / 8 + 0.01).astype(dtype)


def _quantize(x: np.ndarray) -> np.ndarray:
    """QUANTIZE by its definition: round(x / scale) + zero point, clamped to int8."""
    q = np.round(x / np.float32(QUANT["scale"][0])) + QUANT["zero_point"][0]
    return np.clip(q, -128, 127).astype(I8)


def _dequantize(q: np.ndarray) -> np.ndarray:
    """DEQUANTIZE by its definition, (q - zero point) * scale, as TFLite rounds it: q * scale - zero point * scale,
    in float32 (the scale as the model stores it)."""
    scale = np.float32(QUANT["scale"][0])
    return q.astype(F32) * scale - np.float32(QUANT["zero_point"][0]) * scale


# name: (op, graph inputs [(shape, dtype, quantized)], constants [array], output(s) [(shape, dtype, quantized)],
#        options, numpy reference of the inputs and constants)
def _cases() -> dict:
    def binary(op, f, y_shape):
        return (op, [(A, F32, False), (y_shape, F32, False)], [], None, None, f)

    return {
        "RESHAPE rank 7 to 4": ("RESHAPE", [(A, F32, False)], [np.array([2, 2, 2, 3], I32)], None, None,
                                lambda x, s: x.reshape(s)),
        "RESHAPE rank 4 to 7": ("RESHAPE", [((2, 2, 2, 3), F32, False)], [np.array(A, I32)], None, None,
                                lambda x, s: x.reshape(s)),
        "ADD same shape": binary("ADD", np.add, A),
        "ADD broadcast": binary("ADD", np.add, B),
        "ADD of a vector": ("ADD", [(A, F32, False)], [_values("vector", (3,), F32)], None, None, np.add),
        "MUL broadcast": binary("MUL", np.multiply, B),
        "SUB broadcast": binary("SUB", np.subtract, B),
        "SUB same shape": binary("SUB", np.subtract, A),
        "MUL same shape": binary("MUL", np.multiply, A),
        "MUL of a vector": ("MUL", [(A, F32, False)], [_values("vector", (3,), F32)], None, None, np.multiply),
        "MUL int32 broadcast": ("MUL", [(A, I32, False), (B, I32, False)], [], None, None, np.multiply),
        "ADD int32 same shape": ("ADD", [(A, I32, False), (A, I32, False)], [], None, None, np.add),
        "ADD broadcast rank 8": binary("ADD", np.add, (1, *B)),
        "SUB broadcast rank 8": ("SUB", [((2, *A), F32, False), (B, F32, False)], [], None, None, np.subtract),
        "MUL broadcast rank 8": ("MUL", [((1, *A), F32, False), ((2, *B), F32, False)], [], None, None,
                                 np.multiply),
        "ADD same shape rank 8": ("ADD", [((2, *A), F32, False), ((2, *A), F32, False)], [], None, None, np.add),
        "ADD broadcast rank 9": ("ADD", [((1, 1, *A), F32, False), (B, F32, False)], [], None, None, np.add),
        "MUL same shape rank 9": ("MUL", [((1, 2, *A), F32, False), ((1, 2, *A), F32, False)], [], None, None,
                                  np.multiply),
        "TRANSPOSE": ("TRANSPOSE", [(A, F32, False)], [np.arange(6, -1, -1, dtype=I32)], None, None,
                      lambda x, p: x.transpose(p)),
        "TRANSPOSE rotation": ("TRANSPOSE", [(A, F32, False)], [np.array([1, 2, 3, 4, 5, 6, 0], I32)], None, None,
                               lambda x, p: x.transpose(p)),
        "TRANSPOSE rank 8": ("TRANSPOSE", [((2, *A), F32, False)], [np.array([7, 0, 5, 2, 3, 4, 1, 6], I32)], None,
                             None, lambda x, p: x.transpose(p)),
        "TRANSPOSE rank 9": ("TRANSPOSE", [((1, 2, *A), F32, False)], [np.arange(8, -1, -1, dtype=I32)], None, None,
                             lambda x, p: x.transpose(p)),
        "CONCATENATION": ("CONCATENATION", [(A, F32, False), (A, F32, False)], [], None, {"axis": 3},
                          lambda x, y: np.concatenate([x, y], 3)),
        "SQUEEZE": ("SQUEEZE", [(A, F32, False)], [], None, {"squeeze_dims": [1]},
                    lambda x: x.squeeze(1)),
        "EXPAND_DIMS": ("EXPAND_DIMS", [(SIX, F32, False)], [np.array([1], I32)], None, None,
                        lambda x, a: np.expand_dims(x, int(a[0]))),
        "CAST": ("CAST", [(A, F32, False)], [], [(A, I32, False)], None, lambda x: x.astype(I32)),
        "QUANTIZE": ("QUANTIZE", [(A, F32, False)], [], [(A, I8, True)], None, _quantize),
        "DEQUANTIZE": ("DEQUANTIZE", [(A, I8, True)], [], [(A, F32, False)], None, _dequantize),
        "PACK": ("PACK", [(SIX, F32, False), (SIX, F32, False)], [], None, {"values_count": 2, "axis": 0},
                 lambda x, y: np.stack([x, y])),
        "UNPACK": ("UNPACK", [(A, F32, False)], [], [(A[1:], F32, False)] * 2, {"num": 2, "axis": 0},
                   lambda x: (x[0], x[1])),
        "GATHER": ("GATHER", [(A, F32, False)], [np.array([1, 0, 1], I32)], None, {"axis": 2},
                   lambda x, i: np.take(x, i, axis=2)),
        "GATHER of rank-7 indices": ("GATHER", [((3, 4), F32, False)], [_values("ix", A, I8).astype(I32) % 4], None,
                                     {"axis": 1}, lambda x, i: np.take(x, i, axis=1)),
        "CAST float16 to float32": ("CAST", [(A, np.float16, False)], [], [(A, F32, False)], None,
                                    lambda x: x.astype(F32)),
        "CAST int8 to float32": ("CAST", [(A, I8, False)], [], [(A, F32, False)], None, lambda x: x.astype(F32)),
        "SQUEEZE rank 8": ("SQUEEZE", [((1, *A), F32, False)], [], None, {}, lambda x: x.squeeze()),
        "SQUEEZE rank 9": ("SQUEEZE", [((1, 1, *A), F32, False)], [], None, {}, lambda x: x.squeeze()),
        "PACK int8 on the last axis": ("PACK", [(SIX, I8, False)] * 3, [], None, {"values_count": 3, "axis": -1},
                                       lambda *xs: np.stack(xs, -1)),
        "UNPACK on the last axis": ("UNPACK", [(A, F32, False)], [], [(A[:-1], F32, False)] * 3,
                                    {"num": 3, "axis": -1}, lambda x: tuple(np.moveaxis(x, -1, 0))),
        "EXPAND_DIMS rank 7 to 8": ("EXPAND_DIMS", [(A, F32, False)], [np.array([-1], I32)], None, None,
                                    lambda x, a: np.expand_dims(x, int(a[0]))),
    }  # fmt: skip


CASES = _cases()


def case(name: str, resized: bool = False):
    """``(model, inputs, wants)`` for ``CASES[name]``: its graph inputs' values and numpy's outputs.

    ``resized``: declare each graph input and output at rank 6 (see the module's notes).
    """
    op, ins, consts, outs, options, f = CASES[name]
    inputs = [_values(f"{name}{k}", shape, dtype) for k, (shape, dtype, _) in enumerate(ins)]
    wants = f(*inputs, *consts)
    wants = list(wants) if isinstance(wants, tuple) else [wants]
    if outs is None:
        outs = [(w.shape, w.dtype, False) for w in wants]
    declare = _merged if resized else list
    b = ModelBuilder()
    ids = [
        b.add_tensor(f"x{k}", declare(shape), dtype, quantization=QUANT if q else None)
        for k, (shape, dtype, q) in enumerate(ins)
    ]
    cids = [b.add_constant(f"c{k}", c) for k, c in enumerate(consts)]
    out_ids = [
        b.add_tensor(f"y{k}", declare(shape), dtype, quantization=QUANT if q else None)
        for k, (shape, dtype, q) in enumerate(outs)
    ]
    b.add_op(op, [*ids, *cids], out_ids, options)
    b.set_inputs(ids)
    b.set_outputs(out_ids)
    return b.build(), inputs, wants
