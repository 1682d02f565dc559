"""Before an invoke: refuse a fed value that TFLite's kernel would crash on in Eval.

The operators come from :func:`opaque_ops.model.fed_values.nodes_of` (the
value is an input of subgraph 0, set with ``set_tensor``, or an input of the
subgraph of a signature runner, given to the runner: :class:`SignatureTensors`
reaches those by name, and infers the shape of a data tensor the signature
does not name; :class:`MadeShapes` works out the shape of a data tensor the
invoke makes from fed values, such as TILE's multiples); the rules are those
the model checks apply to the same value given as a constant
(:mod:`opaque_ops.model.shapes`' REVERSE_SEQUENCE and REVERSE_V2 rules,
:mod:`opaque_ops.model.checks.version_rules`' TOPK_V2 rule), applied to the
value the input holds now.  Imported only by an interpreter whose model has
such an operator: every other model's invoke never runs this.
"""

from __future__ import annotations

import math

from ..errors import InvalidInputError, ShapeError


def refuse_crashing_values(
    native,
    nodes: tuple,
    version: str,
    what: str,
    reach: SignatureTensors | None = None,
    how: str = "with set_tensor()",
    made: MadeShapes | None = None,
) -> None:
    """Raise InvalidInputError if an input of ``nodes`` holds a value their kernel would crash on.

    Parameters
    ----------
    native : NativeInterpreter
        The allocated interpreter.
    nodes : tuple
        :func:`~opaque_ops.model.fed_values.for_runtime` of the model's nodes.
    version : str
        The runtime's ``TfLiteVersion()``, for the message.
    what : str
        The call, for the message.
    reach : SignatureTensors, optional
        For the nodes of a signature runner's subgraph other than 0, whose
        tensors the C API reaches by signature name only; None for subgraph
        0's (``native.tensor`` reads them by index).
    how : str, optional
        How the caller gives a value, for the message's advice: ``with
        set_tensor()`` for the interpreter, ``as the runner's argument`` for
        a signature runner (whose caller never calls set_tensor).
    made : MadeShapes, optional
        Subgraph 0's (the interpreter's, with ``reach`` None): the shape a
        dynamic data tensor will get in this invoke, from the fed values.
        A runner's ``reach`` has its own.
    """
    tensor = native.tensor if reach is None else reach.tensor
    for index, name, value_t, data_t, seq_dim, batch_dim in nodes:
        value = tensor(value_t)
        fed = False  # (whether the fed values make x: the advice then says to change them)
        if reach is None:
            data = tensor(data_t)
            x, shown = (None if data is None else data.shape), data_t
            if data is not None and data.is_dynamic():
                # A dynamic data tensor gets its shape in this invoke,
                # before the node's Eval, from values: the fed ones tell it.
                x = None if made is None else made.shape(index, data_t, tensor, native.allocated_shape)
                shown, fed = f"{data_t} ({data.name!r}, whose shape the invoke makes from the fed values)", True
        else:
            x = reach.shape(data_t)
            if x is None:
                x, fed = reach.made_shape(index, data_t), True
        if value is None or x is None:
            continue
        v = value.view()
        if v is None:
            continue
        if reach is None:
            where = f"{what}: input {value_t} ({value.name!r}) of operator {index} ({name})"
        else:
            where, shown = reach.where(what, value_t, index, name), reach.label(data_t)
        if name == "REVERSE_SEQUENCE":
            _reverse_sequence(where, v, x, shown, seq_dim, batch_dim, how, fed)
        elif name == "TOPK_V2":
            _top_k(where, v, x, shown, version, how)
        elif name == "REVERSE_V2":
            _reverse_v2(where, v, x, shown, how, fed)
        elif name == "BROADCAST_TO":
            _broadcast_to(where, v, x, shown, version, how)


