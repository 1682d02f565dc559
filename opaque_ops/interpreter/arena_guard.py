"""The growing-arena guard and the explanation of a failed allocation.

What :meth:`Interpreter._allocate_locked <opaque_ops.interpreter.core.Interpreter._allocate_locked>`
runs off its common path: before an allocation after a resize, whether the
arena's new size can be had (:func:`refuse_unaffordable`); after an
allocation the runtime refused, what that means (:func:`failed_allocation`).
A plain start (create, allocate once, invoke) runs neither, so :mod:`.core`
imports this module only when one of them is needed: its code is not
unmarshalled at every start.  (An allocation TFLite called a success whose
arena got no memory is explained in core itself: the process is out of
memory there, and an import may fail.)  Every function takes
the interpreter and is called with its call lock held.  (The interpreter's
parameter has no annotation: importing :mod:`.core` here, even for type
checking only, would close a circle with core's import of this module.)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NoReturn

from .. import _native
from ..errors import KernelError, ModelError, TensorMemoryError
from ..model import check_allocated
from ..model.arena import arena_lower_bound

if TYPE_CHECKING:
    from .reshape_target import Graph

# What the runtime's error reporter says when XNNPACK's reshape of a
# partition failed (tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc;
# the same in 2.17 and 2.23).
XNNPACK_RESHAPE = "XNNPack delegate failed to reshape runtime"
# TFLite's message for any node whose Prepare failed (subgraph.cc).
_FAILED_NODE = r"Node number (\d+) \([^)]*\) failed to prepare"


def refuse_unaffordable(it, native, graph: Graph, resized: dict, what: str) -> None:
    """Before an allocation after a resize: TensorMemoryError if the arena's new size cannot be had.

    TFLite 2.17 does not check its arena's allocation, and a growing arena
    copies its old contents into the new block: a failure there is a SIGSEGV
    inside ``AllocateTensors``, before the check of an unbacked arena
    (``Interpreter._refuse_unbacked``) can look.  So a lower bound of what it
    will ask for (:func:`..model.arena.arena_lower_bound`) is asked of
    ``malloc`` first (an impossible size fails at once, a possible one is
    freed untouched).  Nothing has been allocated when this raises: the
    interpreter stays usable (resize back, allocate again).  The bound's
    shape rules also raise their ShapeError here when they refuse the inputs
    as resized (see ``refuse`` below), before the runtime is asked.

    Parameters
    ----------
    it : Interpreter
        The interpreter, its call lock held.
    native : NativeInterpreter
        The native interpreter the call runs on.
    graph : Graph
        The subgraph about to be allocated (each has its own arena).
    resized : dict
        ``{tensor index: shape}`` of its inputs resized since its last allocation.
    what : str
        The public call, for the message.

    Raises
    ------
    TensorMemoryError
        Even the lower bound cannot be had now, and it is more than the arena already holds.
    """
    k = graph.subgraph
    info, shape_of, in_arena, room = it._seen(native, graph)
    sg = it._info.subgraphs[k]
    shapes = _known_shapes(shape_of, sg.inputs)
    # The bound depends on the input shapes and on what the last allocation
    # placed: kept per subgraph and set of input shapes, so that a loop that
    # resizes between a few shapes computes it once per shape (it walks every
    # operator: about 5 us each).  (Two runners of one subgraph may see
    # different tensors of it: either's bound is a lower bound of the same arena.)
    key = (k, tuple(sorted(shapes.items())))
    nbytes = it._bounds.get(key)
    if nbytes is None:
        # Dynamic outputs at the last allocation: TFLite stops preparing at
        # the first such operator and allocates the rest during invoke, so
        # only the inputs count.  (Dynamic temporaries, as the reference
        # MEAN's, do not stop it.)  A delegate other than XNNPACK may share
        # its nodes' buffers: no per-node moments.  (Without dynamic tensors
        # at the last allocation, nothing stopped it.)
        stops = (k != 0 or it._moves) and _stopped_early(it, native, graph)
        nbytes = arena_lower_bound(
            info,
            shapes,
            in_arena,
            end=not stops,
            per_node=not it._delegates,
            # Shapes the rules refuse are refused here, before the runtime
            # sees them: XNNPACK's reshape, stopped by an operator that
            # refuses its shape, keeps the new sizes of the operators before
            # it unplanned, and the interpreter would have to be closed
            # (failed_allocation).  (Not kept in _bounds: a refusal is
            # computed again, off the fast path.)
            refuse=True,
        )
        if len(it._bounds) >= 64:
            it._bounds.clear()
        it._bounds[key] = nbytes
    if nbytes == 0 or native.can_allocate(nbytes):
        return
    # TFLite asks for memory only when the new arena is larger than the one
    # it holds (it never shrinks it), and the bound may fit in that: a
    # smaller shape after a larger one, under a memory limit, ran.  The
    # memory mapping around the arena's tensors is at least its size, so a
    # bound within it is no proof of a failure, and nothing is refused.
    if nbytes <= room(_witnesses(sg, shapes)):
        return
    asked = _describe_inputs(it, graph, ((t, f"to {list(shape)}") for t, shape in resized.items()))
    if it._hooks is not None:
        # An isolated worker's interpreter (the only one with hooks): the
        # limit is the Interpreter's memory_limit, and the inputs and outputs
        # are shared segments of their own, not part of one arena block.
        short = "the isolated worker cannot get that much within its memory_limit"
        instead = "or raise the Interpreter's memory_limit=..."
    else:
        short = "this process cannot get that much now"
        instead = (
            "or run the model isolated with a memory limit (Interpreter(..., isolate=True, "
            "memory_limit=...)) so that a failure there cannot take this process down"
        )
    raise TensorMemoryError(
        f"{what}: the inputs as resized ({asked}) need at least {nbytes} bytes "
        f"({nbytes / 2**30:.2f} GiB) of tensor memory, and {short} (checked before the runtime is "
        "asked: some TFLite versions, 2.17 among them, crash on such a failure instead of reporting it). "
        "Nothing was allocated and the interpreter is still usable: resize the input to a smaller shape "
        f"and call allocate_tensors() again, {instead}"
    )


def failed_allocation(it, native, graph: Graph, status: int, what: str) -> NoReturn:
    """Raise what an allocation the runtime refused means, for every subgraph and every path.

    The one explanation of a failed ``AllocateTensors``: the interpreter's
    ``allocate_tensors()``, a signature runner's, and a call that resizes
    (either's), in process and in an isolated worker (all go through
    ``Interpreter._allocate_locked``).  In order:

    - XNNPACK's reshape failed ("XNNPack delegate failed to reshape
      runtime") where it may keep sizes it planned no memory for
      (:func:`_xnnpack_left_unplanned`): a later reshape to a shape no
      larger than those does not plan again, and the next invoke writes past
      its workspace (a SIGSEGV after a smaller, "successful" allocation).
      The C API cannot make it plan again, so the interpreter is closed, and
      the exception below says so.  (A too-short input XNNPACK refuses grows
      nothing: the interpreter stays usable);
    - memory: the runtime said nothing (TFLite 2.23 reports a failed arena
      only as ``kTfLiteError``), or XNNPACK's reshape failed, and even a
      lower bound of the arena cannot be had (:func:`_arena_shortfall`):
      TensorMemoryError;
    - the shape rules refuse the shapes (ModelError, as on a runtime that
      would have allocated them): they are asked, where memory is not why,
      with only the shapes no Prepare left stale (:func:`_check_failed`), and
      the verdict is not kept;
    - otherwise the runtime's own error (KernelError, with its messages).

    Parameters
    ----------
    it, native, graph, what
        As for :func:`refuse_unaffordable`; ``graph`` is the subgraph whose allocation failed.
    status : int
        The TfLiteStatus the allocation returned (not 0).

    Raises
    ------
    TensorMemoryError, ModelError, KernelError
        Always one of them, as above.
    """
    msgs = [m for m in native.sink if m.strip()]
    reshape_failed = any(XNNPACK_RESHAPE in m for m in msgs)
    # Only where the runtime said nothing, or where XNNPACK failed for a
    # reason it logs elsewhere (its allocation of a workspace): a kernel's
    # own failure reports a message and keeps it.
    shortfall = None
    if status == 1 and (reshape_failed or not msgs):
        shortfall = _arena_shortfall(it, native, graph, half_planned=reshape_failed)
    # The shape rules, asked where memory is not why.
    refusal = None
    if shortfall is None:
        try:
            _check_failed(it, native, graph, msgs)
        except ModelError as err:
            refusal = err
    closed = ""
    if reshape_failed and _xnnpack_left_unplanned(
        it,
        native,
        graph,
        shortfall is not None
        or (refusal is None and _arena_shortfall(it, native, graph, half_planned=True, every_node=True) is not None),
    ):
        why = (
            "XNNPACK kept the sizes of the reshape that failed and would not plan its memory again for "
            "a shape up to them"
        )
        fix = "create a new one (with use_xnnpack=False a failed allocation leaves the interpreter usable)"
        closed = f" {why}: this Interpreter was closed, {fix}"
        it._let_go(f"this Interpreter was closed after {what} failed inside XNNPACK's reshape ({why}); {fix}")
    if shortfall is not None:
        nbytes, inputs = shortfall
        native.sink.take()
        said = f"XNNPACK said only {msgs[0]!r}" if reshape_failed else "it reports that only as 'error'"
        then = (
            closed
            if closed
            else " Nothing was allocated and the interpreter is still usable: resize the input to a "
            "smaller shape and call allocate_tensors() again, or raise the process's memory limit "
            "(with isolate=True, the memory_limit=... of the Interpreter)"
        )
        raise TensorMemoryError(
            f"{what}: the runtime could not allocate its tensor arena ({said}): "
            f"with its inputs as they are ({inputs}) this model needs at least {nbytes} bytes "
            f"({nbytes / 2**30:.2f} GiB) of tensor memory in one block, and this process cannot get that "
            f"much now.{then}"
        )
    if refusal is not None:
        native.sink.take()
        pending = _native.pop_pending_exception()
        if pending is not None and refusal.__context__ is None:
            refusal.__context__ = pending
        if closed:
            raise type(refusal)(str(refusal).rstrip(".") + "." + closed) from None
        raise refusal
    try:
        it._check(status, what, native)
    except KernelError as err:
        if closed:
            raise KernelError(str(err).rstrip(".") + "." + closed, status=err.status, messages=err.messages) from None
        raise
    # (_check raises for every status but 0, which is not a failure.)
    raise KernelError(f"{what} failed: status {status}", status=status)  # pragma: no cover


def _known_shapes(shape_of, indices) -> dict[int, tuple]:
    """``{tensor index: shape}`` of those of ``indices`` whose planned shape ``shape_of`` knows.

    (-1, an omitted optional tensor, is skipped.)
    """
    shapes = {}
    for t in indices:
        s = shape_of(t) if t >= 0 else None
        if s is not None:
            shapes[t] = s
    return shapes


def _witnesses(sg, shapes: dict):
    """The tensors of subgraph ``sg`` that may locate its arena: neither an input of ``shapes`` nor a variable.

    The inputs just resized have no memory until the next allocation, and
    TFLite keeps variables in its other, persistent arena.
    """
    return (t for t, info in enumerate(sg.tensors) if t not in shapes and not info.is_variable)


def _describe_inputs(it, graph: Graph, items) -> str:
    """The inputs ``items`` (``(tensor index, what of its shape)`` pairs) for a message.

    An input of subgraph 0 is named by its position and name; another
    subgraph's by its signature's name, after the subgraph's number.
    """
    k = graph.subgraph
    if k != 0:
        return f"subgraph {k}: " + ", ".join(f"input {graph.names.get(t, t)!r} {said}" for t, said in items)
    tensors = it._info.subgraphs[0].tensors
    return ", ".join(f"input {it._input_positions.get(t, t)} {tensors[t].name!r} {said}" for t, said in items)


def _stopped_early(it, native, graph: Graph) -> bool:
    """Whether ``graph``'s allocation stops before its last node: an operator output is dynamic.

    TFLite then prepares and allocates the rest during ``invoke``, so an
    arena bound counts the inputs only.  Subgraph 0's outputs are asked of
    the runtime; another subgraph's, through its signature (graph.arena).
    """
    if graph.subgraph != 0:
        return graph.arena.stops()
    return any(
        (ref := native.tensor(t)) is not None and ref.is_dynamic()
        for op in it._info.subgraphs[0].operators
        for t in op.outputs
        if t >= 0
    )


def _xnnpack_left_unplanned(it, native, graph: Graph, maybe_memory: bool) -> bool:
    """After XNNPACK's reshape failed: whether it may keep sizes it planned no memory for.

    ``xnn_reshape_runtime`` reshapes the operators in order, each recording
    its new size, and plans memory only after the last, when one of them
    grew or nothing was planned yet.  An operator that refuses its shape
    stops it before the plan: the operators before it kept their new sizes
    unplanned, which matters only if an input grew (larger in a dimension,
    or of another rank) since the last successful allocation, or at the
    first one (nothing planned yet: the next reshape plans).  A failed plan
    (its workspace could not be had) has marked the runtime planned before
    it tried: that matters at the first allocation too.  ``maybe_memory``:
    memory may be what failed (the shape rules found nothing wrong with the
    inputs, and a lower bound of what XNNPACK's workspace holds cannot be had).
    """
    before = it._allocated_inputs.get(graph.subgraph)
    if before is None:
        return maybe_memory
    for t, now in it._input_shapes_now(native, graph).items():
        old = before.get(t)
        if now is None or old is None or len(now) != len(old) or any(n > o for n, o in zip(now, old)):
            return True
    return False


def _arena_shortfall(it, native, graph: Graph, half_planned: bool, every_node: bool = False) -> tuple[int, str] | None:
    """After a failed allocation: ``(bytes, the inputs described)`` if memory is why, else None.

    TFLite 2.23 checks its arena's allocation (2.17 does not: see
    :func:`refuse_unaffordable`), but reports a failed one only as
    ``kTfLiteError``, with nothing in the error reporter; XNNPACK's failed
    workspace says only that its reshape failed.  The guard before the call
    does not always speak first: it is not asked at the first allocation,
    and its bound may be affordable where the real arena (temporaries,
    alignment, tensors of ops without a shape rule) is not.  So a lower
    bound of the arena for the inputs as they are now is asked of
    ``malloc``: if even that cannot be had (and it is more than the arena
    already held), memory is the cause.  Nothing is allocated here.

    ``half_planned``: a Prepare stopped part-way (XNNPACK's), so the shapes
    after it are those of the allocation before, and the shape rules infer
    them from the inputs instead.  ``every_node``: count the moments at each
    operator's node even with a delegate (what XNNPACK's workspace must hold
    of its partitions' tensors, a lower bound).
    """
    info, shape_of, in_arena, room = it._seen(native, graph)
    sg = it._info.subgraphs[graph.subgraph]
    shapes = _known_shapes(shape_of, sg.inputs)
    # Where every Prepare ran and the runtime stopped at its arena, the
    # shapes it set are the ones it planned, also for operators that have no
    # shape rule (the bound from the rules alone is 4 bytes for a FILL of
    # constant dims).  The last allocation's placement cannot tell which
    # tensors are in the arena (at the first allocation there was none, and
    # this one failed): every tensor with the arena strategy counts, so the
    # moments at each operator's node count only without a delegate
    # (XNNPACK's partitions keep their inner tensors out of the arena).  A
    # dynamic output stops the planning there: then only the inputs.
    planned = None if half_planned else _known_shapes(shape_of, range(len(sg.tensors)))
    nbytes = arena_lower_bound(
        info,
        shapes,
        lambda t, placed: in_arena(t, False),
        end=not _stopped_early(it, native, graph),
        per_node=every_node or (not it.xnnpack and not it._delegates),
        shapes=planned,
    )
    if nbytes == 0 or native.can_allocate(nbytes):
        return None
    # As in the guard: within the arena already held is no proof.
    if nbytes <= room(_witnesses(sg, shapes)):
        return None
    # (The subgraph's inputs resized since its last allocation: {tensor index: shape}.)
    resized = it._resized.get(graph.subgraph) or {}
    said = ((t, f"resized to {list(s)}" if t in resized else f"of shape {list(s)}") for t, s in shapes.items())
    return nbytes, _describe_inputs(it, graph, said)


def _check_failed(it, native, graph: Graph, msgs) -> None:
    """The allocated-shape checks after a failed allocation, with only the shapes it did not leave stale.

    The verdict is not kept (a later allocation that succeeds with the same
    shapes would trust it).  Where a node's Prepare failed (``msgs``, the
    runtime's messages, name it), the shapes after it are those of the
    allocation before: only the shapes no Prepare of this allocation left
    stale are given (the inputs as resized, the variables, and without a
    delegate the outputs of the operators before that node), and the rules
    infer the rest.  Where no Prepare failed (the arena did), every shape is
    the runtime's plan.
    """
    info, shape_of, _in_arena, _room = it._seen(native, graph)
    stopped = [int(n) for m in msgs for n in re.findall(_FAILED_NODE, m)]
    if stopped or any(m.strip() for m in msgs):
        sg = it._info.subgraphs[graph.subgraph]
        trusted = {t for t in sg.inputs if t >= 0} | {t for t, ti in enumerate(sg.tensors) if ti.is_variable}
        if stopped and not it.xnnpack and not it._delegates:
            # Without a delegate the node numbers are the operators'.
            trusted.update(t for op in sg.operators[: min(stopped)] for t in op.outputs if t >= 0)
        check_allocated(info, lambda t: shape_of(t) if t in trusted else None, it._check_config, record=False)
    else:
        check_allocated(info, shape_of, it._check_config, record=False)
