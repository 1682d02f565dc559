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

from tests.helpers.atan import PYTHON_OP_INTERPRETER, assert_python_op_fork

# Each interpreter is closed (it uncounts itself: Shared.release takes the lock too).
SETUP = (
    PYTHON_OP_INTERPRETER
    + """
from opaque_ops._native import lifetime

interpreter(close=True)
"""
)


def test_a_fork_while_another_thread_counts_an_operator_user_leaves_the_child_able_to_count_its_own(
    atan_model_bytes, tmp_path
):
    assert_python_op_fork(
        atan_model_bytes,
        tmp_path,
        SETUP,
        code="lifetime.Shared.hold.__code__",
        lock="lifetime._lock",
        call="interpreter(close=True)",
    )
