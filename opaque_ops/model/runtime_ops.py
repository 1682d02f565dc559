"""The custom ops that TFLite's own op resolver provides, and the options their kernels parse.

TFLite's builtin resolver registers four ops under custom names (upstream
``tensorflow/lite/kernels/register.cc``): ``AudioSpectrogram``, ``Mfcc``,
``TFLite_Detection_PostProcess`` and ``NumericVerify``.  Their ``Init``
(``tensorflow/lite/kernels/audio_spectrogram.cc``, ``mfcc.cc``,
``detection_postprocess.cc``, ``numeric_verify.cc``) reads the custom options
with ``flexbuffers::GetRoot(buffer, length).AsMap()`` and *no verifier*:
absent options (a null buffer of length 0) or bytes that are not a flexbuffer
map make it read outside the buffer while the interpreter is created.  The
values are then trusted: a negative ``max_detections`` sizes a ``std::vector``
with it, a huge ``window_size`` allocates gigabytes.

:func:`check_runtime_op` parses the options with opaque_ops' bounds-checked
flexbuffer reader and applies, per op, the limits below (:data:`RULES`), so
that the kernel only ever sees options it can use.  A model that uses one of
these names for its *own* kernel (registered through ``custom_ops``) is not
checked here: the registered kernel wins in the resolver.
"""

from __future__ import annotations

from ..errors import ModelError

#: Custom op names the runtime's builtin resolver provides, no library needed.
RUNTIME_CUSTOM_OPS = frozenset({"AudioSpectrogram", "Mfcc", "TFLite_Detection_PostProcess", "NumericVerify"})

_INT32 = (-(2**31), 2**31 - 1)

# Per op: key -> (kind, low, high).  Kinds: "int" (read with AsInt64/AsInt32),
# "float" (AsFloat), "bool" (AsBool).  A key may be absent: the flexbuffer
# reader then returns 0 / false, and the bounds below say whether 0 is usable.
# Values must be scalars (int, float or bool): AsInt64 on a string parses it
# with strtoll, reading up to a terminator that a hostile buffer need not have.
#
# Bounds, with their reasons:
# - AudioSpectrogram: the kernel's Spectrogram::Initialize refuses window < 2
#   and stride < 1, and allocates window-sized arrays (next power of two);
#   2**20 samples (22 s at 48 kHz) bounds that memory.  Both are stored in an
#   int.
# - Mfcc: filterbank_channel_count sizes the filterbank and, times the
#   coefficient count, the DCT table; dct_coefficient_count becomes an output
#   dimension (a negative one is an invalid shape) and must not exceed the
#   channel count (MfccDct::Initialize).  4096 channels is far beyond any real
#   front end (TF's default is 40).  The frequency limits are read as int64
#   and converted to float: -1 and huge values are refused at run time by the
#   kernel (lower >= 0, upper > lower), so they are only kept in int32.
# - TFLite_Detection_PostProcess: max_detections * max_classes_per_detection
#   sizes the outputs (int arithmetic); a negative or zero class count makes
#   the fast NMS index an empty array; the regular NMS writes
#   max_detections boxes whatever max_classes_per_detection says, so that
#   must be at least 1; detections_per_class sizes the per-class selection.
# - NumericVerify: tolerance is a float, log_if_failed a bool.
RULES: dict[str, dict[str, tuple]] = {
    "AudioSpectrogram": {
        "window_size": ("int", 2, 1 << 20),
        "stride": ("int", 1, 1 << 20),
        "magnitude_squared": ("bool", None, None),
    },
    "Mfcc": {
        "upper_frequency_limit": ("int", *_INT32),
        "lower_frequency_limit": ("int", *_INT32),
        "filterbank_channel_count": ("int", 1, 4096),
        "dct_coefficient_count": ("int", 1, 4096),
    },
    "TFLite_Detection_PostProcess": {
        "max_detections": ("int", 0, 1 << 16),
        "max_classes_per_detection": ("int", 1, 1 << 12),
        "detections_per_class": ("int", 1, 1 << 16),
        "use_regular_nms": ("bool", None, None),
        "nms_score_threshold": ("float", None, None),
        "nms_iou_threshold": ("float", None, None),
        "num_classes": ("int", 1, 1 << 16),
        "y_scale": ("float", None, None),
        "x_scale": ("float", None, None),
        "h_scale": ("float", None, None),
        "w_scale": ("float", None, None),
    },
    "NumericVerify": {
        "tolerance": ("float", None, None),
        "log_if_failed": ("bool", None, None),
    },
}

