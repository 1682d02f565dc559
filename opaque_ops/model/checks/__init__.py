"""Checks that keep a model from crashing the TFLite runtime, in rule groups, each rule next to its table.

Three entry points:

- :func:`check_model` runs on the parsed model before TFLite sees it;
- :func:`check_resize` runs before an input is resized, on the new shape;
- :func:`check_allocated_shapes` runs after every (re)allocation, on the
  tensor shapes TFLite actually computed, through the Interpreter's one
  guarded path for anything that can move tensor memory (by way of
  :func:`~opaque_ops.model.check_allocated`, which keeps its verdicts in
  :mod:`~opaque_ops.model.cache`).

The rules are pure functions of the model (and the shapes): nothing is kept
here.  They are grouped by what they look at:

- :mod:`.tensor_rules`: each tensor's shape, stored bytes, quantization and
  sparsity, and which tensors may be subgraph inputs;
- :mod:`.graph`: the data flow (who writes which tensor, in what order),
  omitted inputs and outputs, variables, the call graph of the subgraphs
  and the signatures;
- :mod:`.builtin_rules`: per builtin, its input count and the options and
  shapes the runtime and XNNPACK trust (:mod:`.options` gives the options
  the runtime will really use);
- :mod:`.type_rules`: per builtin, which inputs and outputs share a dtype and
  which take a fixed one (a table covering every builtin), and the rank a
  value-dependent output (WHERE, UNIQUE, NON_MAX_SUPPRESSION) is written
  with;
- :mod:`.allocated`: a requested resize and the shapes an allocation
  planned; :mod:`.called` follows those shapes into the subgraphs that
  WHILE, IF and CALL_ONCE run;
- :mod:`.messages`: the prefixes that name what is at fault, spelled once;
  :mod:`.limits`: the largest rank, element count and window the runtime
  can count.
"""

from __future__ import annotations

from ...errors import ModelError
from ..metadata import check_metadata
from ..reader import ModelInfo, rooted
from ..runtime_ops import RUNTIME_CUSTOM_OPS, check_runtime_op
from . import builtin_rules, graph, messages, type_rules
from .allocated import check_allocated_shapes, check_resize, check_resized_reach, deep_reach
from .limits import MAX_ELEMENTS, MAX_RANK, MAX_WINDOW_PARAM, adds_dimensions
from .options import effective_options
from .tensor_rules import HANDLE_TYPES, check_subgraph_inputs, check_tensor, deeper_allowed

__all__ = [
    "MAX_ELEMENTS",
    "MAX_RANK",
    "MAX_WINDOW_PARAM",
    "check_allocated_shapes",
    "check_model",
    "check_resize",
    "check_resized_reach",
    "effective_options",
]