class MadeShapes:
    """The shapes of data tensors that an invoke makes from fed values, worked out before it from those values.

    A data tensor made by an operator whose output shape depends on a value
    (a TILE's multiples, a RESHAPE's shape) that is fed as an input of the
    subgraph gets its shape only in the invoke: the runtime marks it dynamic
    (2.17.1 and 2.23.0 alike), and a runner of another subgraph cannot infer
    it from shapes alone.  Its node is checked all the same when the rules of
    :func:`opaque_ops.model.shapes.infer_shapes` give that shape from the
    values the subgraph's inputs hold now (those of
    :func:`~opaque_ops.model.shapes.fed_shape_inputs`), read as constants,
    up to the node (``until``: what its own rule or a later one would refuse
    in the values does not hide the shape).  Only such a node pays, at each
    invoke (about 9 us on a small model when the values are those of the
    last invoke): the answer is kept while the subgraph's allocation (so its
    input shapes) and those inputs' bytes stay the same.  Where the rules
    cannot tell the shape (no rule, a value out of int32, shapes that do not
    fit together), the node stays unchecked.

    Parameters
    ----------
    info : ModelInfo
        The model with the subgraph as subgraph 0.
    allocations : dict
        The interpreter's ``{subgraph: record of the input shapes at its last
        allocation}`` (a new record per allocation): the record of
        ``subgraph`` tells whether a kept answer still holds, without reading
        the input shapes at each invoke.
    subgraph : int
        The subgraph's index in the interpreter.
    """

    # A shape operand holds a few values (one per dimension, or a scalar); a
    # larger input is not read at each invoke for them.
    _MOST_BYTES = 64 * 8

    def __init__(self, info, allocations: dict, subgraph: int):
        self._info = info
        self._allocations = allocations
        self._subgraph = subgraph
        self._seeds: tuple | None = None  # fed_shape_inputs, read on first use
        # operator index -> (allocation, the inputs' bytes, shapes) of the last inference up to it
        self._last: dict[int, tuple] = {}

    def shape(self, index: int, data_t: int, tensor, shape_of) -> tuple | None:
        """The shape data tensor ``data_t`` of operator ``index`` gets in this invoke, or None if not known.

        Parameters
        ----------
        index : int
            The node's operator index.
        data_t : int
            Its data tensor.
        tensor : callable
            ``tensor(i)``: the runtime's tensor ``i`` of the subgraph (the
            fed inputs are read from it), or None where out of reach.
        shape_of : callable
            ``shape_of(i)``: the runtime's planned shape of tensor ``i``, or None.
        """
        seeds = self._seeds
        if seeds is None:
            from ..model.shapes import fed_shape_inputs

            seeds = self._seeds = fed_shape_inputs(self._info.subgraphs[0])
        # (Without such inputs the rules may still tell it: a RESHAPE to a
        # SHAPE's output, whose values are another input's shape.)  The
        # bytes, not the values, are compared: a numpy view per input would
        # cost more than the rest of this.
        refs = [tensor(t) for t in seeds]
        raws = tuple(None if r is None or r.nbytes > self._MOST_BYTES else r.raw() for r in refs)
        allocation = self._allocations.get(self._subgraph)
        last = self._last.get(index)
        if last is None or last[0] is not allocation or last[1] != raws:
            last = self._last[index] = (allocation, raws, self._infer(index, seeds, refs, raws, shape_of))
        return last[2].get(data_t)

    def _infer(self, index: int, seeds: tuple, refs: list, raws: tuple, shape_of) -> dict:
        """infer_shapes up to operator ``index``, with the values of the ``seeds`` read as constants."""
        import numpy as np

        values = {
            t: np.frombuffer(raw, r.dtype).tolist()
            for t, r, raw in zip(seeds, refs, raws)
            if raw is not None and r.dtype is not None
        }
        # (Shapes the rules refuse before the node: not told, the node stays unchecked.)
        return _shapes(self._info, shape_of, values=values, until=index)


