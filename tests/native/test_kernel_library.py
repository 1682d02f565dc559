"""opaque_ops._native.kernel_library: a forked child loads libraries and makes operators whatever another thread was doing.

A kernel library is loaded once per file (``kernel_library``, under one
lock), and each of its operators is made once (``make_operator``, under the
library's lock).  A fork while another thread held either lock left the
child's copy held by a thread the child does not have, and the child's first
load of that library waited forever.  The child here (tests.helpers.fork_locks)
is forked while a thread is stopped inside each locked region.
"""

from __future__ import annotations

import pytest

from tests.helpers.fork_locks import assert_child_returns

SETUP = """
import importlib
import opaque_ops as oo

kl = importlib.import_module("opaque_ops._native.kernel_library")  # (the package exports a function of that name)
path = os.path.realpath(sys.argv[1])
oo.runtime_info()
"""


@pytest.mark.parametrize(
    "code, lock, worker",
    [
        # The first load of the file: the thread holds the table's lock.
        ("kl.kernel_library.__code__", "kl._kernel_libraries_lock", "oo.load_ops(path).ops"),
        # The library loaded, its operators not yet made: the thread holds the library's lock.
        ("kl.KernelLibrary.make_operator.__code__", "kl._kernel_libraries[path]._ops_lock", "oo.load_ops(path).ops"),
    ],
    ids=["library table", "operators of one library"],
)
def test_a_fork_while_another_thread_loads_a_kernel_library_leaves_the_child_able_to_load_it(
    guide_atan, code, lock, worker
):
    assert_child_returns(
        [("Atan", 1)], SETUP, code=code, lock=lock, worker=worker, child="oo.load_ops(path).ops", args=[guide_atan.path]
    )
