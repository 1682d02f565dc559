"""A lower bound of the bytes TFLite's tensor arena will ask for, before it asks.

Why: TFLite 2.17 does not check what its arena's allocation returns
(``ResizableAlignedBuffer::Resize`` in tensorflow/lite/simple_memory_arena.cc).
When an arena that already holds tensors grows (an input resized, then
``AllocateTensors``), it copies the old contents into the new block: with a
failed allocation that is a write near address 0, inside the C call, before
anything can check the result.  So the caller asks *before* the call whether
at least :func:`arena_lower_bound` bytes can be had at all.

The bound must never be above what TFLite really asks for: the guard refuses
only when even the bound cannot be allocated.  It is the largest sum of
tensors that TFLite's ``ArenaPlanner`` (tensorflow/lite/arena_planner.cc)
must keep in the arena at the same time, at one of these moments:

- every moment: the graph's inputs (``PlanAllocations`` allocates them at
  node 0 and never deallocates them);
- the end of the run: the inputs and the outputs that operators produce
  (outputs are never deallocated either);
- the node of each operator: the inputs, and that operator's own input and
  output tensors (its inputs are deallocated after it at the earliest, its
  outputs allocated at it).  When XNNPACK takes the operator into a
  partition, the operator's tensors that are still in the arena are inputs
  or outputs of the partition's node, so live at that node.

Counted are only tensors the caller says were placed in the arena by the
last allocation (``placed``: not constants, variables, dynamic or custom
tensors, nor the tensors inside a delegated partition, which the planner
never sees), with a shape known before the run (:func:`~.shapes.infer_shapes`
from the new input shapes alone, with the op's own shape rule: an operator
without a rule leaves its outputs unknown, and an unknown tensor counts 0).
The planner may let an operator's output share the buffer of one of its
inputs (``IdentifyInPlaceTensors``: not a graph input, not a graph output,
the same byte size): any output that could, for any operator, counts 0,
wherever it appears.  Temporaries, alignment and fragmentation are not
counted; each only makes the real arena larger.
"""

from __future__ import annotations

from ..errors import ShapeError
from .shapes import infer_shapes

# Bytes per element: the numpy dtype's for the types that have one (the
# reader's TensorInfo.dtype: the same sizes as TFLite's GetSizeOfType,
# tensorflow/lite/util.cc), and these for the others TFLite sizes by whole
# bytes; the rest (strings, resources, variants, packed 4-bit) count 0 (a
# lower bound).
_OTHER_ITEMSIZE = {"BFLOAT16": 2}


def tensor_bytes(tensor, shape) -> int:
    """Bytes of ``tensor`` (a TensorInfo) with ``shape``; 0 if unknown or not a fixed-size type."""
    size = tensor.dtype.itemsize if tensor.dtype is not None else _OTHER_ITEMSIZE.get(tensor.type_name, 0)
    if shape is None or not size:
        return 0
    n = 1
    for d in shape:
        if d < 0:
            return 0
        n *= d
    return n * size


def arena_lower_bound(
    info,
    input_shapes: dict,
    placed,
    *,
    end: bool = True,
    per_node: bool = True,
    shapes: dict | None = None,
    refuse: bool = False,
) -> int:
    """Bytes that TFLite's arena for subgraph 0 must hold at once with these input shapes (a lower bound).

    Parameters
    ----------
    info : ModelInfo
        Its subgraph 0 is the one bounded: for another subgraph the caller
        passes a copy with that subgraph moved to position 0 (each subgraph
        has an arena of its own; ``Interpreter._rooted``).
    input_shapes : dict
        ``{tensor index: shape}`` of every graph input of subgraph 0, as resized.
    placed : callable
        ``placed(tensor index, placed) -> bool``: the tensor has the arena
        strategy and, with ``placed`` True, the last allocation gave it
        memory there (asked with False for the graph's inputs, which the
        planner always places, and which a resize leaves without memory).
        False for a tensor the caller cannot look at (a subgraph other
        than 0 shows only its signature's tensors): it then counts 0, and
        the bound stays a lower bound.
    end : bool
        Count the operators' moments.  False when the allocation stops
        before the last node (an operator with a dynamic output: TFLite
        prepares and allocates the rest during ``invoke``): then only the
        inputs count.
    per_node : bool
        Count the moments at each operator's node (see the module's notes).
        False leaves the inputs and the end of the run, which hold whatever
        a delegate's nodes share (a delegate that is not XNNPACK).
    shapes : dict, optional
        ``{tensor index: shape}`` of the tensors as the runtime's Prepare
        set them (after an allocation that got as far as its arena), used
        instead of the shape rules' inference from ``input_shapes``: they
        also know the outputs of operators without a rule.
    refuse : bool
        Raise the shape rules' :class:`~.errors.ShapeError` instead of
        counting the inputs alone.  The rules are given only the inputs'
        shapes (and the variables' recorded ones), none a Prepare may have
        left stale, so what they refuse the allocated-shape checks would
        refuse after the allocation too: the caller refuses it before the
        runtime (and XNNPACK, which reshapes its graph without those checks)
        sees it.

    Returns
    -------
    int
        The inputs alone when the operators' shapes do not fit together
        under the shape rules (see :func:`~.shapes.infer_shapes`).
    """
    sg = info.subgraphs[0]
    tensors = sg.tensors
    graph_inputs = {t for t in sg.inputs if t >= 0}
    graph_outputs = {t for t in sg.outputs if t >= 0}
    base = 0
    for t in graph_inputs:
        if tensors[t].data is None and not tensors[t].is_variable and placed(t, False):
            base += tensor_bytes(tensors[t], input_shapes.get(t))

    def shape_of(t):
        # A variable (a model's state) keeps the shape the model records: without
        # it, every operator after one had no shape and counted 0.
        if t in input_shapes:
            return input_shapes[t]
        return tuple(int(d) for d in tensors[t].shape) if tensors[t].is_variable else None

    if not end:
        return base
    if shapes is None:
        try:
            shapes = infer_shapes(info, shape_of)
        except ShapeError:
            if refuse:
                raise
            # The shape rules refuse these shapes, but a runtime's Prepare may
            # not (2.17's FULLY_CONNECTED takes an input whose size is no
            # multiple of its weights' and allocates): the inputs still count.
            return base

    def size(t) -> int | None:
        s = shapes.get(t)
        return None if s is None else tensor_bytes(tensors[t], s)

    # Outputs that may share an input's buffer count 0 everywhere.
    shared = set()
    for op in sg.operators:
        for o in op.outputs:
            if o < 0 or o in graph_outputs:
                continue
            mine = size(o)
            for i in op.inputs:
                if i < 0 or i in graph_inputs or tensors[i].data is not None:
                    continue
                theirs = size(i)
                if mine is None or theirs is None or mine == theirs:
                    shared.add(o)
                    break

    # The tensors that count, each asked of the runtime once (placed() is a C call).
    produced = {t for op in sg.operators for t in op.outputs if t >= 0}
    used = produced | {t for op in sg.operators for t in op.inputs if t >= 0}
    counted = {
        t
        for t in used
        if t not in graph_inputs
        and t not in shared
        and tensors[t].data is None
        and not tensors[t].is_variable
        and placed(t, True)
    }
    best = sum(size(t) or 0 for t in graph_outputs if t in produced and t in counted)
    if per_node:
        for op in sg.operators:
            live = {t for t in (*op.inputs, *op.outputs) if t in counted}
            best = max(best, sum(size(t) or 0 for t in live))
    return base + best