class SignatureTensors:
    """The tensors of a signature runner's fed-value nodes, in a subgraph other than 0: reached by name.

    The C API reads another subgraph's tensors only as a signature's inputs
    and outputs (``TfLiteSignatureRunnerGetInputTensor``, ``...OutputTensor``),
    by name: the values, which are the signature's inputs, are read so, and
    so is a data tensor the signature names.  The shape of a data tensor it
    does not name (one the subgraph computes from its inputs, or a constant)
    is inferred from the inputs' shapes instead, once per allocation
    (:meth:`infer`).  The messages name the tensors as the runner's caller
    does, by their signature names.

    Parameters
    ----------
    native_runner : NativeSignatureRunner
    inputs, outputs : dict
        ``{name: tensor index}`` of the signature (in its subgraph).
    subgraph : int
        The signature's subgraph, for the messages.
    allocations : dict, optional
        The interpreter's record of each subgraph's last allocation
        (``Interpreter._allocated_inputs``), for :class:`MadeShapes`.
    """

    def __init__(self, native_runner, inputs: dict, outputs: dict, subgraph: int, allocations: dict | None = None):
        self._subgraph = subgraph
        self._allocations = {} if allocations is None else allocations
        self._names = {idx: name for name, idx in outputs.items()}
        self._names.update({idx: name for name, idx in inputs.items()})  # (an input first, as the runner writes it)
        self._inputs = frozenset(inputs.values())
        self._get = {idx: (native_runner.output_tensor, name) for name, idx in outputs.items()}
        self._get.update({idx: (native_runner.input_tensor, name) for name, idx in inputs.items()})
        # The data tensors the signature does not name: {index: name in the model}.
        self.unnamed: dict[int, str] = {}
        # Their shapes at the allocation ``self.allocation`` stands for (None: not known from shapes alone).
        self._inferred: dict[int, tuple | None] = {}
        self.allocation: object = None
        # Whether a node's data is not one of the signature's inputs (the
        # subgraph computes it, so its shape may depend on the fed values):
        # the runner then calls infer() once per allocation.
        self.computed = False
        # The shapes the fed values make (set by infer(), with its shape_of).
        self.made: MadeShapes | None = None
        self._shape_of = None

    def nodes(self, nodes: tuple, sg) -> tuple:
        """The ``nodes`` (:func:`~opaque_ops.model.fed_values.nodes_of`) of ``sg`` whose value the runner writes.

        Parameters
        ----------
        nodes : tuple
            The nodes of the signature's subgraph.
        sg : SubgraphInfo
            That subgraph, for the names of the data tensors the signature
            does not name.

        Returns
        -------
        tuple
            The nodes whose value is one of the signature's inputs (the
            runner writes it before each invoke).  The shape of a data tensor
            the signature does not name is not in the C API's reach: those
            tensors are kept in :attr:`unnamed`, and :meth:`infer` works
            their shapes out from the inputs' after each allocation (a shape
            it cannot infer, one that depends on values, leaves its node
            unchecked, as subgraph 0's check leaves a dynamic data tensor).
        """
        kept = tuple(n for n in nodes if n[2] in self._inputs)
        self.unnamed = {n[3]: sg.tensors[n[3]].name for n in kept if n[3] not in self._names}
        self.computed = any(n[3] not in self._inputs for n in kept)
        return kept

    def infer(self, allocation: object, info, shape_of) -> None:
        """Infer the shapes of the :attr:`unnamed` data tensors for the allocation ``allocation`` stands for.

        Parameters
        ----------
        allocation : object
            What stands for the subgraph's current allocation (the
            interpreter's record of the input shapes it was allocated with,
            a new object per allocation): the runner calls this only when it
            is not :attr:`allocation`, so once per allocation.
        info : ModelInfo
            The model with the signature's subgraph as subgraph 0.
        shape_of : callable
            ``shape_of(tensor index)``: the planned shape of a tensor the
            signature names, else None.
        """
        if self.unnamed:
            shapes = _shapes(info, shape_of)  # (where the rules refuse the shapes, so do the allocation's checks)
            self._inferred = {t: shapes.get(t) for t in self.unnamed}
        if self.made is None:
            self.made = MadeShapes(info, self._allocations, self._subgraph)
        self._shape_of = shape_of
        self.allocation = allocation

    def shape(self, index: int) -> tuple | None:
        """The shape of data tensor ``index`` as the node's Eval will see it, or None if not known from shapes."""
        got = self._get.get(index)
        if got is None:
            return self._inferred.get(index)
        t = got[0](got[1])
        return None if t.is_dynamic() else t.shape

    def made_shape(self, op: int, index: int) -> tuple | None:
        """The shape the invoke will make for data tensor ``index`` of operator ``op`` from the fed values, or None.

        For a data tensor whose :meth:`shape` is not known (a dynamic one
        the signature names, or one :meth:`infer` could not tell from
        shapes alone): worked out from the values the runner's inputs hold
        now (:class:`MadeShapes`).
        """
        made = self.made
        return None if made is None else made.shape(op, index, self._reachable, self._shape_of)

    def _reachable(self, index: int):
        """The runtime's tensor ``index`` through its signature name, or None if the signature does not name it."""
        return self.tensor(index) if index in self._get else None

    def tensor(self, index: int):
        """The runtime's tensor ``index`` of the subgraph, through its signature name."""
        get, name = self._get[index]
        return get(name)

    def label(self, index: int) -> str:
        """How the messages name tensor ``index``: its signature name, or its name and index in the subgraph."""
        name = self._names.get(index)
        if name is None:
            return f"tensor {index} ({self.unnamed[index]!r}, which the signature does not name)"
        return repr(name)

    def where(self, what: str, value_t: int, index: int, op: str) -> str:
        """The start of a refusal's message: the call, the signature input and the operator."""
        return f"{what}: input {self._names[value_t]!r} of operator {index} ({op}) of subgraph {self._subgraph}"


