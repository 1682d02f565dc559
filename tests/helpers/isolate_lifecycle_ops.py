"""Python ops for the lifecycle tests: module-level, so an isolated worker can import them."""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np

import opaque_ops as oo


def _twice(inputs, outputs):
    outputs[0][...] = np.float32(2) * inputs[0] + np.float32(1)


def _exits(inputs, outputs):
    os._exit(7)


def _chatty(inputs, outputs):
    # More than a pipe holds (64 KiB): the worker blocks unless someone drains its stderr.
    sys.stderr.write("x" * 200_000 + "\n")
    sys.stderr.flush()
    _twice(inputs, outputs)


def _spins(inputs, outputs):
    # A C loop that never lets go of the GIL (no bytecode runs, so no thread switch):
    # the worker's lifeline thread can then not run.
    while True:
        sum(itertools.repeat(0, 10**15))


def op(kind: str):
    """The python_op "Twice" whose invoke is ``kind``: twice, exits, chatty or spins."""
    return oo.python_op("Twice", invoke={"twice": _twice, "exits": _exits, "chatty": _chatty, "spins": _spins}[kind])
