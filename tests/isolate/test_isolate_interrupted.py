"""Ctrl-C anywhere in an isolated interpreter's call: it works after, or it is closed and says so; never a stale reply.

An isolated call is a request to the worker and its reply
(opaque_ops/isolate/process.py).  A KeyboardInterrupt that landed after the
request was posted but outside the wait that handles Ctrl-C (the wait
cancels the worker's invoke and still reads its reply) left the reply
unread: the next call read it as its own, and every exchange after was one
behind.  The next invoke after such a point hung in a receive, waiting for a
message already consumed.  Now an exchange cut short stops the worker, and
the interpreter's calls raise ClosedError saying so.
tests/helpers/interrupted_calls.py puts the interrupt at each point of each
call in turn (see there for how), in a child process with a timeout.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.child_process import crashed, run_child
from tests.helpers.reference_models import add_mul_model


def test_ctrl_c_at_every_point_of_an_isolated_call_never_desynchronizes_the_worker():
    p = run_child(
        "import runpy, sys; sys.argv[1:] = ['isolated']; "
        "runpy.run_module('tests.helpers.interrupted_calls', run_name='__main__')",
        timeout=300,
    )
    assert p.returncode == 0, crashed(p)
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["failures"] == [], "\n".join(result["failures"])
    points, stopped = result["points"], result["stopped"]
    assert all(n > 0 for n in points.values()), points
    # The exchange's own windows were hit (each stopped the worker), and most
    # points, the wait for invoke's reply among them, kept it.
    assert stopped["invoke"] >= 1 and stopped["get_input_details"] >= 1, result
    assert sum(stopped.values()) < sum(points.values()), result


def test_a_request_that_cannot_be_packed_leaves_the_worker_running():
    # The stop covers an exchange under way, not one that never started: a
    # message whose arguments do not pickle fails before any byte is sent
    # (Channel.pack), and the interpreter goes on.  (Through the proxy's
    # request function: the public calls validate their arguments first.)
    data, offset, scale = add_mul_model()
    with oo.Interpreter(model_content=data, isolate=True) as it:
        it.allocate_tensors()
        with pytest.raises(TypeError, match="cannot be sent to the isolated worker"):
            it._request("details", {"unpicklable": lambda: 0}, stage="call")
        x = np.arange(5, dtype=np.float32).reshape(1, 5)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        assert got.tobytes() == ((x + offset) * scale).tobytes()
