"""opaque_ops._native.lifetime: a forked child counts the users of Python ops' operators whatever another thread was doing.

Every interpreter given a Python op (or a plugin's delegate) counts itself
as a user of its C object under one lock (``Shared.hold``), and uncounts
itself when it is deleted.  A fork while another thread held that lock left
the child's copy held by a thread the child does not have: the child's next
interpreter with a Python op waited forever.  The child here
(tests.helpers.fork_locks) is forked while a thread is stopped inside
``Shared.hold``.
"""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.atan import OFFSET
from tests.helpers.fork_locks import fork_while_held

SETUP = """
import numpy as np
import opaque_ops as oo
from opaque_ops._native import lifetime

model = sys.argv[1]

def interpreter():
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    it = oo.Interpreter(model_path=model, custom_ops=[op])
    it.allocate_tensors()
    it.set_tensor(0, np.ones(5, np.float32))
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"]).tolist()
    it.close()  # (uncounts itself: Shared.release takes the lock too)
    return out

interpreter()
"""


def test_a_fork_while_another_thread_counts_an_operator_user_leaves_the_child_able_to_count_its_own(
    atan_model_bytes, tmp_path
):
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    got = fork_while_held(
        SETUP,
        code="lifetime.Shared.hold.__code__",
        lock="lifetime._lock",
        worker="interpreter()",
        child="interpreter()",
        args=[model],
    )
    assert got.startswith("ok "), got
    want = np.arctan(np.ones(5, np.float32) + OFFSET)
    np.testing.assert_allclose(np.array(json.loads(got[3:]), np.float32), want, rtol=1e-6, atol=0)
