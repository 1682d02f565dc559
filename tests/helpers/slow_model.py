"""A model that keeps one thread busy in C: for the cancellation and close-during-invoke tests.

Imported by name in those tests' child processes (``tests.helpers.child_process.run_child``
puts the repository root on their path).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np

from opaque_ops.model import ModelBuilder


def slow_model(layers: int = 32, hw: int = 128, c: int = 32) -> bytes:
    """A chain of 3x3 convolutions: ~25 ms per layer with the reference kernels
    on one thread, all in C with the GIL released."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, hw, hw, c], np.float32)
    rng = np.random.default_rng(0)
    w = b.add_constant("w", (rng.standard_normal((c, 3, 3, c)) * 0.05).astype(np.float32))
    bias = b.add_constant("b", np.zeros(c, np.float32))
    cur = x
    for i in range(layers):
        y = b.add_tensor(f"y{i}", [1, hw, hw, c], np.float32)
        b.add_op("CONV_2D", [cur, w, bias], [y], options={"padding": "SAME", "stride_w": 1, "stride_h": 1})
        cur = y
    b.set_inputs([x])
    b.set_outputs([cur])
    return b.build()


def interrupted_invoke(it, after: float) -> float | None:
    """``it.invoke()`` with SIGINT sent to this process ``after`` seconds in.

    Returns the seconds until KeyboardInterrupt surfaced, or None if the
    invoke ran to its end.  SIGINT gets Python's default handler first: a job
    started in the background by a shell inherits it ignored.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.perf_counter()
    try:
        it.invoke()
    except KeyboardInterrupt:
        return time.perf_counter() - t
    return None


# A model whose run time is its input: the Wait op of tests/helpers/misbehaving_kernels.KERNELS
# sleeps x[0] seconds, then copies x to its output.  A chain of them runs as long as its input
# says, so one interpreter can run short invokes and then a long one, with no new allocation
# between (which would arm the Python watcher again).
def wait_model(nodes: int = 20) -> bytes:
    """``nodes`` Wait ops in a row on a float32 [1] input: an invoke takes ``nodes * x[0]`` seconds.

    Tensor 0 is the input, tensor ``nodes`` the output; signature "wait" maps x to y.
    """
    b = ModelBuilder()
    t = [b.add_tensor(f"t{i}", [1], np.float32) for i in range(nodes + 1)]
    for i in range(nodes):
        b.add_custom_op("Wait", [t[i]], [t[i + 1]])
    b.set_inputs([t[0]])
    b.set_outputs([t[-1]])
    b.add_signature("wait", {"x": t[0]}, {"y": t[-1]})
    return b.build()
