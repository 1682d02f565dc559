"""``read_model``: a bounds-checked reader for untrusted ``.tflite`` bytes.

Every offset and length is checked against the buffer before use, and the
total work is bounded in proportion to the file size; anything malformed is
reported as :class:`~opaque_ops.errors.ModelError`.

This module is what every start imports: :class:`ModelInfo` (with the
parts a model made from its record reads on first use) and the classes it
holds (from :mod:`~opaque_ops.model.parts`), :func:`read_model`, which
tries the compiled reader first, and :func:`unusable_model`.  The Python
reader itself (the flatbuffer walker, :mod:`~opaque_ops.model.parser`) and
the tables both readers decode with (:mod:`~opaque_ops.model.decoding`) are
imported when a model is read: a start from the model's record reads none
(tests/model/test_reader_imports.py), and a first start whose model the
compiled reader reads does not import the walker.
"""

from __future__ import annotations

import os

from .._records import FACTORY, Record, field, record
from ..errors import ModelError
from .parts import OpInfo, SignatureInfo, SubgraphInfo, TensorInfo
from .schema import FILE_IDENTIFIER

__all__ = [
    "ModelInfo",
    "OpInfo",
    "SignatureInfo",
    "SubgraphInfo",
    "TensorInfo",
    "read_model",
    "unusable_model",
    "use_compiled_reader",
]

# A dataclass that no start-up pays for, as the parts are (opaque_ops._records).


@record
class ModelInfo(Record):
    """A parsed model.  Produced by :func:`read_model`."""

    version: int
    description: str
    operator_codes: list
    subgraphs: list
    signatures: list
    buffers: list = field(repr=False, default_factory=list)
    # Metadata entries the way TFLite keeps them (FlatBufferModel::
    # ReadAllMetadata): name -> buffer index, for entries with a name and a
    # non-empty buffer stored inside the flatbuffer; a later entry of the
    # same name replaces an earlier one.
    metadata: dict = field(repr=False, default_factory=dict)
    has_identifier: bool = True
    # Verdicts of the checks, keyed by what they depend on (model.checks);
    # only ever filled on models the Interpreter holds (model.cache).
    verdicts: dict = field(repr=False, compare=False, default_factory=dict)

    def __init__(
        self,
        version: int,
        description: str,
        operator_codes: list,
        subgraphs: list,
        signatures: list,
        buffers: list = FACTORY,
        metadata: dict = FACTORY,
        has_identifier: bool = True,
        verdicts: dict = FACTORY,
    ):
        self.version = version
        self.description = description
        self.operator_codes = operator_codes
        self.subgraphs = subgraphs
        self.signatures = signatures
        self.buffers = [] if buffers is FACTORY else buffers
        self.metadata = {} if metadata is FACTORY else metadata
        self.has_identifier = has_identifier
        self.verdicts = {} if verdicts is FACTORY else verdicts

    def custom_ops(self) -> list[tuple[str, int]]:
        """Sorted ``(name, version)`` pairs of the custom ops the model uses."""
        known = self.__dict__.get("_custom_ops")
        if known is not None:
            return list(known)
        used = set()
        for sg in self.subgraphs:
            for op in sg.operators:
                if op.is_custom:
                    used.add((op.op_name, op.version))
        return sorted(used)

    @classmethod
    def _read_later(cls, source: bytes, has_identifier: bool, custom_ops) -> ModelInfo:
        """A ModelInfo whose parts are read from ``source`` on first use.

        For bytes that :func:`read_model` has read before (the verdicts kept
        on disk by :mod:`~opaque_ops.model.cache`): creating an interpreter
        for a model already known needs neither the tensors nor the
        operators, only what the cache kept (``custom_ops``).  The first
        access to a part reads the model's outline (subgraphs, operator
        codes, signatures); each tensor, operator and buffer is read when it
        is first asked for (``get_input_details()`` reads the inputs only).
        """
        self = cls.__new__(cls)
        self.__dict__.update(
            verdicts={}, has_identifier=has_identifier, _source=source, _custom_ops=[tuple(x) for x in custom_ops]
        )
        return self

    def __getattr__(self, name: str):
        # Reached only for attributes not set: the parts of a model made by
        # _read_later, read now (all at once, then never again).
        d = self.__dict__
        if name in _READ_LATER and "_source" in d:
            full = _read(d["_source"], later=True)
            for f in _READ_LATER:
                d.setdefault(f, getattr(full, f))
            d.pop("_source", None)
            return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_READ_LATER = ("version", "description", "operator_codes", "subgraphs", "signatures", "buffers", "metadata")