def check_model(info: ModelInfo, registered=()) -> None:
    """Reject graph structures that the TFLite runtime does not verify but trusts.

    TFLite's own verifier checks the flatbuffer layout and tensor byte sizes,
    but not the data flow between operators: a tensor written by two
    operators, or an operator writing its own input, makes the memory planner
    give two live tensors the same arena bytes (or a resource tensor a bogus
    handle), and ``invoke()`` then corrupts the heap or segfaults.  Each rule
    here was added for a crash that model fuzzing (tools/fuzz_models.py)
    found in the 2.17.1 runtime or its XNNPACK delegate:

    - at least one subgraph; constant data no longer than its shape says;
      at most :data:`MAX_RANK` dimensions (more only where operators of
      any rank, such as GATHER_ND, alone read and write the tensor:
      :data:`~.limits.ANY_RANK_OPS`, and up to 8 where ADD, SUB, MUL and TRANSPOSE
      read it too: :data:`~.limits.DEEP_OPS_2_23`, whose planned
      shapes the runtime's rule judges) and :data:`MAX_ELEMENTS` elements;
    - quantization scales finite, positive and normal; zero points inside
      the tensor type's range; sparsity parameters that describe the data;
    - every tensor written by at most one operator, never by the operator
      that reads it, never a subgraph input or a constant; no omitted (-1)
      outputs; omitted inputs only on builtins whose schema allows them;
      handles (RESOURCE, VARIANT) and strings only read and written by the
      builtins that take and make them;
    - no operator reads a tensor before the operator that writes it runs;
      every subgraph output is written, an input, or a constant;
    - common builtins have their number of inputs, and an output;
    - quantized CONV_2D / DEPTHWISE_CONV_2D have a bias; strides, dilations
      and pooling windows are at least 1, padding is SAME or VALID;
    - per-builtin options the kernels trust (split counts and axes,
      permutations, concatenation axes and static shapes, block sizes,
      variables read through VAR_HANDLE, control flow naming other
      subgraphs of matching types, no cycle of subgraph calls; no SELECT
      (v1) with a non-constant condition in a subgraph a WHILE or IF runs);
    - every operator's input and output dtypes are the ones its kernel
      reads and writes (:data:`~.types.TYPE_RULES`: RESHAPE and the other
      copies move the input's bytes into a buffer sized from the output's
      declared type); value-dependent outputs are declared with the dtype
      and rank their kernel writes, and elementwise ops keep their inputs'
      rank (so no consumer is planned on a stale static shape);
    - READ_VARIABLE's declared output shape matches what ASSIGN_VARIABLE
      stores in the same variable (VAR_HANDLEs of one name are one
      variable, across subgraphs: a CALL_ONCE init subgraph's constant);
    - each signature names exactly its subgraph's inputs and outputs;
    - the ``CONVERSION_METADATA`` entry, which the runtime parses unverified,
      lies inside its buffer (:mod:`~opaque_ops.model.metadata`);
    - runtime-provided custom ops have the options their kernels read
      (:mod:`~opaque_ops.model.runtime_ops`).

    All are linear in the size of the model.  A model that breaks several
    rules gets the message of the first one met: the metadata, then subgraph
    by subgraph its tensors, then its operators, then the call graph and the
    signatures.

    Parameters
    ----------
    info : ModelInfo
        From :func:`read_model`.
    registered : collection of str, optional
        Names of the custom ops registered by the caller's op libraries: a
        registered kernel replaces the runtime's own op of the same name, so
        the runtime ops' option rules do not apply to it.

    Raises
    ------
    ModelError
        The message names the subgraph, operator and tensor at fault.
    """
    if not info.subgraphs:
        # The XNNPACK delegate indexes subgraph 0 unconditionally.
        raise ModelError("the model has no subgraphs")
    check_metadata(info)
    variables = graph.variable_stores(info)
    deep = set()  # the subgraphs with a tensor declared deeper than MAX_RANK (that check_tensor allows)
    for sg in info.subgraphs:
        check_subgraph_inputs(sg)
        any_rank = deeper_allowed(info, sg)
        for t in sg.tensors:
            check_tensor(sg, t, any_rank)
            if len(t.shape) > MAX_RANK:
                deep.add(sg.index)
        handles = {t.index for t in sg.tensors if t.type_name in HANDLE_TYPES}
        producer = graph.check_writes(sg, handles)
        for op in sg.operators:
            _check_operator(info, sg, op, producer, registered)
        graph.check_subgraph_outputs(sg, producer)
        graph.check_variable_reads(sg, variables)
        builtin_rules.check_static_concatenations(sg)
    graph.check_call_graph(info)
    graph.check_select_in_control_flow(info)
    graph.check_signatures(info)
    _check_deep_reach(info, deep)


def _check_deep_reach(info, deep: set) -> None:
    """A subgraph a caller invokes, with a tensor declared deep: no operator may get more dimensions than it takes.

    The declared shapes of the other tensors need not be what the runtime
    plans (an EXPAND_DIMS output declared at rank 6 is planned one deeper),
    and the allocation prepares each operator at the planned depth before
    the allocated-shape rules can look (:func:`~.allocated.deep_reach`).
    Only subgraphs that hold such a tensor (``deep``: their indexes), and
    every subgraph of a model with an operator that adds dimensions (a chain
    of ten EXPAND_DIMS from a rank-2 input, every output declared [2, 3],
    also reached ADD at rank 12: SIGSEGV on 2.23.0 with XNNPACK), are
    followed: most models have neither, and pay for a look at their
    operator codes.
    """
    adds = adds_dimensions(info)
    invoked = sorted({0} | {s.subgraph_index for s in info.signatures if 0 <= s.subgraph_index < len(info.subgraphs)})
    for k in invoked:
        sg = info.subgraphs[k]
        if not adds and k not in deep:
            continue
        reach = deep_reach(rooted(info, k), lambda t, sg=sg: tuple(sg.tensors[t].shape))  # (as a runner's plan)
        if reach is not None:
            op, t, rank = reach
            raise ModelError(
                f"{messages.operator(sg, op)} would get {messages.tensor(sg, sg.tensors[t])} at rank {rank} "
                f"(declared {len(sg.tensors[t].shape)}: the operators before it make it that deep), more "
                f"dimensions than it takes (at most {MAX_RANK} here); give the model inputs of fewer dimensions"
            )


def _check_operator(info, sg, op, producer, registered) -> None:
    """The rules on one operator, once every tensor's producer is known (the order is the messages')."""
    if op.is_custom and op.op_name in RUNTIME_CUSTOM_OPS and op.op_name not in registered:
        check_runtime_op(sg.index, op)
    builtin_rules.check_builtin(info, sg, op, producer)
    graph.check_omitted_inputs(sg, op)
    builtin_rules.check_quantized_bias(sg, op)
    builtin_rules.check_input_count(sg, op)
    graph.check_has_outputs(sg, op)
    builtin_rules.check_window_options(sg, op)
    graph.check_execution_order(sg, op, producer)
    type_rules.check_types(sg, op)
