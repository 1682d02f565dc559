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
