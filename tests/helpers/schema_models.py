"""Models written with ai-edge-litert's flatbuffer schema module, for what ModelBuilder cannot express.

ModelBuilder writes one subgraph of the option tables it knows; tests also
need VAR_HANDLE options, options stored under another union type, models
of several subgraphs (a CALL_ONCE init subgraph), and other forms a
converter may write.  ``SchemaModel`` is the small part of
``schema_py_generated``'s object API those tests use: tensors (constants
get a buffer of their own), operators (one operator code per builtin), and
the packed bytes.
"""

from __future__ import annotations

import numpy as np


class SchemaModel:
    """Subgraphs built up one after the other through ai-edge-litert's ``schema_py_generated`` (``.schema``).

    Tensors and operators go to the subgraph being built (subgraph 0 first);
    :meth:`next_subgraph` closes it and starts the next one.
    """

    def __init__(self) -> None:
        from ai_edge_litert import schema_py_generated as schema

        self.schema = schema
        self.model = schema.ModelT()
        self.model.version = 3
        self.model.buffers = [schema.BufferT()]
        self.model.operatorCodes = []
        self.done: list = []  # the subgraphs closed by next_subgraph
        self._start_subgraph()

    def _start_subgraph(self) -> None:
        self.subgraph = self.schema.SubGraphT()
        self.subgraph.tensors, self.subgraph.operators = [], []

    def next_subgraph(self, inputs=(), outputs=()) -> int:
        """Close the subgraph being built (``inputs`` and ``outputs`` its own) and start the next; returns its index."""
        self.subgraph.inputs, self.subgraph.outputs = list(inputs), list(outputs)
        self.done.append(self.subgraph)
        self._start_subgraph()
        return len(self.done)

    def tensor(self, name: str, shape, kind=None, values=None) -> int:
        """Add a tensor (float32 unless ``kind``); ``values`` make it a constant. Returns its index."""
        s = self.schema
        t = s.TensorT()
        t.name, t.shape, t.buffer = name.encode(), list(shape), 0
        t.type = s.TensorType.FLOAT32 if kind is None else kind
        if values is not None:
            buf = s.BufferT()
            buf.data = np.asarray(values).tobytes()
            self.model.buffers.append(buf)
            t.buffer = len(self.model.buffers) - 1
        self.subgraph.tensors.append(t)
        return len(self.subgraph.tensors) - 1

    def op(self, code: int, ins, outs, options_type: int = 0, options=None) -> None:
        """Add a builtin operator; its options table is written under ``options_type`` as given."""
        s = self.schema
        codes = [c.builtinCode for c in self.model.operatorCodes]
        if code not in codes:
            c = s.OperatorCodeT()
            c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
            self.model.operatorCodes.append(c)
            codes.append(code)
        o = s.OperatorT()
        o.opcodeIndex = codes.index(code)
        o.inputs, o.outputs = list(ins), list(outs)
        o.builtinOptionsType, o.builtinOptions = options_type, options
        self.subgraph.operators.append(o)

    def custom_op(self, name: str, ins, outs) -> None:
        """Add a custom operator ``name`` (no options), for an op the test registers."""
        s = self.schema
        c = s.OperatorCodeT()
        c.builtinCode, c.deprecatedBuiltinCode, c.customCode, c.version = (
            s.BuiltinOperator.CUSTOM,
            s.BuiltinOperator.CUSTOM,
            name.encode(),
            1,
        )
        self.model.operatorCodes.append(c)
        o = s.OperatorT()
        o.opcodeIndex = len(self.model.operatorCodes) - 1
        o.inputs, o.outputs = list(ins), list(outs)
        self.subgraph.operators.append(o)

    def build(self, inputs, outputs) -> bytes:
        """The model's bytes, with ``inputs`` and ``outputs`` as the last subgraph's."""
        import flatbuffers

        self.subgraph.inputs, self.subgraph.outputs = list(inputs), list(outputs)
        self.model.subgraphs = [*self.done, self.subgraph]
        fb = flatbuffers.Builder(0)
        fb.Finish(self.model.Pack(fb), file_identifier=b"TFL3")
        return bytes(fb.Output())