def _shapes(info, shape_of, **given) -> dict:
    """:func:`~opaque_ops.model.shapes.infer_shapes` with ``given``, or ``{}`` where its rules refuse the shapes.

    Both users (:class:`MadeShapes`, :meth:`SignatureTensors.infer`) only
    look shapes up: shapes that the rules refuse tell them none, and a node
    whose data tensor's shape is not told stays unchecked.
    """
    from ..model.shapes import infer_shapes

    try:
        return infer_shapes(info, shape_of, **given)
    except ShapeError:
        return {}


def _reverse_sequence(where, v, x, data_t, s, b, how, fed=False) -> None:
    # tensorflow/lite/kernels/reverse_sequence.cc reads the lengths only in
    # Eval, which checks the first one alone and reads it even out of empty
    # lengths: the rule the model checks apply to constant lengths
    # (model.shapes.reverse_sequence_fault says which values crash).  The
    # allocation's shape rules already refuse an empty batch with lengths
    # of shape [0] when they know the input's shape; this covers the rest.
    from ..model.shapes import reverse_sequence_fault

    lengths = v.reshape(-1)
    fault = reverse_sequence_fault(x, s, b, lengths.tolist())
    if fault is None:
        return
    if fault.empty_batch:
        raise InvalidInputError(
            f"{where} holds no sequence lengths for input {data_t} of shape {list(x)}, whose batch dimension {b} "
            "is empty; TFLite's REVERSE_SEQUENCE reads a first length anyway, past the empty tensor (a crash). "
            f"{'Feed values that give the input' if fed else 'Resize the input to'} at least one batch, with one "
            "length each (the output would be empty: the operator can be skipped)"
        )
    shown = lengths.tolist() if lengths.size <= 8 else f"{lengths[:8].tolist()[:-1]}..."
    raise InvalidInputError(
        f"{where} holds sequence lengths {shown}, but input {data_t} (shape {list(x)}) has {x[s]} steps "
        f"along its sequence dimension {s} (length {fault.index} is {int(lengths[fault.index])}); TFLite's "
        f"REVERSE_SEQUENCE reads and writes past its tensors for a length above that (garbage, or a crash). "
        f"Set lengths of at most {x[s]} {how}, or {'feed values that give the input' if fed else 'resize the input to'} "
        "longer sequences"
    )


