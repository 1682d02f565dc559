"""The parts of a model the readers build: tensors, operators, subgraphs, signatures.

Below both readers (:mod:`~opaque_ops.model.parser`, the Python one, and
the compiled one, whose spec names :class:`TensorInfo` and :class:`OpInfo`)
and :mod:`~opaque_ops.model.reader`, which holds :class:`ModelInfo` and
re-exports these: ``from opaque_ops.model.reader import TensorInfo`` is the
public path.
"""

from __future__ import annotations

import numpy as np

from .._records import Record, record

# The model's parts are dataclasses that no start-up pays for (see
# opaque_ops._records): their __init__ is written here, @dataclass runs when
# something first asks for their fields.


@record
class TensorInfo(Record):
    """One tensor of a subgraph, as stored in the model."""

    index: int
    name: str
    shape: tuple
    shape_signature: tuple | None
    dtype: np.dtype | None
    type_name: str
    buffer: int
    data: bytes | None
    quantization: dict
    is_variable: bool
    is_sparse: bool = False
    # traversal_order, block_map (None if not stored), dim_metadata
    # [(format, dense_size, segments, indices)], as stored; None for a dense
    # tensor.  The one parse of the sparsity table: the checks and
    # get_tensor_details() both read it from here.
    sparsity: dict | None = None

    def __init__(
        self,
        index: int,
        name: str,
        shape: tuple,
        shape_signature: tuple | None,
        dtype: np.dtype | None,
        type_name: str,
        buffer: int,
        data: bytes | None,
        quantization: dict,
        is_variable: bool,
        is_sparse: bool = False,
        sparsity: dict | None = None,
    ):
        self.index = index
        self.name = name
        self.shape = shape
        self.shape_signature = shape_signature
        self.dtype = dtype
        self.type_name = type_name
        self.buffer = buffer
        self.data = data
        self.quantization = quantization
        self.is_variable = is_variable
        self.is_sparse = is_sparse
        self.sparsity = sparsity

    def array(self) -> np.ndarray | None:
        """The constant data as a numpy array (None if none or no numpy dtype)."""
        if self.data is None or self.dtype is None:
            return None
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        if count * self.dtype.itemsize != len(self.data):
            return None
        return np.frombuffer(self.data, dtype=self.dtype.newbyteorder("<")).reshape(self.shape)


@record
class OpInfo(Record):
    """One operator of a subgraph."""

    index: int
    opcode_index: int
    builtin_code: int
    op_name: str
    is_custom: bool
    version: int
    inputs: list
    outputs: list
    custom_options: bytes | None
    options: dict | None
    builtin_options_type: int
    builtin_options: dict | None = None

    def __init__(
        self,
        index: int,
        opcode_index: int,
        builtin_code: int,
        op_name: str,
        is_custom: bool,
        version: int,
        inputs: list,
        outputs: list,
        custom_options: bytes | None,
        options: dict | None,
        builtin_options_type: int,
        builtin_options: dict | None = None,
    ):
        self.index = index
        self.opcode_index = opcode_index
        self.builtin_code = builtin_code
        self.op_name = op_name
        self.is_custom = is_custom
        self.version = version
        self.inputs = inputs
        self.outputs = outputs
        self.custom_options = custom_options
        self.options = options
        self.builtin_options_type = builtin_options_type
        self.builtin_options = builtin_options


@record
class SubgraphInfo(Record):
    """One subgraph: tensors, operators and its interface."""

    index: int
    name: str
    tensors: list
    inputs: list
    outputs: list
    operators: list

    def __init__(self, index: int, name: str, tensors: list, inputs: list, outputs: list, operators: list):
        self.index = index
        self.name = name
        self.tensors = tensors
        self.inputs = inputs
        self.outputs = outputs
        self.operators = operators


@record
class SignatureInfo(Record):
    """A SignatureDef: named inputs and outputs of one subgraph."""

    key: str
    subgraph_index: int
    inputs: dict
    outputs: dict

    def __init__(self, key: str, subgraph_index: int, inputs: dict, outputs: dict):
        self.key = key
        self.subgraph_index = subgraph_index
        self.inputs = inputs
        self.outputs = outputs
