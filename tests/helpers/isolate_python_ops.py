"""Python ops used by the isolation tests: module-level functions, so a worker can import them."""

from __future__ import annotations

import numpy as np

import opaque_ops as oo


def twice_invoke(inputs, outputs):
    outputs[0][...] = np.float32(2) * inputs[0] + np.float32(1)


def fails_invoke(inputs, outputs):
    return 1 // 0


def twice_op():
    return oo.python_op("Twice", invoke=twice_invoke)


def failing_op():
    return oo.python_op("Fails", invoke=fails_invoke)


def hog_invoke(inputs, outputs):
    """Allocates 2 GiB when input 0 starts with a negative value, else copies it."""
    if inputs[0].size and inputs[0].flat[0] < 0:
        outputs[0][...] = np.ones(1 << 28, np.float64)[: inputs[0].size]
        return
    outputs[0][...] = inputs[0]


def hog_op():
    return oo.python_op("Hog", invoke=hog_invoke)
