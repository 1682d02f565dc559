"""Signature runners: one SignatureDef of a model, called with named inputs.

A runner is a second door into its interpreter's memory, so every call that
resizes or allocates goes through the interpreter's one guarded path
(``Interpreter._reshape``): same lock, same model checks, same view rules.
"""

from __future__ import annotations

import numpy as np

from .. import _native
from ..errors import InvalidInputError, OpaqueOpsError
from . import tensors as _tensors
from .reshape_target import Graph, as_shape
from .sigint import WATCH_AFTER_S

_ndarray = np.ndarray
_MISSING = object()
# The advice of a refused fed value (interpreter.fed_values): a runner's
# caller gives the value as an argument, never with set_tensor().
_AS_ARGUMENT = "as the runner's argument"


class SignatureRunner:
    """Runs one signature of a model: ``runner(x=array)`` returns ``{output name: array}``.

    Created by :meth:`Interpreter.get_signature_runner`.  The runner keeps its
    interpreter alive; after the interpreter's ``close()`` every call raises
    ``ClosedError``.
    """

    def __init__(self, interpreter, native_runner, key: str, sig):
        self._interpreter = interpreter  # keep-alive: the runner lives inside it
        self._r = native_runner
        self.key = key
        if sig is None:  # pragma: no cover - TFLite and our reader read the same SignatureDefs
            raise OpaqueOpsError(f"signature {key!r} is not in the model's SignatureDefs")
        self._inputs = dict(sig.inputs)  # name -> tensor index (in the signature's subgraph)
        self._outputs = dict(sig.outputs)
        self._index_of = {name: idx for name, idx in self._inputs.items()}
        tensor_for = {idx: (native_runner.input_tensor, name) for name, idx in self._inputs.items()}
        tensor_for.update({idx: (native_runner.output_tensor, name) for name, idx in self._outputs.items()})

        def shape_of(index):
            got = tensor_for.get(index)
            if got is None:
                return None
            t = got[0](got[1])
            return None if t.is_dynamic() else t.shape

        # The C API's runner resizes strictly (only the -1 dimensions of the
        # shape signature may change), where ai-edge-litert's runner resizes
        # any dimension and the rank, as the interpreter's resize_tensor_input
        # does.  An input of subgraph 0 that is one of the interpreter's inputs
        # is the same tensor, so it is resized through the interpreter
        # (TfLiteInterpreterResizeInputTensor, not strict) and the runner then
        # allocates the subgraph that holds it.  Other subgraphs' tensors have
        # no such door: they stay strict, refused in the runner's words.
        positions = interpreter._input_positions if sig.subgraph_index == 0 else {}
        through = {name: positions[idx] for name, idx in self._inputs.items() if idx in positions}

        def resize(name, shape):
            position = through.get(name)
            if position is None:
                return native_runner.resize_input(name, shape)
            return interpreter._live().resize_input(position, shape)

        self._graph = Graph(
            sig.subgraph_index,
            {idx: name for name, idx in self._inputs.items()},
            resize,
            native_runner.allocate,
            native_runner.input_tensor,
            shape_of,
            strict=frozenset(set(self._inputs) - set(through)),
            arena=SignatureArena(native_runner, self._inputs, self._outputs) if sig.subgraph_index else None,
        )
        self._watch = True
        if sig.subgraph_index:
            self._fed, self._reach = _fed_nodes(interpreter, native_runner, sig, self._inputs, self._outputs)
        # The fast path of __call__ (_call_cached): a signature of the main
        # subgraph reads and writes the same tensors as the interpreter's
        # set_tensor/get_tensor, so it can use their cached views.  Other
        # subgraphs' tensors have no cached views (the C API reads only the
        # main subgraph's by index), and always take the full path.
        self._cached_in = tuple(self._inputs.items()) if sig.subgraph_index == 0 else None
        out_order = native_runner.output_names()
        self._output_names = tuple(out_order)  # TFLite's order, fixed for the runner's life
        self._cached_out = tuple((n, self._outputs[n]) for n in out_order if n in self._outputs)
        if len(self._cached_out) != len(out_order):  # pragma: no cover - TFLite and our reader agree
            self._cached_in = None

    # Operators of a subgraph other than 0 whose kernel reads a signature
    # input's value in Eval and crashes on some (see _fed_nodes), and how
    # to reach their tensors: none for subgraph 0 (the interpreter's
    # _fed_values) and for most runners.
    _fed: tuple = ()
    _reach = None

    def _details(self, names, get, indices: dict) -> dict:
        """``{name: details}`` as :meth:`Interpreter.get_input_details` gives them, one per signature tensor.

        ai-edge-litert's runner answers with its interpreter's tensor details
        (``index`` is the tensor's index in the signature's subgraph), so the
        same code (:func:`.tensors.details`) makes both: the live tensor gives
        the shape, dtype and per-tensor quantization, the model's record the
        ``shape_signature``, ``quantization_parameters`` and
        ``sparsity_parameters`` the C API does not expose.
        """
        tensors = self._interpreter._info.subgraphs[self._graph.subgraph].tensors
        out = {}
        for n in names:
            index = indices[n]
            out[n] = _tensors.details(get(n), index, tensors[index] if 0 <= index < len(tensors) else None)
        return out

    def get_input_details(self) -> dict:
        """``{input name: details}``, with the keys of :meth:`Interpreter.get_input_details`.

        Returns
        -------
        dict
            Per input name: ``name``, ``index`` (in the signature's subgraph),
            ``shape``, ``shape_signature``, ``dtype``, ``quantization``,
            ``quantization_parameters`` and ``sparsity_parameters``, as
            ai-edge-litert's runner gives them.
        """
        it = self._interpreter
        with it._calls.held(f"signature {self.key!r}: get_input_details"):
            it._live()
            return self._details(self._r.input_names(), self._r.input_tensor, self._inputs)

    def get_output_details(self) -> dict:
        """``{output name: details}``, with the keys of :meth:`get_input_details`.

        Returns
        -------
        dict
            Per output name, the fields :meth:`get_input_details` lists.
        """
        it = self._interpreter
        with it._calls.held(f"signature {self.key!r}: get_output_details"):
            it._live()
            return self._details(self._r.output_names(), self._r.output_tensor, self._outputs)

    def allocate_tensors(self) -> None:
        """Allocate the signature's tensors (nothing to do if nothing changed)."""
        self._interpreter._reshape(f"signature {self.key!r}: allocate_tensors", self._graph, allocate=True)

    def resize_tensor_input(
        self, input_name: str, tensor_size: list[int] | tuple[int, ...] | np.ndarray, strict: bool = False
    ) -> None:
        """Change the shape of input ``input_name``; ``allocate_tensors()`` (or a call) follows.

        The same rules as :meth:`Interpreter.resize_tensor_input`.
        """
        self._require_names([input_name], what="resize_tensor_input")
        shape = as_shape(tensor_size, f"signature {self.key!r}: resize {input_name!r}")
        self._interpreter._reshape(
            f"signature {self.key!r}: resize_tensor_input",
            self._graph,
            resizes=[(self._index_of[input_name], shape, bool(strict))],
        )

    def _require_names(self, names, what="call") -> None:
        unknown = set(names) - set(self._inputs)
        if unknown:
            raise InvalidInputError(
                f"signature {self.key!r} has no input(s) {sorted(unknown)}; its inputs are {sorted(self._inputs)}"
            )

    def __reduce__(self):
        # Its interpreter (re-created from its own pickle) and the key.
        return _restore_runner, (self._interpreter, self.key)

    def __call__(self, **inputs) -> dict:
        """Run the signature with the given named inputs and return its outputs (copies).

        Inputs whose shape differs from the current one are resized first;
        then the signature is allocated (if anything changed), the inputs are
        copied in, it is invoked and its outputs copied out, all under the
        interpreter's lock.
        """
        cached = self._cached_in
        if cached is not None and not self._watch and len(inputs) == len(cached):
            out = self._call_cached(inputs, cached)
            if out is not None:
                return out
        unknown = set(inputs) - set(self._inputs)
        missing = set(self._inputs) - set(inputs)
        if unknown or missing:
            raise InvalidInputError(
                f"signature {self.key!r} takes inputs {sorted(self._inputs)}; "
                f"unknown: {sorted(unknown)}, missing: {sorted(missing)}"
            )
        arrays = {n: v if isinstance(v, np.ndarray) else np.asarray(v) for n, v in inputs.items()}
        resizes = [
            (self._index_of[n], as_shape(a.shape, f"signature {self.key!r} input {n!r}"), False)
            for n, a in arrays.items()
        ]
        it = self._interpreter
        what = f"signature {self.key!r}"

        def run(native):
            r = self._r
            # The main subgraph's invoke may move its memory when it has dynamic tensors (see Interpreter._moves).
            moves = self._graph.subgraph == 0 and it._moves
            if moves:
                it._before_moving_invoke(f"{what}: invoke")
            # Views for the next call's short path, cached once.  On a model
            # whose invoke moves memory, the inputs' views are kept by the
            # invoke below only if their tensors stay in place
            # (Interpreter._run_moving), and a dynamic output never gets one.
            remember = self._graph.subgraph == 0
            # The fed-value nodes (Interpreter._fed_values, model.fed_values)
            # read subgraph 0's inputs, which are the interpreter's inputs:
            # a runner of subgraph 0 writes those, as set_tensor does, so its
            # invoke checks their values first, as Interpreter.invoke does.
            # A runner of another subgraph writes that subgraph's inputs,
            # which those nodes do not read: its own nodes of the kind
            # (self._fed, found when the runner was made) read them, and
            # are checked the same way.  (Not `remember`: that one is about
            # which views the interpreter may keep.)
            writes_main_inputs = self._graph.subgraph == 0
            for n, a in arrays.items():
                t = r.input_tensor(n)
                _tensors.write(t, a, f"{what} input {n!r}")
                if remember and self._index_of[n] not in it._slots:
                    it._remember(self._index_of[n], t)
            if writes_main_inputs:
                if it._fed_values:
                    it._refuse_fed_values(native, f"{what}: invoke", _AS_ARGUMENT)
            elif self._fed:
                from .fed_values import refuse_crashing_values  # (only a runner with such an operator)

                reach = self._reach
                if reach.computed:
                    # A data tensor the subgraph computes: the shape of one
                    # the signature does not name is inferred from the
                    # inputs', once per allocation of the subgraph (each
                    # makes a new _allocated_inputs entry); one that depends
                    # on the fed values, at each call (SignatureTensors.made_shape).
                    allocation = it._allocated_inputs.get(self._graph.subgraph)
                    if allocation is not reach.allocation:
                        reach.infer(allocation, *it._seen(native, self._graph)[:2])
                refuse_crashing_values(native, self._fed, native.rt.version, f"{what}: invoke", reach, _AS_ARGUMENT)
            variables = stores = None
            buffers = it._buffers is not None and self._graph.subgraph in it._buffers.unchecked
            if it._variables is not None or buffers:
                # (Counted after the invoke, once it succeeded: Interpreter._count_variables, VariableBuffers.)
                named = {index: n for n, index in self._inputs.items()}

                def tensor_of(index):
                    return r.input_tensor(named[index]) if index in named else None

                if it._variables is not None:
                    variables = it._check_variables(native, self._graph.subgraph, f"{what}: invoke", tensor_of)
                if buffers:
                    stores = it._check_buffers(self._graph.subgraph, f"{what}: invoke", tensor_of)
            status, took = it._run_invoke(native, r.invoke, self._watch, moves)
            if self._watch:
                self._watch = took > WATCH_AFTER_S
            it._check(status, f"{what}: invoke", native)
            if variables is not None:
                it._count_variables(variables, self._graph.subgraph)
            if stores is not None:
                it._buffers.after_invoke(stores)
            out = {}
            for n in self._output_names:
                t = r.output_tensor(n)
                out[n] = _tensors.read(t, f"{what} output {n!r}")
                if remember and n in self._outputs and self._outputs[n] not in it._slots:
                    it._remember(self._outputs[n], t)
            return out

        return it._reshape(what, self._graph, resizes=resizes, allocate=True, then=run)

    def _call_cached(self, inputs: dict, cached: tuple) -> dict | None:
        """``__call__``'s common case on views the interpreter cached, or None for the full path.

        The common case: the interpreter is planned and idle, every input is
        an ndarray of its tensor's dtype and current shape, and every input
        and output tensor has a cached view (``Interpreter._slots``: writable
        arena tensors, not dynamic, dropped by every resize, allocation,
        ``close()`` and fork refusal, so a view found there is valid).  Then
        no resize or allocation is due, and the call is the interpreter's
        ``set_tensor`` fast path per input, the runner's invoke, and a copy
        of each output view.  Everything else (a list, another dtype or
        shape, a missing or unknown name, a closed or forked interpreter, a
        lock held by another call, ``tensor()`` views alive on a model whose
        invoke moves memory) returns None before anything is written, and
        the full path gives the result or the error, as it always did.

        On a model whose invoke may move memory (``Interpreter._moves``: a
        dynamic tensor), the invoke runs, as on the full path, through
        ``Interpreter._run_moving``, which keeps only the cached views whose
        tensors stayed in place; the outputs are then read from the views
        that are left, and the others (a dynamic output has none) through
        the runner, as the full path reads them.
        """
        it = self._interpreter
        if it._prechecks and (
            it._variables is not None
            or (it._fed_values and self._graph.subgraph == 0)
            or (it._buffers is not None and self._graph.subgraph in it._buffers.unchecked)
        ):
            return None  # the full path checks the variables, and the fed values, before its invoke
        calls, lock = it._calls, it._lock
        if not calls.try_acquire():
            return None  # the full path waits for it, or refuses a re-entered call
        try:
            native = it._native
            # (The layout version as _is_planned asks it: an isolated worker's
            # placement may give tensors new buffers between two calls.)
            if native is None or not it._allocated or native.layout_version != it._layout_version:
                return None
            slots = it._slots
            writes = _cached_writes(inputs, cached, slots)
            if writes is None:
                return None
            if it._moves:
                if it._views:
                    return None  # the full path refuses live tensor() views (or finds them dead)
                return self._call_moving(writes, it, native)
            reads = []
            for name, index in self._cached_out:
                slot = slots.get(index)
                if slot is None:
                    return None
                reads.append((name, slot[0]))
            for view, a in writes:
                view[...] = a
            status = self._r.invoke()
            if status or native.sink:
                it._check(status, f"signature {self.key!r}: invoke", native)
            return {name: view.copy() for name, view in reads}
        finally:
            calls.owner = None
            lock.release()

    def _call_moving(self, writes: list, it, native) -> dict:
        """``_call_cached`` on a model whose invoke may move memory (the caller holds the lock)."""
        slots = it._slots
        for view, a in writes:
            view[...] = a
        r = self._r
        status = it._run_moving(native, r.invoke)  # (the views of tensors that moved are dropped)
        what = f"signature {self.key!r}"
        if status or native.sink:
            it._check(status, f"{what}: invoke", native)
        out = {}
        for name, index in self._cached_out:
            slot = slots.get(index)
            if slot is not None:
                out[name] = slot[0].copy()
                continue
            t = r.output_tensor(name)
            out[name] = _tensors.read(t, f"{what} output {name!r}")
            it._remember(index, t)  # (not a dynamic tensor, nor one that may not be written)
        return out