# Keys whose absence the kernel does not turn into a usable default.
_REQUIRED = {
    "AudioSpectrogram": ("window_size", "stride"),
    "Mfcc": ("filterbank_channel_count", "dct_coefficient_count"),
    "TFLite_Detection_PostProcess": ("max_detections", "max_classes_per_detection", "num_classes"),
    "NumericVerify": (),
}

# Inputs and outputs each kernel's Prepare insists on (it reads them by
# position before counting them in some versions).
_ARITY = {"AudioSpectrogram": (1, 1), "Mfcc": (2, 1), "TFLite_Detection_PostProcess": (3, 4), "NumericVerify": (2, 1)}


def check_runtime_op(sg_index: int, op) -> dict:
    """Validate one runtime-provided custom op; return its decoded options.

    Parameters
    ----------
    sg_index : int
        The subgraph, for the message.
    op : OpInfo
        An operator whose name is in :data:`RUNTIME_CUSTOM_OPS`.

    Raises
    ------
    ModelError
        Options absent, not a flexbuffer map, of the wrong type or out of the
        kernel's range; wrong number of inputs or outputs.
    """
    where = f"subgraph {sg_index} operator {op.index} ({op.op_name}, provided by the TFLite runtime)"
    n_in, n_out = _ARITY[op.op_name]
    if len(op.inputs) != n_in or len(op.outputs) != n_out or -1 in op.inputs:
        raise ModelError(
            f"{where} has {len(op.inputs)} input(s) and {len(op.outputs)} output(s); "
            f"the runtime's kernel takes exactly {n_in} and {n_out}, none omitted"
        )
    if not op.custom_options:
        raise ModelError(
            f"{where} has no custom options; its kernel reads a flexbuffer map "
            f"with {sorted(RULES[op.op_name])}. Re-export the model with its options"
        )
    from .flex import decode_flex_options  # on first use (see model/__init__'s _LAZY)

    try:
        opts = decode_flex_options(op.custom_options)
    except ModelError as exc:
        raise ModelError(f"{where}: custom options are not a flexbuffer map: {exc}") from None
    rules = RULES[op.op_name]
    for key in _REQUIRED[op.op_name]:
        if key not in opts:
            raise ModelError(f"{where}: custom option {key!r} is missing")
    for key, (kind, lo, hi) in rules.items():
        if key not in opts:
            continue
        v = opts[key]
        if isinstance(v, bool):
            if kind == "bool":
                continue
            v = int(v)
        if not isinstance(v, (int, float)):
            raise ModelError(
                f"{where}: custom option {key!r} is {type(v).__name__} {v!r:.40}; the kernel reads it as a {kind}"
            )
        if kind == "int" and lo is not None and not (lo <= v <= hi):
            raise ModelError(f"{where}: custom option {key}={v!r} is outside [{lo}, {hi}]")
    if op.op_name == "Mfcc" and opts["dct_coefficient_count"] > opts["filterbank_channel_count"]:
        raise ModelError(
            f"{where}: dct_coefficient_count={opts['dct_coefficient_count']} exceeds "
            f"filterbank_channel_count={opts['filterbank_channel_count']}"
        )
    if op.op_name == "TFLite_Detection_PostProcess":
        boxes = opts["max_detections"] * opts["max_classes_per_detection"]
        if boxes > 1 << 20:
            raise ModelError(
                f"{where}: max_detections * max_classes_per_detection = {boxes} output boxes is more than 2**20"
            )
    return opts


