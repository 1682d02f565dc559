"""Signature runners: one SignatureDef of a model, called with named inputs.

A runner is a second door into its interpreter's memory, so every call that
resizes or allocates goes through the interpreter's one guarded path
(``Interpreter._reshape``): same lock, same model checks, same view rules.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError, OpaqueOpsError
from . import tensors as _tensors
from .reshape_target import Graph, as_shape
from .sigint import WATCH_AFTER_S, invoke_watched


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

        self._graph = Graph(
            sig.subgraph_index,
            {idx: name for name, idx in self._inputs.items()},
            native_runner.resize_input,
            native_runner.allocate,
            native_runner.input_tensor,
            shape_of,
        )
        self._watch = True

    def _details(self, names, get):
        out = {}
        for n in names:
            t = get(n)
            scale, zp = t.quantization
            out[n] = {
                "name": t.name,
                "shape": np.array(t.shape, np.int32),
                "dtype": t.dtype.type if t.dtype is not None else None,
                "quantization": (scale, zp),
            }
        return out

    def get_input_details(self) -> dict:
        """``{input name: details}``."""
        it = self._interpreter
        with it._calls.held(f"signature {self.key!r}: get_input_details"):
            it._live()
            return self._details(self._r.input_names(), self._r.input_tensor)

    def get_output_details(self) -> dict:
        """``{output name: details}``."""
        it = self._interpreter
        with it._calls.held(f"signature {self.key!r}: get_output_details"):
            it._live()
            return self._details(self._r.output_names(), self._r.output_tensor)

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
            for n, a in arrays.items():
                _tensors.write(r.input_tensor(n), a, f"{what} input {n!r}")
            try:
                if self._watch:
                    status, took = invoke_watched(native, r.invoke)
                    self._watch = took > WATCH_AFTER_S
                else:
                    status = r.invoke()
            finally:
                if moves:
                    it._keep_unmoved_slots(native)
            it._check(status, f"{what}: invoke", native)
            return {n: _tensors.read(r.output_tensor(n), f"{what} output {n!r}") for n in r.output_names()}

        return it._reshape(what, self._graph, resizes=resizes, allocate=True, then=run)


def _restore_runner(interpreter, key):
    """The other half of ``SignatureRunner.__reduce__``."""
    return interpreter.get_signature_runner(key)