class SignatureArena:
    """What the growing-arena guard sees of a subgraph other than 0: its signature's inputs and outputs.

    The C API reaches no other tensor of such a subgraph, so every other
    tensor counts as not in the arena: the guard's lower bound
    (:func:`..model.arena.arena_lower_bound`) leaves it out, which keeps it a
    lower bound.  Asked only by ``arena_guard.refuse_unaffordable``, after a
    resize of this subgraph.

    Parameters
    ----------
    native_runner : NativeSignatureRunner
    inputs, outputs : dict
        ``{name: tensor index}`` of the signature (in its subgraph).
    """

    def __init__(self, native_runner, inputs: dict, outputs: dict):
        self._r = native_runner
        self._where = {idx: (name, True) for name, idx in outputs.items()}
        self._where.update({idx: (name, False) for name, idx in inputs.items()})  # (an input first)
        self._outputs = tuple(outputs)

    def _address(self, index: int) -> int | None:
        got = self._where.get(index)
        return None if got is None else self._r.arena_address(*got)

    def in_arena(self, index: int, placed: bool = True) -> bool:
        """As ``NativeInterpreter.in_arena``; False for a tensor the signature does not name."""
        address = self._address(index)
        return address is not None and (not placed or address != 0)

    def room(self, indices) -> int:
        """As ``NativeInterpreter.arena_room``: the first of ``indices`` the signature names with memory locates the arena.

        ``indices`` must leave out variables (TFLite keeps them in its other,
        persistent arena) and the inputs just resized (no memory until the
        next allocation).
        """
        return _native.mapping_room(next((a for a in map(self._address, indices) if a), 0))

    def unbacked(self) -> tuple[str, int] | None:
        """``(name, bytes)`` of an input the runtime planned in the arena but gave no memory, or None.

        As ``NativeInterpreter.unbacked_input``, for this subgraph's arena
        (TFLite 2.17 does not check its allocation and reports success).
        """
        for name, output in self._where.values():
            if output:
                continue
            if self._r.arena_address(name) == 0:
                nbytes = self._r.input_tensor(name).nbytes
                if nbytes:
                    return name, nbytes
        return None

    def stops(self) -> bool:
        """Whether an output of the signature is dynamic: the allocation then stops before the end of the graph.

        (A dynamic tensor the signature does not name cannot be seen; the
        tensors after it count only if the last run gave them memory.)
        """
        return any(self._r.output_tensor(name).is_dynamic() for name in self._outputs)


