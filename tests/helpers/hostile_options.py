"""Hostile kernel options: random option bytes, one-op models, and a checked run in a child process.

The hostile-options tests feed random or mutated option bytes to a kernel in a
separate Python process, so that a crash fails the test instead of killing
pytest.  :func:`run_isolated` runs such a script; inside it,
``from tests.helpers.hostile_options import ...`` works too, for
:func:`random_bytes` and :func:`float_op_model`.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.child_process import run_child


def run_isolated(script: str, *args: str, timeout: float = 300, env: dict | None = None) -> str:
    """Run ``script`` in a fresh interpreter and return its stdout; fail the test if it crashes.

    Parameters
    ----------
    script : str
        Python source, run as ``python -c script args...`` (so ``sys.argv[1:]`` are ``args``).
    *args : str
        Command-line arguments for the script.
    timeout : float, optional
        Seconds before the run counts as hung (subprocess.TimeoutExpired).
    env : dict, optional
        Variables to set (a value of None removes one) on top of this process's environment.

    Returns
    -------
    str
        The script's standard output.
    """
    proc = run_child(script, *args, timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"crashed or failed (rc={proc.returncode})\nstdout:{proc.stdout[-2000:]}\nstderr:{proc.stderr[-4000:]}"
    )
    return proc.stdout


def random_bytes(rng, max_len: int) -> bytes:
    """Between 0 and ``max_len - 1`` uniformly random bytes drawn from ``rng`` (a ``random.Random``)."""
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, max_len)))


def float_op_model(op: str, in_shapes, out_shapes, options, version: int = 1) -> bytes:
    """A model of one custom op whose inputs and outputs are all float32 model inputs/outputs.

    Parameters
    ----------
    op : str
        Custom op name.
    in_shapes, out_shapes : sequence of sequence of int
        Declared shapes (outputs are resized by the kernel's Prepare anyway).
    options : bytes or None
        Custom options; empty bytes are stored as no options.
    version : int, optional
        Op version.

    Returns
    -------
    bytes
        The .tflite flatbuffer.
    """
    from opaque_ops.model import ModelBuilder

    mb = ModelBuilder()
    ins = [mb.add_tensor(f"i{k}", list(s), np.float32) for k, s in enumerate(in_shapes)]
    outs = [mb.add_tensor(f"o{k}", list(s), np.float32) for k, s in enumerate(out_shapes)]
    mb.add_custom_op(op, ins, outs, options=options or None, version=version)
    mb.set_inputs(ins)
    mb.set_outputs(outs)
    return mb.build()
