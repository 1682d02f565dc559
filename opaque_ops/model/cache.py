"""Read and check a model once per content: verdicts kept by digest, in memory and on disk.

Creating an interpreter reads the model with :func:`~opaque_ops.model.read_model`,
runs :func:`~opaque_ops.model.check_model` and, after the allocation,
:func:`~opaque_ops.model.check_allocated`.  The rules themselves
(:mod:`~opaque_ops.model.checks`) keep nothing; this module is where their
verdicts are kept (:func:`checked_model`, :func:`check_allocated`).  In pure Python that costs more than
the TFLite runtime takes to build the interpreter, and real clients create
their interpreters at start-up, in a fresh process.  So the outcome of each
step (the *verdict*: passed, or the exact error) is kept:

- **in memory**, for the life of the process: the parsed model and its
  verdicts, keyed by the digest of the bytes (8 models of at most 64 MB);
- **on disk**, for a model that passed :func:`check_model`, in a record
  per model content under the verdict cache directory:
  ``$OPAQUE_OPS_VERDICT_CACHE`` if set, else ``verdicts/`` in the compile
  cache directory (``$OPAQUE_OPS_CACHE_DIR`` or ``~/.cache/opaque_ops``).
  ``OPAQUE_OPS_VERDICT_CACHE=off`` turns it off.  The record holds the
  verdicts (check_model's per registered runtime-op names, check_allocated's
  per configuration and planned shapes, refusals included), the custom ops
  the model uses, the tensor indices that key check_allocated's verdicts
  and the few answers about the model the interpreter asks at every start
  (``_ANSWERS``); nothing else of the model.  A refused model gets no
  record.  An interpreter writes its model's record once, with the verdict
  of its first allocation (:func:`write_pending`): creating a file is most
  of a write's cost, and a first start would otherwise write the record
  twice.
  A record is :mod:`marshal` data (``.rec``) holding lists, strings,
  integers, booleans and None, what JSON would hold: every start reads or
  writes one, importing :mod:`json` cost that start 1.1 ms, and marshal is
  built in (the import system reads every ``.pyc`` with it).  Records of
  the earlier JSON format (``.json``) are deleted when the directory is
  tidied after a write.

No check is weakened.  A verdict is reused only for the exact same bytes (the
digest is the key), the same checking code (the record's name carries a
digest of opaque_ops' version and of the size and modification time of each
source file of this package, ``checks/`` included, as CPython keys its
``.pyc`` files), the
same registered runtime-op names (they change which rules apply), and, for
:func:`check_allocated`, the same runtime library, XNNPACK setting and
planned shapes of the inputs, outputs and custom-op outputs (the key the
in-memory verdicts already used).  A model whose record says it passed is
read again only when something needs more than the record holds
(:meth:`ModelInfo._read_later`).

A record is trusted exactly as a compiled kernel library is
(:mod:`opaque_ops.build.store`): the directory must be the user's own and not
writable by others, the record owned by the user and not writable by others,
and its name carries the digest of its bytes, checked before it is read (a
truncated or corrupted record is deleted).  A directory that breaks those
rules is not used: the first refusal is reported once as a
:class:`RuntimeWarning` and the checks simply run.  Nothing here ever makes
creating an interpreter fail; a record that cannot be written is skipped.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import contextlib
import marshal
import os
import time
import warnings
import weakref
from collections import OrderedDict

from .. import _digest
from .._records import renew_after_fork
from .._version import __version__
from ..build import paths as _paths
from ..build import store as _files
from ..errors import CacheError, ModelError, ShapeError
from .gc_pause import gc_paused
from .reader import ModelInfo, read_model
from .runtime_ops import RUNTIME_CUSTOM_OPS
from .schema import BUILTIN_OPERATORS

ENV_VERDICTS = "OPAQUE_OPS_VERDICT_CACHE"
# How the user names another directory, in the errors about this one (a
# compile cache's cache_dir= and $OPAQUE_OPS_CACHE_DIR would not move it when
# the variable is set).
CHOOSE = f"set ${ENV_VERDICTS} to one, or to off to keep the verdicts in memory only"
# A record's file: KEY-CODE-DIGEST.rec (see the module docstring).
RECORD_SUFFIX = ".rec"
_EARLIER_SUFFIX = ".json"
# marshal's format 4 (Python 3.4 and later write and read it), named so
# that every Python writes the same bytes.
_MARSHAL_VERSION = 4

# Models kept in memory, and the largest kept: the parsed form holds a copy of
# the constant data, so a few big models are not worth pinning.
_MAX_ENTRIES = 8
_MAX_BYTES = 64 << 20
# check_allocated verdicts kept per model (one per input shape set a
# long-running app allocates, and configuration).
_MAX_ALLOCATED = 64
# Records kept on disk; the oldest go first.
_MAX_RECORDS = 512

_lock = _thread.allocate_lock()
_memory: OrderedDict[bytes, ModelInfo | ModelError] = OrderedDict()

# An answer of _ANSWERS not in a record (one written before that answer was kept).
_UNKNOWN = object()

# The verdicts that can be kept, by exception class name.
_ERRORS = {"ModelError": ModelError, "ShapeError": ShapeError}


def _rules():
    """The rules (:mod:`opaque_ops.model.checks`), imported on first use.

    A later start finds its verdicts on disk and runs no rule, so it does not
    import them either: a dozen modules, three milliseconds of its start-up.
    """
    from . import checks

    return checks


def checked_model(data: bytes, registered=(), defer_write: bool = False) -> ModelInfo:
    """Parse ``data`` and run :func:`check_model`, or return the kept result.

    Parameters
    ----------
    data : bytes
        The model.
    registered : collection of str
        Custom op names the caller registers (see :func:`check_model`).
    defer_write : bool
        Keep a new verdict in memory only, until :func:`write_pending` (or
        the next verdict kept) writes the record: an interpreter writes it
        after its first allocation, with the allocation's verdict.

    Raises
    ------
    ModelError
        As :func:`read_model` or :func:`check_model` would.
    """
    # Only runtime-provided op names change check_model's rules.
    reg = frozenset(registered) & RUNTIME_CUSTOM_OPS
    key = _digest.new(data).digest()
    with _lock:
        entry = _memory.get(key)
        if entry is not None:
            _memory.move_to_end(key)
    if entry is None:
        with gc_paused():
            entry = _load(key, data)
            if entry is None:
                entry = _read(key, data)
        if len(data) <= _MAX_BYTES:
            with _lock:
                _memory[key] = entry
                while len(_memory) > _MAX_ENTRIES:
                    _memory.popitem(last=False)
    if isinstance(entry, ModelError):
        raise ModelError(str(entry))
    verdicts: Verdicts = entry.verdicts["store"]
    verdict = verdicts.model.get(reg, False)
    if verdict is False:
        try:
            with gc_paused():
                _rules().check_model(entry, reg)
            verdict = None
        except ModelError as exc:
            verdict = exc
        verdicts.set_model(reg, verdict, write=not defer_write)
    if verdict is not None:
        raise ModelError(str(verdict))
    return entry


def check_allocated(info: ModelInfo, shape_of, config=(), planned=None, record: bool = True) -> None:
    """Reject what only the allocated shapes reveal, before anything is invoked.

    Parameters
    ----------
    info : ModelInfo
        The model, from :func:`~opaque_ops.model.read_model`.
    shape_of : callable
        ``shape_of(tensor_index) -> tuple of int or None``: the shape TFLite
        planned for a tensor of subgraph 0, or None when it is not known
        until invoke (a dynamic tensor) or the index does not exist.  It may
        be called after a *failed* allocation: shapes are then what the
        runtime had computed when it stopped.
    config : tuple, optional
        What else the planned shapes depend on (the runtime library, whether
        XNNPACK is applied): part of the key under which the verdict is kept
        for a model the Interpreter holds (one from :func:`checked_model`).
        Its first item, when it is a :func:`runtime_identity`, also gives the
        runtime's version to the rules of one runtime's kernels
        (:mod:`~opaque_ops.model.checks.version_rules`).
    planned : callable, optional
        ``planned(tensor_index) -> bool``: whether ``shape_of(tensor_index)``
        is a shape rather than None, asked instead where only that matters
        (the runtime answers it with fewer calls than the shape).  Default:
        ``shape_of(tensor_index) is not None``.
    record : bool, optional
        False: the rules run, and no verdict is looked up or kept.  For
        shapes that are not a plan the runtime finished (an allocation that
        failed part-way leaves some tensors with the shapes of the
        allocation before), whose verdict would be trusted later, in this
        process and through the record on disk, for the same key.

    Raises
    ------
    ModelError
        The message names the operator and tensor at fault and the fix.

    Notes
    -----
    The rules are :func:`~opaque_ops.model.checks.check_allocated_shapes`'s;
    they reason on :func:`~opaque_ops.model.shapes.infer_shapes`'s shapes:
    the runtime's own where it computed them, and the op's shape rule where
    the runtime's report is stale (inside an XNNPACK partition, after a
    dynamic tensor).  Refused:

    - input shapes an operator cannot combine (VALID windows larger than
      their input -- the XNNPACK delegate computes that output size with
      unsigned arithmetic and reads far outside the input; mismatched
      concatenations, reshapes that change the element count, ...): the
      reference kernels refuse these in Prepare, XNNPACK crashes or returns
      garbage;
    - a convolution whose input channels no longer match its filter after a
      resize (XNNPACK keeps the filter's count and reads past the input);
    - tensors of more than :data:`~opaque_ops.model.checks.MAX_RANK`
      dimensions or :data:`~opaque_ops.model.checks.MAX_ELEMENTS` elements;
    - runtime-provided ops whose inputs do not have the shapes their kernels
      assume (see :mod:`~opaque_ops.model.runtime_ops`).
    - a READ_VARIABLE whose planned output shape is not the shape an
      ASSIGN_VARIABLE of the same handle stores after this allocation (the
      kernel copies the output's planned size out of the variable: wrong
      values, or a read past its end), except on 2.23 with XNNPACK, whose
      delegate reads the variable in its own shape.
    - an ADD, SUB or MUL of more than 8 dimensions, and on a runtime older
      than 2.23 (or not known) one that broadcasts through more than
      MAX_RANK (:func:`~opaque_ops.model.checks.version_rules.check_deep_elementwise`);
    - on a runtime older than 2.23, the shapes and constants 2.17.1's
      BROADCAST_TO, TOPK_V2, CONV_3D and SELECT_V2 crash on in Eval
      (:mod:`~opaque_ops.model.checks.version_rules`), there too in the
      subgraphs that control flow runs; with XNNPACK there, a tensor of more
      than MAX_RANK dimensions that GATHER_ND gives another operator in or
      out of such a subgraph (:mod:`~opaque_ops.model.checks.called`).

    A model read by :func:`read_model` is checked every time; for one from
    :func:`checked_model` the verdict (passed, or the exact error) is kept.
    """
    version = _runtime_version(config)
    xnnpack = bool(config[1]) if len(config) > 1 else False
    if not record or not info.verdicts.get("cacheable"):
        with gc_paused():
            _rules().check_allocated_shapes(info, shape_of, planned, version, xnnpack)
        return
    key, known, err, remember = _allocated_slot(info, shape_of, config)
    if known:
        if err is not None:
            raise type(err)(str(err))
        return
    try:
        with gc_paused():
            _rules().check_allocated_shapes(info, shape_of, planned, version, xnnpack)
    except ModelError as exc:
        remember(key, exc)
        raise
    remember(key, None)


def _allocated_slot(info: ModelInfo, shape_of, config):
    """Where check_allocated's verdict is kept: (key, known, verdict, remember(key, verdict)).

    The verdict depends on the model, the configuration, the input shapes
    and what custom kernels and delegates planned (the rest the runtime
    derives from those).  The outputs' shapes are part of the key: a
    delegate may plan them differently from the reference kernels.
    """
    verdicts = info.verdicts
    store = verdicts.get("store")
    if store is not None and store.owner() is info:
        # The model itself: its verdicts live in its Verdicts (and on disk),
        # keyed without reading the model again.
        ins, outs, customs = store.io
        key = (
            config,
            tuple(shape_of(t) for t in ins),
            tuple(shape_of(t) for t in outs),
            tuple(shape_of(t) for t in customs),
        )
        known, err = store.allocated(key)
        return key, known, err, store.remember
    # A copy with another subgraph first (the interpreter checks signature
    # runners' subgraphs that way); it shares the verdicts dict, so the
    # subgraph is part of the key.
    sg = info.subgraphs[0]
    key = (
        "allocated",
        id(sg),
        config,
        tuple(shape_of(t) for t in sg.inputs),
        tuple(shape_of(t) for t in sg.outputs),
        tuple(shape_of(t) for t in _custom_outputs(info)),
    )

    def remember(key, verdict):
        _remember(info, key, verdict)

    return key, key in verdicts, verdicts.get(key), remember


def _remember(info, key, verdict) -> None:
    """Keep a re-rooted copy's verdict in the dict it shares with the model."""
    if len(info.verdicts) > _MAX_ALLOCATED:  # a long-running app resizing to many shapes
        keep = {k: info.verdicts[k] for k in ("cacheable", "store") if k in info.verdicts}
        info.verdicts.clear()
        info.verdicts.update(keep)
    info.verdicts[key] = verdict


def _custom_outputs(info) -> list:
    """The outputs of subgraph 0's custom ops (part of a verdict's key), found once per subgraph."""
    key = ("custom_outputs", id(info.subgraphs[0]))
    out = info.verdicts.get(key)
    if out is None:
        out = [t for op in info.subgraphs[0].operators if op.is_custom for t in op.outputs if t >= 0]
        info.verdicts[key] = out
    return out


def clear(disk: bool = False) -> None:
    """Forget every model kept in memory (and, with ``disk=True``, the records on disk)."""
    with _lock:
        _memory.clear()
    if disk:
        d = _directory()
        if d is not None:
            for name in os.listdir(d.dir):
                if is_record_name(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(d.dir, name))


class Verdicts:
    """What is known about one model content, kept in ``ModelInfo.verdicts["store"]``.

    ``model`` maps the registered runtime-op names to :func:`check_model`'s
    verdict; :meth:`allocated` and :meth:`remember` serve
    :func:`check_allocated` for the model itself (``owner``),
    never for the re-rooted copies the interpreter makes for other subgraphs
    (they share the ``verdicts`` dict).  A verdict is None (passed) or the
    exception raised.  ``answers`` holds the other answers about the model
    kept with the verdicts (:data:`_ANSWERS`), by name.
    """

    def __init__(self, key: bytes, owner: ModelInfo, io, custom_ops, has_identifier: bool, answers=None):
        self.key = key
        self.owner = weakref.ref(owner)
        # Subgraph 0's inputs, outputs and custom-op outputs: the tensors
        # whose planned shapes key check_allocated's verdicts.
        self.io = io
        self.custom_ops = custom_ops
        self.has_identifier = has_identifier
        # What the interpreter asks about the model at every start, kept so
        # that a later start reads no operators for it: {name in _ANSWERS:
        # the answer, as its accessor returns it}.  A name absent is not
        # known yet (a record written before that answer was kept; _kept
        # adds it).
        self.answers: dict = {} if answers is None else answers
        self.model: dict = {}
        self._allocated: dict = {}
        # A verdict kept in memory that the record on disk does not have yet
        # (set_model(write=False)).
        self.pending = False

    @classmethod
    def of(cls, key: bytes, info: ModelInfo) -> Verdicts:
        sg = info.subgraphs[0] if info.subgraphs else None
        io = (
            ((), (), ())
            if sg is None
            else (
                tuple(sg.inputs),
                tuple(sg.outputs),
                tuple(t for op in sg.operators if op.is_custom for t in op.outputs if t >= 0),
            )
        )
        # (A first read: every kept answer is worked out here; later starts take them from the record.)
        answers = {name: work_out(info) for name, (work_out, _valid, _load, _dump) in _ANSWERS.items()}
        return cls(key, info, io, info.custom_ops(), info.has_identifier, answers)

    def allocated(self, key):
        """check_allocated's verdict for ``key``: (True, None or exception) or (False, None)."""
        v = self._allocated.get(key, False)
        return (False, None) if v is False else (True, v)

    def remember(self, key, verdict) -> None:
        """Keep check_allocated's verdict for ``key`` (and write the record)."""
        with _lock:
            if len(self._allocated) >= _MAX_ALLOCATED:
                self._allocated.clear()
            self._allocated[key] = verdict
        self.save()

    def set_model(self, registered: frozenset, verdict, write: bool = True) -> None:
        """Keep check_model's verdict for these registered runtime-op names; write the record or mark it pending."""
        with _lock:
            self.model[registered] = verdict
            self.pending = not write
        if write:
            self.save()

    # ---------------------------------------------------------------- disk
    def to_doc(self) -> dict:
        doc = {
            "format": 1,
            "has_identifier": self.has_identifier,
            "custom_ops": self.custom_ops,
            "io": self.io,
            "model": [[sorted(reg), _dump(v)] for reg, v in self.model.items()],
            "allocated": [[list(k), _dump(v)] for k, v in self._allocated.items()],
        }
        # (In _ANSWERS' order, not the dict's: the record's bytes do not depend on which answer came first.)
        for name, (_work_out, _valid, _load, dump) in _ANSWERS.items():
            value = self.answers.get(name, _UNKNOWN)
            if value is not _UNKNOWN:
                doc[name] = dump(value)
        return doc

    @classmethod
    def from_doc(cls, key: bytes, owner: ModelInfo, doc: dict) -> Verdicts:
        """The verdicts of a record already checked by :func:`_valid_record`."""
        io = tuple(tuple(part) for part in doc["io"])
        answers = {}
        for name, (_work_out, _valid, load, _dump) in _ANSWERS.items():
            stored = doc.get(name, _UNKNOWN)  # (absent from records written before that answer was kept)
            if stored is not _UNKNOWN:
                answers[name] = load(stored)
        custom_ops = [(n, v) for n, v in doc["custom_ops"]]
        self = cls(key, owner, io, custom_ops, doc["has_identifier"], answers)
        for reg, v in doc["model"]:
            self.model[frozenset(reg)] = _load_verdict(v)
        for k, v in doc["allocated"]:
            self._allocated[_freeze(k)] = _load_verdict(v)
        return self

    def save(self) -> None:
        """Write the record, for a model that passed :func:`check_model` (refusals are not kept on disk)."""
        with _lock:
            self.pending = False
            if None not in self.model.values():
                return
            doc = self.to_doc()
        _save(self.key, doc)


def write_pending(info: ModelInfo) -> None:
    """Write the record of a model from :func:`checked_model` if it holds a verdict not written yet."""
    store = info.verdicts.get("store")
    if store is not None and store.pending:
        store.save()


def _kept(info: ModelInfo, name: str):
    """The answer ``name`` (of :data:`_ANSWERS`) about ``info``, kept in its record: worked out once.

    For a model the Interpreter holds (its verdicts' owner), the answer is in
    its record, so a later start does not read the operators again to give
    it; a record written before that answer was kept gets it added.  For any
    other ModelInfo (a re-rooted copy, a model not from checked_model) it is
    worked out here each time: the caller memoizes where that matters.
    """
    work_out = _ANSWERS[name][0]
    store = info.verdicts.get("store")
    if store is None or store.owner() is not info:
        return work_out(info)
    value = store.answers.get(name, _UNKNOWN)
    if value is _UNKNOWN:  # a record written before the answer was kept
        value = store.answers[name] = work_out(info)
        store.save()
    return value


def xnnpack_hazard(info: ModelInfo):
    """:func:`~opaque_ops.model.checks.type_rules.value_dependent_feed` of ``info``, kept with its verdicts.

    Returns None, or ``(subgraph, operator, op name, consumer, consumer's op
    name)`` (indices and names, for the message).
    """
    return _kept(info, "feed")


def select_nodes(info: ModelInfo) -> tuple:
    """:func:`~opaque_ops.model.select_rows.kept_nodes_of` subgraph 0 of ``info``, kept with its verdicts.

    A later start of a model without SELECT reads no operators for it; for a
    re-rooted copy (another subgraph first) it is kept in the verdicts dict
    the copy shares, per subgraph.
    """
    if not _holds(info):
        key = ("select", id(info.subgraphs[0]))
        nodes = info.verdicts.get(key)
        if nodes is None:
            nodes = info.verdicts[key] = _select_of(info)
        return nodes
    return _kept(info, "select")


def builtin_codes(info: ModelInfo) -> frozenset:
    """The builtin operator codes of ``info`` (every subgraph's), kept with its verdicts.

    The Interpreter asks at every start whether the model has a
    BATCH_MATMUL (only then is its rewrite, ``interpreter/matmul.py``,
    imported and run): a later start reads no operator codes for it.
    """
    return _kept(info, "codes")


def fed_value_nodes(info: ModelInfo) -> tuple:
    """:func:`~opaque_ops.model.fed_values.nodes_of` subgraph 0 of ``info``, kept with its verdicts."""
    return _kept(info, "fed")


def fixed_slices(info: ModelInfo) -> tuple:
    """:func:`~opaque_ops.model.fixed_slices.plan_of` ``info``, kept with its verdicts.

    On TFLite 2.17 with XNNPACK the Interpreter writes these STRIDED_SLICEs
    as SLICE in its private copy (``interpreter/slices.py``): a later start
    reads no operators to find them.
    """
    return _kept(info, "slices")


def deep_transposes(info: ModelInfo) -> tuple:
    """The TRANSPOSEs of ``info`` whose permutation has more than MAX_RANK entries, kept with its verdicts.

    Returns
    -------
    tuple
        ``(subgraph, operator, entries)`` for each (indices, and the
        permutation's declared length).  Asked at each start on a runtime
        older than 2.23 of a model with a TRANSPOSE: a later start reads no
        operators for it.
    """
    return _kept(info, "transposes")


def _holds(info: ModelInfo) -> bool:
    store = info.verdicts.get("store")
    return store is not None and store.owner() is info


def variable_reads(info: ModelInfo) -> tuple:
    """:func:`~opaque_ops.model.variable_state.reads_before_assignment` of ``info``, kept with its verdicts.

    Asked at each start of an interpreter that would return garbage for such
    a read (TFLite 2.23 with XNNPACK), of a model with a READ_VARIABLE: a
    later start reads no operators for it.
    """
    return _kept(info, "vars")


def _vars_of(info: ModelInfo) -> tuple:
    if BUILTIN_OPERATORS["READ_VARIABLE"] not in _codes_of(info):
        return ()  # (as _slices_of: most models have no variables, and their first start imports no analysis)
    from .variable_state import reads_before_assignment  # (as _select_of)

    return reads_before_assignment(info)


def _select_of(info: ModelInfo) -> tuple:
    if not info.subgraphs:
        return ()
    from .select_rows import kept_nodes_of  # (a first read; later starts take it from the record)

    return kept_nodes_of(info.subgraphs[0])


def _codes_of(info: ModelInfo) -> frozenset:
    return frozenset(code for code, _custom, _version in info.operator_codes)


def _fed_of(info: ModelInfo) -> tuple:
    from .fed_values import nodes_of  # (as _select_of)

    return nodes_of(info.subgraphs[0] if info.subgraphs else None)


def _slices_of(info: ModelInfo) -> tuple:
    # The analysis is imported only for a model with a STRIDED_SLICE.
    if BUILTIN_OPERATORS["STRIDED_SLICE"] not in _codes_of(info):
        return ()
    from .fixed_slices import plan_of

    return plan_of(info)


def _transposes_of(info: ModelInfo) -> tuple:
    if BUILTIN_OPERATORS["TRANSPOSE"] not in _codes_of(info):
        return ()  # (as _slices_of)
    from .checks.limits import deep_transposes  # (a first read; later starts take it from the record)

    return deep_transposes(info)


def _feed_of(info: ModelInfo):
    found = _rules().type_rules.value_dependent_feed(info)
    if found is None:
        return None
    sg, op, consumer = found
    return (sg.index, op.index, op.op_name, consumer.index, consumer.op_name)


def _dump(verdict):
    if verdict is None:
        return None
    # (A ModelError subclass not listed in _ERRORS is kept as a ModelError.)
    name = type(verdict).__name__
    return [name if name in _ERRORS else "ModelError", str(verdict)]


def _load_verdict(v):
    if v is None:
        return None
    name, msg = v
    return _ERRORS[name](str(msg))


def _as_lists(x):
    """``x`` with every tuple a list, as JSON would write it (what _valid_record expects back)."""
    if isinstance(x, (list, tuple)):
        return [_as_lists(v) for v in x]
    if isinstance(x, dict):
        return {k: _as_lists(v) for k, v in x.items()}
    return x


def _freeze(x):
    """A record's lists back to the tuples they were written from (check_allocated's keys, kept answers)."""
    return tuple(_freeze(v) for v in x) if isinstance(x, list) else x


# What a record may hold (anything else: the record is ignored, then rewritten).
_MAX_INDEX = 1 << 31  # tensor indices and op versions are int32 in the model
_MAX_KEY_DEPTH = 16  # check_allocated's keys nest 4 deep


def _is_int(x, low: int = 0, high: int = _MAX_INDEX) -> bool:
    return type(x) is int and low <= x < high


def _is_verdict(v) -> bool:
    # (The type first: a list is no dict key, and asking would raise.)
    return v is None or (
        type(v) is list and len(v) == 2 and type(v[0]) is str and v[0] in _ERRORS and type(v[1]) is str
    )


def _is_key(x, depth: int = 0) -> bool:
    """A check_allocated key: lists of scalars (None, str, int, bool, finite float), nested a few levels."""
    if type(x) is list:
        return depth < _MAX_KEY_DEPTH and all(_is_key(v, depth + 1) for v in x)
    if type(x) is float:
        return x == x and abs(x) != float("inf")
    return x is None or type(x) in (str, int, bool)


# ------------------------------------------------------------ the kept answers
# Besides the verdicts, a record keeps what the interpreter asks about its
# model at every start, so that a later start reads no operators to answer.
# Each answer is declared here once, and everything else follows from this
# table: Verdicts.of works it out, Verdicts.to_doc writes it, _valid_record
# checks it, Verdicts.from_doc loads it back, and its accessor
# (xnnpack_hazard, select_nodes, builtin_codes, fed_value_nodes, fixed_slices) returns it
# through _kept.  A record written before an answer was kept lacks it: _kept
# works it out then and rewrites the record.  The table's order is the
# record's key order (part of its bytes, so of its name): add at the end.
#
# name: (work_out(info) -> the answer, as its accessor returns it;
#        valid(stored) -> whether a record's value is of the form dump writes;
#        load(stored) -> the answer, from a value valid() accepted;
#        dump(answer) -> the record's value: lists, str, int or None).


def _is_feed(v) -> bool:
    """None, or [subgraph, operator, op name, consumer, consumer's op name]."""
    return v is None or (
        type(v) is list
        and len(v) == 5
        and all(_is_int(v[k]) for k in (0, 1, 3))
        and all(type(v[k]) is str for k in (2, 4))
    )


def _is_select(v) -> bool:
    """[operator, condition, x, y, output] per SELECT, and those and ``one`` (0 or 1) per SELECT_V2.

    Records written before a SELECT's output was kept hold [operator,
    condition, x, y] for it: not valid here, so such a record is ignored and
    rewritten (read as it is, its SELECT would have no output to check, and
    would be taken for a malformed node).  The form of a SELECT_V2's node is
    unchanged, so a record without SELECT is still used.
    """
    return type(v) is list and all(
        type(n) is list and (len(n) == 5 or len(n) == 6 and n[5] in (0, 1)) and all(map(_is_int, n)) for n in v
    )


def _is_codes(v) -> bool:
    """Builtin operator codes."""
    return type(v) is list and all(map(_is_int, v))


def _is_vars(v) -> bool:
    """Per invocable subgraph: [subgraph, reads, assigns, bool, ifs, waiting] (variable_state.reads_before_assignment).

    reads [[container, name, operator], ...]; assigns [[container, name],
    ...]; ifs [[cond, assigns, assigns], ...]; waiting [[container, name,
    operator, [if position, ...]], ...].
    """
    return type(v) is list and all(
        type(n) is list
        and len(n) == 6
        and _is_int(n[0])
        and type(n[1]) is list
        and all(type(r) is list and len(r) == 3 and _is_str(r[0]) and _is_str(r[1]) and _is_int(r[2]) for r in n[1])
        and _is_names(n[2])
        and type(n[3]) is bool
        and type(n[4]) is list
        and all(type(f) is list and len(f) == 3 and _is_int(f[0]) and _is_names(f[1]) and _is_names(f[2]) for f in n[4])
        and type(n[5]) is list
        and all(
            type(r) is list
            and len(r) == 4
            and _is_str(r[0])
            and _is_str(r[1])
            and _is_int(r[2])
            and type(r[3]) is list
            and all(type(p) is int and 0 <= p < len(n[4]) for p in r[3])
            for r in n[5]
        )
        for n in v
    )


def _is_names(v) -> bool:
    return type(v) is list and all(type(a) is list and len(a) == 2 and _is_str(a[0]) and _is_str(a[1]) for a in v)


def _is_str(x) -> bool:
    return type(x) is str


def _is_transposes(v) -> bool:
    """[subgraph, operator, entries] per TRANSPOSE."""
    return type(v) is list and all(type(n) is list and len(n) == 3 and all(map(_is_int, n)) for n in v)


def _is_slices(v) -> bool:
    """[operator, input, output, input shape, begin, size] per slice; the last three are lists of the same length."""
    return type(v) is list and all(
        type(n) is list
        and len(n) == 6
        and all(_is_int(n[k]) for k in range(3))
        and all(type(n[k]) is list and all(map(_is_int, n[k])) for k in range(3, 6))
        and 1 <= len(n[3]) == len(n[4]) == len(n[5]) <= 5
        for n in v
    )


def _is_fed(v) -> bool:
    """[operator, op name, value tensor, data tensor, seq_dim, batch_dim] per node (the dims may be negative)."""
    return type(v) is list and all(
        type(n) is list
        and len(n) == 6
        and type(n[1]) is str
        and all(_is_int(n[k]) for k in (0, 2, 3))
        and all(_is_int(n[k], -_MAX_INDEX) for k in (4, 5))
        for n in v
    )


# (The tuples of the feed and of the nodes are written as lists, _as_lists, and
# read back as tuples, _freeze; the codes are a frozenset, written sorted.)
_ANSWERS = {
    # xnnpack_hazard: value_dependent_feed's find, None if there is none.
    "feed": (_feed_of, _is_feed, _freeze, _as_lists),
    # select_nodes: select_rows.kept_nodes_of subgraph 0.
    "select": (_select_of, _is_select, _freeze, _as_lists),
    # builtin_codes: whether to import and run the BATCH_MATMUL rewrite.
    "codes": (_codes_of, _is_codes, frozenset, sorted),
    # fed_value_nodes: fed_values.nodes_of subgraph 0.
    "fed": (_fed_of, _is_fed, _freeze, _as_lists),
    # fixed_slices: fixed_slices.plan_of, the STRIDED_SLICEs written as SLICE on 2.17.
    "slices": (_slices_of, _is_slices, _freeze, _as_lists),
    # variable_reads: variable_state.reads_before_assignment, for 2.23 with XNNPACK.
    "vars": (_vars_of, _is_vars, _freeze, _as_lists),
    # deep_transposes: the TRANSPOSEs a runtime older than 2.23 cannot take (interpreter/core.py).
    "transposes": (_transposes_of, _is_transposes, _freeze, _as_lists),
}


def _valid_record(doc) -> bool:
    """True if ``doc`` (a record's data) has exactly the shape :meth:`Verdicts.to_doc` writes.

    A record is trusted for its origin (owner, mode, digest), but its contents
    are still checked before use: a record that does not parse as one, with
    nesting, numbers or types of another shape, is ignored (and rewritten
    once the checks have run), never a reason for a creation to fail.
    """
    if type(doc) is not dict or doc.get("format") != 1 or type(doc.get("format")) is not int:
        return False
    for name, (_work_out, valid, _load, _dump) in _ANSWERS.items():
        stored = doc.get(name, _UNKNOWN)  # (absent: a record written before that answer was kept)
        if stored is not _UNKNOWN and not valid(stored):
            return False
    io, ops, model, allocated = (doc.get(k) for k in ("io", "custom_ops", "model", "allocated"))
    return (
        type(doc.get("has_identifier")) is bool
        and type(io) is list
        and len(io) == 3
        and all(type(part) is list and all(_is_int(t) for t in part) for part in io)
        and type(ops) is list
        and all(type(o) is list and len(o) == 2 and type(o[0]) is str and _is_int(o[1]) for o in ops)
        and type(model) is list
        and all(
            type(m) is list
            and len(m) == 2
            and type(m[0]) is list
            and all(type(n) is str for n in m[0])
            and _is_verdict(m[1])
            for m in model
        )
        and type(allocated) is list
        # (A key is a list: a scalar one passed here, then broke the record's next write.)
        and all(
            type(a) is list and len(a) == 2 and type(a[0]) is list and _is_key(a[0]) and _is_verdict(a[1])
            for a in allocated
        )
    )


def _read(key: bytes, data: bytes) -> ModelInfo | ModelError:
    try:
        info = read_model(data)
    except ModelError as exc:
        return exc
    info.verdicts["cacheable"] = True
    info.verdicts["store"] = Verdicts.of(key, info)
    return info


def _load(key: bytes, data: bytes) -> ModelInfo | None:
    """The model as its record on disk describes it, or None (no usable record)."""
    doc = _lookup(key)  # (None also for a record of another shape: rewritten after the checks run)
    if doc is None:
        return None
    try:
        info = ModelInfo._read_later(data, doc["has_identifier"], [tuple(o) for o in doc["custom_ops"]])
        info.verdicts["cacheable"] = True
        info.verdicts["store"] = Verdicts.from_doc(key, info, doc)
        return info
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError):
        return None  # (the check above should leave nothing for these)