def _cached_writes(inputs: dict, cached: tuple, slots: dict) -> list | None:
    """``(view, array)`` per input of ``cached`` (name, tensor index), or None unless each is the common case.

    The common case: an ndarray of its tensor's dtype and current shape,
    with a view the interpreter cached (``slots``).
    """
    writes = []
    for name, index in cached:
        a = inputs.get(name, _MISSING)
        slot = slots.get(index)
        if (
            slot is None
            or type(a) is not _ndarray
            or a.shape != slot[2]
            or not (a.dtype is slot[1] or a.dtype == slot[1])
        ):
            return None
        writes.append((slot[0], a))
    return writes


def _fed_nodes(interpreter, native_runner, sig, inputs: dict, outputs: dict) -> tuple:
    """``(nodes, SignatureTensors)`` of the fed-value operators of a signature's subgraph other than 0.

    The operators :func:`..model.fed_values.nodes_of` finds in that subgraph
    whose value is one of the signature's inputs, for this runtime
    (``for_runtime``), or ``((), None)``; the shapes of their data tensors
    that the signature does not name are inferred at the first call after
    each allocation (``SignatureTensors.infer``).  Subgraph 0's are kept in the
    model's record, since every invoke asks for them; these are found when a
    runner of the subgraph is made, so only a model used through such a
    runner reads its operators for them (a start whose verdict is on disk
    reads none), and the first allocation of the subgraph reads them anyway
    to check its shapes (those verdicts are not kept on disk either).
    """
    from ..model.fed_values import for_runtime, nodes_of

    subgraphs = interpreter._info.subgraphs
    k = sig.subgraph_index
    nodes = nodes_of(subgraphs[k]) if 0 <= k < len(subgraphs) else ()
    if not nodes:
        return (), None
    from .fed_values import SignatureTensors  # (only a model with such an operator)

    reach = SignatureTensors(native_runner, inputs, outputs, k, interpreter._allocated_inputs)
    nodes = reach.nodes(for_runtime(nodes, interpreter._live().rt.version), subgraphs[k])
    return (nodes, reach) if nodes else ((), None)


def _restore_runner(interpreter, key):
    """The other half of ``SignatureRunner.__reduce__``."""
    return interpreter.get_signature_runner(key)
