"""A STRIDED_SLICE of fixed shape with unit strides, run as SLICE in the private model copy.

TFLite 2.17.1's XNNPACK delegate does not take STRIDED_SLICE, so each runs
in TFLite's own kernel between delegate partitions; it does take SLICE.
microWakeWord's okay_nabu has twelve unit-stride STRIDED_SLICEs, and on
2.17.1 with XNNPACK runs 55.1 K instructions per invoke against 34.2 K
with each written as SLICE (``bench/invoke_instructions.py``; ai-edge-litert
and TFLite 2.23.0, whose delegates take STRIDED_SLICE, run 41 K).

Which slices qualify, and their resolved bounds, is
:func:`opaque_ops.model.fixed_slices.plan_of` (kept in the model's record):
only slices whose input shape no resize can change.  This module writes
them into the copy (``model_copy.py``) and, after every allocation of
subgraph 0, checks that each such input has the shape its SLICE was
written for (:func:`check_allocated`): a backstop that refuses, should a
model's stored shapes be wrong, before any invoke could read the wrong
elements.
"""

from __future__ import annotations

import struct

from ..errors import ModelError
from ..model.schema import BUILTIN_OPERATORS
from .model_copy import INT32, NewOperator, NewTensor, Plan, main_tensor_count, open_model, write_copy

__all__ = ["check_allocated", "main_tensor_count", "rewrite_model", "worth_it"]

_SLICE = BUILTIN_OPERATORS["SLICE"]


def worth_it(version: str, xnnpack: bool, delegates: int = 0) -> bool:
    """Whether :func:`rewrite_model` makes the model faster on this runtime.

    Only 2.17 with XNNPACK (measured: ``bench/slice_rewrite.py``).  2.23's
    and ai-edge-litert's delegates take STRIDED_SLICE, and without XNNPACK
    both forms run in TFLite's kernels.  With a caller's delegate nothing is
    rewritten: it chooses nodes by operator, and must see the model's own.

    Parameters
    ----------
    version : str
        ``TfLiteVersion()`` of the loaded runtime, e.g. ``"2.17.1"``.
    xnnpack : bool
        Whether the XNNPACK delegate is applied.
    delegates : int, optional
        How many of the caller's delegates are applied.

    Returns
    -------
    bool
    """
    return not delegates and bool(xnnpack) and version.split(".")[:2] == ["2", "17"]


def rewrite_model(data: bytes, plan: tuple) -> tuple[bytes, tuple]:
    """``data`` with each STRIDED_SLICE of ``plan`` replaced by SLICE.

    Parameters
    ----------
    data : bytes
        A model that :func:`~opaque_ops.model.read_model` accepted, or a
        private copy written from one (its operators and subgraph 0's
        tensors keep their indices).
    plan : tuple
        :func:`opaque_ops.model.fixed_slices.plan_of` the model:
        ``(operator, input, output, input shape, begin, size)`` per slice.

    Returns
    -------
    bytes
        ``data`` itself when ``plan`` is empty or no copy can be made, or
        the rewritten copy.
    tuple
        ``((input tensor, shape), ...)`` of the rewritten slices: the shapes
        :func:`check_allocated` holds each allocation to.
    """
    m = open_model(data) if plan else None
    if m is None or not m.subgraphs or not m.copyable(0):
        return data, ()
    n = len(m.reader.tables(m.subgraphs[0], 0))
    new_tensors: list[NewTensor] = []
    operators = {}
    # One constant per distinct list of values (okay_nabu's 12 slices need
    # 16, not 24): fewer tables to write at every start.  Constants are
    # read-only, so SLICEs may share them.
    made: dict[tuple, int] = {}

    def constant(values: tuple) -> int:
        if values not in made:
            made[values] = n + len(new_tensors)
            name = f"slice@opaque_ops:{','.join(map(str, values))}".encode()
            new_tensors.append(NewTensor((len(values),), INT32, struct.pack(f"<{len(values)}i", *values), name))
        return made[values]

    for op, x, y, _shape, begin, size in plan:
        operators[op] = NewOperator((x, constant(tuple(begin)), constant(tuple(size))), (y,))
    fixed = tuple(sorted({(x, tuple(shape)) for _op, x, _y, shape, _b, _s in plan}))
    return write_copy(m, data, {0: Plan(tuple(new_tensors), operators)}, _SLICE), fixed


def check_allocated(fixed: tuple, shape_of, is_planned) -> None:
    """After an allocation of subgraph 0: ModelError unless each rewritten slice's input has its shape.

    Parameters
    ----------
    fixed : tuple
        ``((input tensor, shape), ...)`` from :func:`rewrite_model`.
    shape_of, is_planned : callable
        The allocated shape of a tensor, and whether it is planned (not
        dynamic), as the runtime says.

    Raises
    ------
    ModelError
        An input's shape is not the one its SLICE was written for.  Never
        seen: :func:`opaque_ops.model.fixed_slices.plan_of` keeps only
        slices whose input shape no resize can change.
        Raised before any invoke could read the wrong rows.
    """
    for t, shape in fixed:
        now = shape_of(t)
        if not is_planned(t) or now is None or tuple(now) != shape:
            raise ModelError(
                f"tensor {t}, read by a STRIDED_SLICE that opaque_ops runs as SLICE on TFLite 2.17 with "
                f"XNNPACK (resolved for shape {list(shape)}), has shape "
                f"{'unknown until invoke' if now is None or not is_planned(t) else list(now)} after this "
                "allocation, so the SLICE would read the wrong elements. Create the Interpreter with "
                "use_xnnpack=False to run the model's own STRIDED_SLICE, and please report this model"
            )