# AudioSpectrogram's Eval copies each channel's samples into a std::vector
# and builds the frames x bins spectrogram in nested std::vectors before it
# copies the result out.  Those allocations happen even when the channel
# count (and so the output) is 0, and a failed one throws std::bad_alloc,
# which cannot cross the C API: the process aborts.  2**26 floats (256 MiB)
# per vector is 70 minutes of 16 kHz audio in one call, far beyond any
# streaming front end, and keeps the kernel's memory to about 0.5 GiB.
MAX_SPECTROGRAM_VALUES = 1 << 26


def _check_spectrogram_size(where: str, samples: int, opts: dict) -> None:
    """Refuse an AudioSpectrogram input whose kernel-side vectors would not fit (see above)."""
    if samples > MAX_SPECTROGRAM_VALUES:
        raise ModelError(
            f"{where}: an input of {samples} samples is more than {MAX_SPECTROGRAM_VALUES} (2**26); the "
            "runtime's kernel copies them into memory it cannot report failing to get. Feed shorter "
            "windows of audio, one call per window"
        )
    window, stride = opts.get("window_size"), opts.get("stride")
    if not isinstance(window, int) or not isinstance(stride, int) or window < 2 or stride < 1 or samples < window:
        return
    frames = 1 + (samples - window) // stride
    bins = (1 << (window - 1).bit_length()) // 2 + 1  # next power of two of the window, halved, plus one
    if frames * bins > MAX_SPECTROGRAM_VALUES:
        raise ModelError(
            f"{where}: {samples} samples with window_size={window} and stride={stride} give "
            f"{frames} frames of {bins} bins, more than {MAX_SPECTROGRAM_VALUES} (2**26) values; the "
            "runtime's kernel builds them in memory it cannot report failing to get. Feed shorter "
            "windows of audio, one call per window"
        )


def check_runtime_op_shapes(op, opts: dict, shape_of, subgraph: int = 0) -> None:
    """Shape rules the runtime kernels assume but do not check (see :func:`check_runtime_op`).

    ``TFLite_Detection_PostProcess`` reads one anchor (4 values) per box
    without comparing the anchors' shape with the boxes'; ``AudioSpectrogram``
    and ``Mfcc`` index ``dims->data[k]`` of inputs of any rank before (or
    without) checking it.
    """
    # ``subgraph``: the planned subgraph's index in the model; another than 0
    # is named, in the form of checks.messages.planned_operator.
    at = f"subgraph {subgraph}, " if subgraph else ""
    where = f"{at}operator {op.index} ({op.op_name}, provided by the TFLite runtime)"
    if op.op_name == "TFLite_Detection_PostProcess":
        boxes, scores, anchors = (shape_of(t) for t in op.inputs)
        if boxes is None or anchors is None:
            return
        if len(boxes) != 3 or len(anchors) != 2:
            raise ModelError(
                f"{where}: box encodings must be [1, boxes, >=4] and anchors [boxes, 4]; "
                f"got {list(boxes)} and {list(anchors)}"
            )
        if boxes[0] != 1 or boxes[2] < 4 or list(anchors) != [boxes[1], 4]:
            raise ModelError(
                f"{where}: box encodings {list(boxes)} need anchors of shape "
                f"[{boxes[1]}, 4] and a batch of 1; the anchors are {list(anchors)}"
            )
        if scores is not None and (len(scores) != 3 or scores[0] != 1 or scores[1] != boxes[1]):
            raise ModelError(f"{where}: class predictions {list(scores)} must be [1, {boxes[1]}, classes]")
    elif op.op_name == "AudioSpectrogram":
        x = shape_of(op.inputs[0])
        if x is None:
            return
        if len(x) != 2:
            raise ModelError(f"{where}: the input must be [samples, channels], got {list(x)}")
        _check_spectrogram_size(where, int(x[0]), opts)
    elif op.op_name == "Mfcc":
        x = shape_of(op.inputs[0])
        if x is not None and len(x) != 3:
            raise ModelError(f"{where}: the spectrogram input must be [channels, frames, bins], got {list(x)}")
