"""Rules on each tensor as stored: shape, byte size, quantization, sparsity, and which may be an input."""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from . import messages
from .limits import DEEP_OPS_2_23, MAX_ELEMENTS, MAX_RANK, MAX_RANK_2_23, any_rank_tensors, elements

# Element sizes of the fixed-size types numpy has no dtype for (sub-byte
# types are packed and left out).
_WHOLE_BYTE_TYPES = {"BFLOAT16": 2, "FLOAT8_E4M3FN": 1, "FLOAT8_E5M2": 1}

# Tensor types that hold handles, not data.
HANDLE_TYPES = frozenset({"RESOURCE", "VARIANT"})

# Zero points a quantized tensor of each type can hold.
_ZERO_POINT_RANGE = {"INT8": (-128, 127), "UINT8": (0, 255), "INT16": (-32768, 32767), "INT4": (-8, 7)}

_F32_TINY = float(np.finfo(np.float32).tiny)


def check_subgraph_inputs(sg) -> None:
    """No subgraph input is a constant."""
    for t in sg.inputs:
        if sg.tensors[t].data is not None:
            # TFLite plans an input in the arena and lets set_tensor write
            # it, but a constant's buffer is the model's read-only bytes.
            raise ModelError(
                f"{messages.subgraph_io(sg, 'input', t)} is a constant (it has data "
                "in the model); a subgraph input must be a tensor without data"
            )


def check_tensor(sg, t, any_rank=None) -> None:
    """One tensor's shape, stored bytes, sparsity and quantization, in that order.

    ``any_rank(tensor index) -> bool``: whether the tensor may have more than
    :data:`MAX_RANK` dimensions (:func:`deeper_allowed`); default: none may.
    """
    count = _check_shape(sg, t, any_rank)
    if t.is_sparse:
        if t.data is None:
            # Only constants can be stored sparse (DENSIFY expands them
            # once); the XNNPACK delegate trusts the flag on any tensor.
            raise ModelError(
                f"{messages.tensor(sg, t)} has sparsity parameters but no data; only constant tensors can be sparse"
            )
        check_sparsity(sg, t)
    elif t.data is not None:  # (the rule's own first test, before the call: most tensors have no data)
        _check_dense_size(sg, t, count)
    quant = t.quantization
    if len(quant["scales"]) or len(quant["zero_points"]) or t.type_name == "INT4":  # (likewise)
        _check_quantization(sg, t)


def deeper_allowed(info, sg):
    """``any_rank(tensor index, rank=None) -> bool`` for :func:`check_tensor` on ``sg``'s tensors.

    True for a tensor that may have more than :data:`MAX_RANK` dimensions:
    one that only builtins of :data:`~.limits.ANY_RANK_OPS` touch, at any
    rank, or that :data:`~.limits.DEEP_OPS_2_23` touch too, when
    ``rank`` is at most :data:`~.limits.MAX_RANK_2_23` or not
    given (the planned shapes: the runtime's rule judges those,
    :func:`~.version_rules.check_deep_elementwise`) and the model declares
    it deeper than MAX_RANK.  (Declared shallower, its node may be one the
    XNNPACK delegate kept when the interpreter was created, and it fails to
    prepare it deeper, or overruns its arrays: see :mod:`.limits`.)
    :func:`~.limits.any_rank_tensors` runs on the first question only: most
    models have no tensor deeper than :data:`MAX_RANK`.
    """
    found = None

    def any_rank(t: int, rank: int | None = None) -> bool:
        nonlocal found
        if found is None:
            found = (any_rank_tensors(info, sg), any_rank_tensors(info, sg, from_2_23=True))
        if t in found[0]:
            return True
        deep = t in found[1] and len(sg.tensors[t].shape) > MAX_RANK
        return deep and (rank is None or rank <= MAX_RANK_2_23)

    return any_rank


