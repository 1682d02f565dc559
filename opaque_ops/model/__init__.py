"""Read, write and check TFLite models without TensorFlow.

- :mod:`~opaque_ops.model.reader`: :func:`read_model`, a bounds-checked reader
  for untrusted bytes, into plain Python objects (:class:`ModelInfo`); its
  walker (:mod:`~opaque_ops.model.parser`) and tables
  (:mod:`~opaque_ops.model.decoding`) are imported when a model is read.
- :mod:`~opaque_ops.model.writer`: :class:`ModelBuilder`, for small models.
- :mod:`~opaque_ops.model.flex`: flexbuffer custom options
  (:func:`flex_options`, :func:`decode_flex_options`).
- :mod:`~opaque_ops.model.checks`: :func:`check_model`, the rules a model must
  pass before the TFLite runtime sees it, :func:`check_resize` and the rules
  of :func:`check_allocated` (on the shapes TFLite will really use, from
  :mod:`~opaque_ops.model.shapes`), in groups: tensor_rules, graph, builtin_rules.
- :mod:`~opaque_ops.model.metadata`: the metadata entry the runtime parses
  itself (``CONVERSION_METADATA``), checked to lie inside its buffer.
- :mod:`~opaque_ops.model.runtime_ops`: the custom ops the runtime provides
  itself (``Mfcc``, ``AudioSpectrogram``, ``TFLite_Detection_PostProcess``,
  ``NumericVerify``) and the options their kernels accept.
- :mod:`~opaque_ops.model.cache`: parse and check once per model content; the
  verdicts kept (:func:`check_allocated` is the rules' memoizing front door).
- :mod:`~opaque_ops.model.schema`: the enums of TFLite's ``schema.fbs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cache import check_allocated
from .reader import ModelInfo, OpInfo, SignatureInfo, SubgraphInfo, TensorInfo, read_model
from .schema import (
    ACTIVATIONS,
    BUILTIN_OPERATOR_NAMES,
    BUILTIN_OPERATORS,
    TENSOR_TYPE_NAMES,
    TENSOR_TYPES,
)

__all__ = [
    "BUILTIN_OPERATORS",
    "BUILTIN_OPERATOR_NAMES",
    "TENSOR_TYPES",
    "TENSOR_TYPE_NAMES",
    "ACTIVATIONS",
    "ModelBuilder",
    "ModelInfo",
    "SubgraphInfo",
    "TensorInfo",
    "OpInfo",
    "SignatureInfo",
    "read_model",
    "check_model",
    "check_allocated",
    "check_resize",
    "flex_options",
    "decode_flex_options",
]

if TYPE_CHECKING:
    from .checks import check_model, check_resize
    from .flex import decode_flex_options, flex_options
    from .writer import ModelBuilder

# Imported on first use: an app that only runs models never builds one (the
# writer, with the flatbuffers package), and a start that finds its model's
# verdicts on disk runs no rule (the checks, a dozen modules) and decodes no
# flexbuffer; together they were five milliseconds of every start-up.
_LAZY = {
    "ModelBuilder": "writer",
    "check_model": "checks",
    "check_resize": "checks",
    "flex_options": "flex",
    "decode_flex_options": "flex",
}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # found directly from now on
    return value