def _top_k(where, v, x, data_t, version, how) -> None:
    # tensorflow/lite/kernels/topk_v2.cc: with a k that is not a constant,
    # Prepare makes the outputs dynamic and Eval reads k (top_k->data.i32[0])
    # before TopK runs; 2.17.1's TopContainer::push then corrupts the heap for
    # k = 0 on rows of two or more values (SIGABRT), as
    # opaque_ops.model.checks.version_rules._top_k says for a constant k.
    if v.size != 1 or not x or int(v.reshape(-1)[0]) != 0:
        return  # (Eval refuses another element count, and k past the row, itself)
    if x[-1] >= 2 and math.prod(x[:-1]) > 0:
        raise InvalidInputError(
            f"{where} holds k = 0 for rows of {x[-1]} values (input {data_t} of shape {list(x)}); TFLite "
            f"{version}'s TOPK_V2 corrupts memory for k = 0 (TFLite 2.23 runs it). Set k between 1 and "
            f"{x[-1]} {how}, or use TFLite 2.23"
        )


def _reverse_v2(where, v, x, data_t, how, fed=False) -> None:
    # tensorflow/lite/kernels/reverse.cc reads the axes only in Eval; its
    # reference Reverse (kernels/internal/reference/reverse.h) copies out of
    # an input that is empty after the last reversed axis but not up to it
    # (SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert alike): the rule the
    # model checks apply to a constant axis (model.shapes._reverse_v2).
    from ..model.shapes import reverse_reads_past

    last = reverse_reads_past(x, [int(a) for a in v.reshape(-1)])
    if last is not None:
        raise InvalidInputError(
            f"{where} holds the axes {v.reshape(-1).tolist()}, but input {data_t} of shape {list(x)} is empty "
            f"after the reversed axis {last}, which TFLite's REVERSE_V2 cannot reverse (it reads past the empty "
            f"tensor). Reverse a later axis (set it {how}), or "
            f"{'feed values that give the input no' if fed else 'resize the input without'} empty dimensions"
        )


def _broadcast_to(where, v, x, data_t, version, how) -> None:
    # tensorflow/lite/kernels/broadcast_to.cc makes the output dynamic for a
    # shape that is not a constant and reads it in Eval's ResizeOutputTensor,
    # which refuses a shape the input does not broadcast to; 2.17.1's
    # BroadcastImpl then copies rows into an output that is empty before the
    # last broadcast dimension (heap corruption: SIGABRT for [1, 3] to
    # [0, 5, 3]), the version rule for a constant shape (version_rules._broadcast_to).
    from ..model.runtime_versions import broadcast_writes_into_empty  # (not from the checks: see that module)

    out = tuple(int(d) for d in v.reshape(-1))
    pad = (1,) * (len(out) - len(x))
    if v.ndim != 1 or min(out, default=0) < 0 or len(x) > len(out):
        return  # (Eval refuses these before it copies anything)
    if any(a not in (1, b) for a, b in zip(pad + tuple(x), out)):
        return
    if broadcast_writes_into_empty(x, out):
        raise InvalidInputError(
            f"{where} holds the shape {list(out)}, which is empty in a dimension before the last one input "
            f"{data_t} of shape {list(x)} is broadcast along; TFLite {version}'s BROADCAST_TO still copies rows "
            "into that empty output and corrupts memory (TFLite 2.23 runs it). Set a shape that is not empty "
            f"{how}, or use TFLite 2.23"
        )
