"""Run each of many models once without and once with XNNPACK, in one child process.

The model tests' refusal checks share this loop: create, allocate, feed the
inputs (ones, or the given arrays), invoke, and record what happened.  It
runs in a child, so a model that still crashes the runtime fails the test
that fed it instead of killing the session.
"""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.child_process import crashed, run_child

_CODE = """
    import json, sys, numpy as np, opaque_ops as oo
    out = {}
    for key, (hexdata, path, feeds) in json.loads(open(sys.argv[1]).read()).items():
        for xnn in (False, True):
            try:
                if path is not None:
                    it = oo.Interpreter(model_path=path, use_xnnpack=xnn)
                else:
                    it = oo.Interpreter(model_content=bytes.fromhex(hexdata), use_xnnpack=xnn)
                it.allocate_tensors()
                for i, d in enumerate(it.get_input_details()):
                    if feeds is None:
                        x = np.ones(d["shape"], d["dtype"])
                    else:
                        x = np.frombuffer(bytes.fromhex(feeds[i][0]), np.dtype(feeds[i][1])).reshape(d["shape"])
                    it.set_tensor(d["index"], x)
                it.invoke()
                y = it.get_tensor(it.get_output_details()[0]["index"])
                out[f"{key}|{xnn}"] = ["ran", y.dtype.str, y.tobytes().hex(), list(y.shape)]
            except oo.OpaqueOpsError as e:
                out[f"{key}|{xnn}"] = [type(e).__name__, str(e)]
    print("RESULT " + json.dumps(out))
"""


def run_both_ways(models: dict, tmp_path, feeds: dict | None = None, timeout: float = 300) -> dict:
    """``{f"{key}|{use_xnnpack}": outcome}`` for each model, run with ``use_xnnpack`` False and True.

    Parameters
    ----------
    models : dict
        ``key -> bytes`` (the model's content) or a path (``model_path=``).
    tmp_path : pathlib.Path
        Where the job description for the child is written.
    feeds : dict, optional
        ``key -> list of arrays``, one per input; default: ones of each input's shape and dtype.

    Returns
    -------
    dict
        ``["ran", dtype str, output 0's bytes as hex, its shape]``, or
        ``[exception class name, message]`` for an OpaqueOpsError.
    """
    job = {}
    for key, model in models.items():
        given = None if feeds is None or key not in feeds else feeds[key]
        as_hex = None if given is None else [[np.ascontiguousarray(f).tobytes().hex(), f.dtype.str] for f in given]
        if isinstance(model, (bytes, bytearray)):
            job[key] = [bytes(model).hex(), None, as_hex]
        else:
            job[key] = [None, str(model), as_hex]
    spec = tmp_path / "both_ways.json"
    spec.write_text(json.dumps(job))
    p = run_child(_CODE, spec, timeout=timeout)
    assert p.returncode == 0, f"a model crashed the process ({crashed(p)}):\n{p.stderr[-3000:]}"
    return json.loads(next(line for line in p.stdout.splitlines() if line.startswith("RESULT "))[7:])