# ------------------------------------------------------------ the records on disk
_code_digest: str | None = None
_warned: set = set()
_write_lock = _thread.allocate_lock()


# A lock another thread held at the fork stays held in the child forever.
renew_after_fork(globals(), _lock=_thread.allocate_lock, _write_lock=_thread.allocate_lock)


def _code() -> str:
    """What decides the verdicts: opaque_ops' version and the model package's source files (memoized)."""
    global _code_digest
    if _code_digest is None:
        _code_digest = _source_digest(os.path.dirname(os.path.realpath(__file__)))
    return _code_digest


def _source_digest(folder: str) -> str:
    """A digest of opaque_ops' version and of every ``.py`` file under ``folder`` (subpackages too).

    The whole model package decides a verdict (the reader, the rules in
    ``checks/``, the shape rules, the record's format here), so every source
    file in it counts, found recursively: a rule added in a new file of
    ``checks/`` changes the digest as an edit does.  A file is known by its
    size and modification time, the rule CPython uses to tell whether a
    ``.pyc`` is still that of its source (reading and hashing the source
    instead would cost more than the checks save).
    """
    h = _digest.new(f"opaque_ops {__version__}".encode())
    for parts in sorted(_paths.files_named(os.fspath(folder), ".py")):
        st = os.stat(os.path.join(folder, *parts))
        h.update(f"\0{'/'.join(parts)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def directory_path(cache_dir: str | os.PathLike | None = None) -> str | None:
    """Where the records are kept: ``$OPAQUE_OPS_VERDICT_CACHE``, or ``verdicts`` in the compile cache
    directory (``cache_dir``, as :func:`opaque_ops.build.store.default_dir_str` takes it); None: turned off."""
    env = os.environ.get(ENV_VERDICTS)
    if env is not None and env.strip().lower() in ("0", "off", "no", "false", "none"):
        return None
    return env if env else os.path.join(_files.default_dir_str(cache_dir), "verdicts")


def is_record_name(name: str) -> bool:
    """True if ``name`` is a record's file name, of this format or the earlier (JSON) one.

    Only such names are ever deleted as records (:func:`clear`, ``opaque-ops
    cache clear``): the directory may have been set to one holding other files.
    """
    return _files.entry_kind(name, RECORD_SUFFIX) == "entry" or _files.entry_kind(name, _EARLIER_SUFFIX) == "entry"


def _directory() -> _files.Cache | None:
    """The verdict cache directory, checked as the compile cache is (None: off or refused)."""
    root = directory_path()
    if root is None:
        return None
    try:
        _code()
        return _files.Cache(root, suffix=RECORD_SUFFIX, mode=0o600, what="verdict cache directory", choose=CHOOSE)
    except (CacheError, OSError) as exc:
        _warn_once(root, exc)
        return None


def _warn_once(root, exc) -> None:
    if str(root) not in _warned:
        _warned.add(str(root))
        # (A refused directory's message already says how to choose another, or off.)
        silence = "" if ENV_VERDICTS in str(exc) else f" (set {ENV_VERDICTS}=off to silence this)"
        warnings.warn(
            f"opaque_ops: model verdicts are not kept on disk: {exc}{silence}",
            RuntimeWarning,
            stacklevel=4,
        )


def _lookup(key: bytes) -> dict | None:
    d = _directory()
    if d is None:
        return None
    try:
        path = d.lookup(key.hex(), _code())
        if path is None:
            return None
        with open(path, "rb") as f:
            raw = f.read()
    except CacheError as exc:
        _warn_once(d.dir, exc)
        return None
    except OSError:
        return None
    try:
        doc = marshal.loads(raw)
    except (ValueError, EOFError, TypeError, RecursionError):  # not marshal data, cut short, nested too deep
        return None
    return doc if _valid_record(doc) else None  # (the one check of a record's shape, before _load uses it)


def _save(key: bytes, doc: dict) -> None:
    """Publish ``doc`` as the record of ``key`` (atomically), then drop the older ones."""
    d = _directory()
    if d is None:
        return
    raw = marshal.dumps(_as_lists(doc), _MARSHAL_VERSION)
    prefix = f"{key.hex()}-{_code()}-"
    with _write_lock:
        try:
            fd, tmp = d.new_file()
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(raw)
                final = d.publish(tmp, key.hex(), _code())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            names = os.listdir(d.dir)
        except OSError:
            return
        records = []
        # Only names of the forms the caches write are touched (build.store.entry_kind):
        # a directory set by mistake to one of the user's keeps every other file.
        for name in names:
            p = os.path.join(d.dir, name)
            kind = _files.entry_kind(name, d.suffix)
            if kind == "entry" and name.startswith(prefix) and p != final:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            elif kind == "entry":
                records.append(name)
            elif _files.entry_kind(name, _EARLIER_SUFFIX) == "entry":
                with contextlib.suppress(OSError):
                    os.unlink(p)  # a record of the earlier (JSON) format: never read again
            elif kind == "temporary":
                # Left by a process that died while writing (an hour is
                # far longer than any write takes).
                with contextlib.suppress(OSError):
                    if time.time() - os.stat(p).st_mtime > 3600:
                        os.unlink(p)
        if len(records) > _MAX_RECORDS:
            _prune(d, records)


def _prune(d: _files.Cache, names: list) -> None:
    aged = []
    for name in names:
        with contextlib.suppress(OSError):
            aged.append((os.stat(os.path.join(d.dir, name)).st_mtime_ns, name))
    for _, name in sorted(aged)[: len(aged) - _MAX_RECORDS // 2]:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(d.dir, name))


def _runtime_version(config) -> str | None:
    """The runtime's version in check_allocated's ``config`` (its :func:`runtime_identity` first), or None."""
    ident = config[0] if config else None
    return ident[0] if isinstance(ident, tuple) and ident and isinstance(ident[0], str) else None


def runtime_identity(runtime) -> tuple:
    """What check_allocated's kept verdicts depend on in the runtime: its version and its file."""
    try:
        st = os.stat(runtime.path)
        return (runtime.version, str(runtime.path), st.st_size, st.st_mtime_ns)
    except OSError:
        return (runtime.version, str(runtime.path))