def _check_shape(sg, t, any_rank) -> int:
    """Rank, signs and element count of the stored shape; returns the count."""
    shape, sig = t.shape, t.shape_signature
    rank = max(len(shape), len(sig) if sig is not None else 0)
    if rank > MAX_RANK and not (any_rank is not None and any_rank(t.index, rank)):
        if rank > MAX_RANK_2_23 and any_rank is not None and any_rank(t.index):
            ops = ", ".join(sorted(DEEP_OPS_2_23))
            raise ModelError(
                f"{messages.tensor(sg, t)} has rank {rank}; {ops} take at most {MAX_RANK_2_23} "
                f"dimensions (TFLite 2.23's kernels; ADD, SUB and MUL abort the process on more). Reshape it to at most "
                f"{MAX_RANK_2_23} dimensions"
            )
        raise ModelError(
            f"{messages.tensor(sg, t)} has rank {len(shape)}; the runtime supports at most {MAX_RANK} dimensions"
        )
    if sig is not None and len(sig) and (len(sig) != len(shape) or any(s != -1 and s != d for s, d in zip(sig, shape))):
        # The schema's shape_signature is the shape with -1 where a
        # dimension may vary.  XNNPACK plans its partitions from the
        # signature and TFLite's kernels from the shape: a rank-3 shape with
        # a rank-4 signature on melspectrogram's convolution input divided by
        # zero inside the delegate's planning (SIGFPE, fuzz_structured 45:17481).
        raise ModelError(
            f"{messages.tensor(sg, t)} has shape {list(shape)} but shape_signature {list(sig)}; the "
            "signature must be the shape with -1 where a dimension may vary. Convert the model again"
        )
    if not shape:
        return 1
    if min(shape) < 0:
        # Unknown dimensions belong in shape_signature (-1); the shape
        # itself is what TFLite allocates, and it trusts it.
        raise ModelError(
            f"{messages.tensor(sg, t)} has shape {list(shape)}; dimensions must be >= 0 (-1 belongs in shape_signature)"
        )
    count = elements(shape)
    if count > MAX_ELEMENTS:
        raise ModelError(f"{messages.tensor(sg, t)} has shape {list(shape)}: more than {MAX_ELEMENTS} elements")
    return count


def _check_dense_size(sg, t, count: int) -> None:
    """Dense constant data no longer than its shape says."""
    data = t.data
    if data is None or (t.dtype is None and t.type_name not in _WHOLE_BYTE_TYPES):
        return
    # TFLite only checks that dense data is not shorter than the shape
    # (sparse tensors are legitimately shorter, so that is left to it); a
    # longer buffer with a zero dimension (a 1x0x1x32 filter holding 160
    # bytes) divides by zero in the kernels, and an int32 constant retyped
    # BFLOAT16 (twice the bytes its shape says) crashed XNNPACK's TRANSPOSE.
    want = count * (t.dtype.itemsize if t.dtype is not None else _WHOLE_BYTE_TYPES[t.type_name])
    if len(data) > want:
        raise ModelError(
            f"{messages.tensor(sg, t)} has shape {list(t.shape)} "
            f"({want} bytes of {t.type_name}) but {len(data)} bytes of data"
        )


def _check_quantization(sg, t) -> None:
    """Scales present for int4, finite, positive and normal; zero points inside the type's range."""
    quant = t.quantization
    scales = quant["scales"]
    if t.type_name == "INT4" and not len(scales):
        # TFLite has no unquantized int4: its kernels (and XNNPACK's) read
        # int4 weights through their affine quantization, which is absent
        # here (SIGSEGV at address 0 in FULLY_CONNECTED, with XNNPACK and
        # without: fuzz_structured 43:25066).
        raise ModelError(
            f"{messages.tensor(sg, t)} is INT4 without quantization scales; TFLite reads int4 values only as "
            "quantized weights, through their scales. Convert the model again (or give the tensor its scales)"
        )
    # XNNPACK derives requantization multipliers from the scales when the
    # interpreter is created; a NaN or infinite one crashes it.  Subnormal
    # scales overflow the same multipliers.
    if len(scales):
        good = np.isfinite(scales) & (scales >= _F32_TINY)
        if not good.all():
            raise ModelError(
                f"{messages.tensor(sg, t)} has quantization scale(s) "
                f"{scales[~good][:4].tolist()}: scales must be finite and positive (normal floats)"
            )
    zps = quant["zero_points"]
    if len(zps):
        lim = _ZERO_POINT_RANGE.get(t.type_name)
        if lim is not None and ((zps < lim[0]) | (zps > lim[1])).any():
            bad = zps[(zps < lim[0]) | (zps > lim[1])][:4].tolist()
            raise ModelError(
                f"{messages.tensor(sg, t)} has zero point(s) {bad} outside the {t.type_name} range [{lim[0]}, {lim[1]}]"
            )