def read_model(source: bytes | bytearray | memoryview | str | os.PathLike) -> ModelInfo:
    """Parse a TFLite model.

    Parameters
    ----------
    source : bytes-like or path
        The model bytes, or the path of a ``.tflite`` file.

    Returns
    -------
    ModelInfo
        ``version``, ``description``, ``operator_codes`` (list of
        ``(builtin_code, custom_name or None, version)``), ``subgraphs``
        (:class:`SubgraphInfo` with :class:`TensorInfo` and :class:`OpInfo`
        entries), ``signatures`` (:class:`SignatureInfo`) and
        :meth:`ModelInfo.custom_ops`.

    Raises
    ------
    ModelError
        If the bytes are not a well-formed TFLite model: truncated, corrupt,
        hostile offsets or lengths, or no ``TFL3`` identifier and no parsable
        root table.  The message says what is wrong and where.
    OSError
        If `source` is a path that cannot be read.
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            buf = f.read()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        buf = bytes(source)
    else:
        raise TypeError(f"read_model needs bytes or a path, got {type(source).__name__}")
    return _read(buf)


def _read(buf: bytes, later: bool = False) -> ModelInfo:
    if len(buf) < 8:
        # Not "truncated": a handful of bytes is far more often some other
        # file (a text file, a failed download's empty body) than a model cut
        # short, and the bytes themselves say which.
        # (Worded for a file and for bytes alike: model_content= reads here too.)
        found = f"{len(buf)} bytes ({buf!r}) are too few for one" if buf else "there are no bytes"
        raise ModelError(
            f"not a TFLite model: {found} (a TFLite model starts with a 4-byte root offset and the "
            f"{FILE_IDENTIFIER.decode()!r} file identifier); give a .tflite file (its path, or its bytes)"
        )
    has_id = buf[4:8] == FILE_IDENTIFIER
    if _compiled is not None and not later and type(buf) is bytes:
        model = _read_compiled(buf)
        if model is not None:
            model.has_identifier = has_id
            return model
    from .parser import _UNEXPECTED, _parse  # on first use (see the module doc)

    try:
        model = ModelInfo(*_parse(buf, later))
    except ModelError as exc:
        if has_id:
            raise
        raise ModelError(
            f"not a TFLite model: no 'TFL3' file identifier (found {buf[4:8]!r}) "
            f"and the root table does not parse ({exc}); give a .tflite file (its path, or its bytes)"
        ) from None
    except RecursionError:
        raise ModelError("model structure is nested too deeply") from None
    except _UNEXPECTED as exc:
        # Defensive: every read is bounds-checked, so reaching this is a bug
        # in the checks, but callers still get the documented exception.
        raise ModelError(f"malformed model: {type(exc).__name__}: {exc}") from None
    model.has_identifier = has_id
    return model


def rooted(info: ModelInfo, subgraph: int) -> ModelInfo:
    """``info`` with ``subgraph`` moved to index 0, where the checks look (a signature runner's plan).

    The two subgraphs trade places; each keeps its own ``index``, so the
    checks' messages still name the subgraph as stored.  ``info`` itself
    when ``subgraph`` is 0.
    """
    if subgraph == 0:
        return info
    import dataclasses  # not at start-up (a start's records need none)

    sgs = list(info.subgraphs)
    sgs[0], sgs[subgraph] = sgs[subgraph], sgs[0]
    return dataclasses.replace(info, subgraphs=sgs)


def unusable_model(where: str, exc: ModelError) -> ModelError:
    """The ModelError that names the model (``where``: its path) for a read that raised ``exc``.

    The one wording for the command line and the Interpreter: "x.txt is not
    a TFLite model: ..." when the bytes are not a model at all, "x.tflite is
    not a usable TFLite model: ..." for a model that is damaged or refused.
    """
    text = str(exc)
    if text.startswith("not a TFLite model: "):
        return ModelError(f"{where} is {text}")
    return ModelError(f"{where} is not a usable TFLite model: {text}")


# The compiled reader (c/src/modelreader.c, in the fast calls module), once
# the layer that loads that module hands it over: (its function, its spec).
_compiled: tuple | None = None


def use_compiled_reader(read) -> None:
    """Let :func:`read_model` try ``read``, the compiled reader, before the Python one.

    The fast calls module (:mod:`opaque_ops.interpreter.fast_calls`) hands
    over its ``read_model`` when it is loaded; this layer does not import
    that one.  The compiled reader returns the model's parts for the models
    it reads exactly as the Python reader (:mod:`~opaque_ops.model.parser`)
    does, and None for anything else, which the Python reader then reads (and
    rejects with its message).  Models read lazily
    (:meth:`ModelInfo._read_later`) are always read in Python.

    Parameters
    ----------
    read : callable or None
        ``read(data, spec)`` of the fast calls module; None: the Python reader alone.
    """
    global _compiled
    # The spec is built at the first read (0.1 ms): a process whose models'
    # verdicts are on disk may never read one in full.
    _compiled = None if read is None else (read, None)


def _read_compiled(buf: bytes) -> ModelInfo | None:
    """The model read by the compiled reader, or None when it leaves the model to the Python reader."""
    global _compiled
    assert _compiled is not None
    read, spec = _compiled
    if spec is None:
        from .decoding import _compiled_spec  # its tables are built at a process's first read

        spec = _compiled_spec()
        _compiled = (read, spec)
    try:
        parts = read(buf, spec)
    except Exception:
        # Raised from a helper (the flexbuffer decoder) or out of memory: the
        # Python reader reads the model and says what is wrong, if anything.
        return None
    if parts is None:
        return None
    version, description, opcodes, subgraphs, signatures, buffers, metadata = parts
    return ModelInfo(
        version=version,
        description=description,
        operator_codes=opcodes,
        subgraphs=[SubgraphInfo(i, *sg) for i, sg in enumerate(subgraphs)],
        signatures=[SignatureInfo(*g) for g in signatures],
        buffers=buffers,
        metadata=metadata,
    )
