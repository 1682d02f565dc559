"""opaque_ops._native.native_delegate: a forked child loads delegate plugins whatever another thread was doing.

A plugin file is loaded once (``_plugin``, under one lock) and its delegates
are created one at a time (``NativeDelegate``, under another: the plugin's
messages go to one list).  A fork while another thread held either lock left
the child's copy held by a thread the child does not have, and the child's
first ``load_delegate`` waited forever.  The child here
(tests.helpers.fork_locks) is forked while a thread is stopped inside each
locked region; tests/helpers/add_delegate_plugin.c is the plugin.
"""

from __future__ import annotations

import pytest

from tests.helpers.delegate_plugin import build_add_delegate_plugin
from tests.helpers.fork_locks import assert_child_returns

SETUP = """
import opaque_ops as oo
from opaque_ops._native import native_delegate as nd

plugin = sys.argv[1]
oo.runtime_info()
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> str:
    return build_add_delegate_plugin(tmp_path_factory.mktemp("delegate"))


@pytest.mark.parametrize(
    "code, lock",
    [
        ("nd._plugin.__code__", "nd._plugins_lock"),  # the plugin's first load
        ("nd.NativeDelegate.__init__.__code__", "nd._create_lock"),  # a delegate's creation
    ],
    ids=["plugin load", "delegate creation"],
)
def test_a_fork_while_another_thread_loads_a_delegate_leaves_the_child_able_to_load_one(plugin, code, lock):
    assert_child_returns(
        "Delegate",
        SETUP,
        code=code,
        lock=lock,
        worker="oo.load_delegate(plugin)",
        child="type(oo.load_delegate(plugin)).__name__",
        args=[plugin],
    )