def check_sparsity(sg, t) -> None:
    """The structure TFLite's DENSIFY and the XNNPACK delegate walk without checking.

    The rules are those of the schema's SparsityParameters (the ones
    TFLite's optional model verifier applies, which TfLiteModelCreate does
    not run): the traversal order is a permutation covering the tensor's
    dimensions then its block dimensions, each block dimension names a
    tensor dimension, one metadata entry per traversed dimension; a dense
    entry's size is that dimension's, a sparse (CSR) entry has segments
    that start at 0, never decrease and end at its index count, and indices
    inside the dimension; and the stored values are exactly the data.
    """
    where = f"{messages.tensor(sg, t)}: sparsity"
    sp = t.sparsity or {}
    rank = len(t.shape)
    order, blocks, dims = sp.get("traversal_order", []), sp.get("block_map") or [], sp.get("dim_metadata", [])
    n = rank + len(blocks)
    if sorted(order) != list(range(n)) or sorted(order[:rank]) != list(range(rank)):
        raise ModelError(
            f"{where} traversal_order {order} is not a permutation of the {rank} dimensions "
            f"followed by the {len(blocks)} block dimensions"
        )
    if any(not 0 <= b < rank for b in blocks) or len(set(blocks)) != len(blocks):
        raise ModelError(f"{where} block_map {blocks} must name distinct dimensions of the rank-{rank} tensor")
    if len(dims) != n:
        raise ModelError(f"{where} has {len(dims)} dim_metadata entries for {n} traversed dimensions")
    if t.data is None or t.dtype is None or min(t.shape, default=1) < 0:
        raise ModelError(f"{where} is on a tensor without data (or of a type without fixed size)")
    sizes = _traversed_sizes(where, t, order, blocks, dims)
    count = _stored_values(where, dims, sizes)
    if count * t.dtype.itemsize != len(t.data):
        raise ModelError(
            f"{where} describes {count} stored values but the tensor has {len(t.data)} bytes of {t.type_name}"
        )


def _traversed_sizes(where: str, t, order, blocks, dims) -> list:
    """Sizes of the traversed dimensions: blocked dimensions are counted in
    blocks, and each block dimension holds the block size (the dense size
    stored for it)."""
    rank, n = len(t.shape), len(order)
    sizes = []
    block_size = {}
    for k in range(rank, n):
        fmt, dense, _seg, _idx = dims[k]
        if fmt != 0 or dense < 1:
            raise ModelError(f"{where} block dimension {k} must be dense with a positive size")
        block_size[blocks[k - rank]] = dense
    for k in range(n):
        d = order[k]
        if d < rank:
            full = t.shape[d]
            b = block_size.get(d, 1)
            if full % b:
                raise ModelError(f"{where} dimension {d} ({full}) is not a multiple of its block {b}")
            sizes.append(full // b)
        else:
            sizes.append(block_size[blocks[d - rank]])
    return sizes


def _stored_values(where: str, dims, sizes) -> int:
    """Each dimension's metadata against its size; returns the number of values stored."""
    count = 1  # entries reached so far (product of the traversed sizes)
    for k, (fmt, dense, seg, idx) in enumerate(dims):
        if fmt == 0:
            if dense != sizes[k]:
                raise ModelError(f"{where} dense dimension {k} has size {dense}, expected {sizes[k]}")
            count *= dense
        elif fmt == 1:
            if seg is None or idx is None or len(seg) != count + 1:
                raise ModelError(f"{where} sparse dimension {k} needs {count + 1} segments and its indices")
            seg = seg.astype(np.int64)
            if seg[0] != 0 or (np.diff(seg) < 0).any() or seg[-1] != len(idx):
                raise ModelError(
                    f"{where} sparse dimension {k} has segments that do not partition its {len(idx)} indices"
                )
            if len(idx) and (idx.astype(np.int64) >= sizes[k]).any():
                raise ModelError(f"{where} sparse dimension {k} has indices beyond its size {sizes[k]}")
            count = len(idx)
        else:
            raise ModelError(f"{where} dimension {k} has unknown format {fmt}")
    return count
