"""tensor() views of an isolated interpreter held across fork() (issue 17, item 6).

The views map the worker's shared segments (MAP_SHARED).  Before the fix, a
view taken before ``fork()`` kept showing, in the child, whatever the
*parent's* worker wrote: the child's outputs silently mixed with the
parent's.  Now the child's copies of those mappings are private (the values
at the fork, as an in-process interpreter's copy-on-write arena gives), and
the child's interpreter refuses to run its new worker while such a view
lives, since the view cannot follow it.
"""

from __future__ import annotations

from tests.helpers.child_process import crashed, run_child

# The parent and its forked child, in step through two pipes.  The parent's
# interpreter has run once (x = 1) and holds an input and an output view;
# the child reads its views, lets the parent run again with other inputs
# (x = 100), then reads its views again.
_SETUP = """
import gc, os, sys, numpy as np, opaque_ops as oo
from opaque_ops.model import ModelBuilder

def model():
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 64], np.float32)
    c = b.add_constant("c", np.linspace(-3, 3, 64, dtype=np.float32).reshape(1, 64))
    s = b.add_tensor("s", [1, 64], np.float32)
    y = b.add_tensor("y", [1, 64], np.float32)
    b.add_op("ADD", inputs=[x, c], outputs=[s], options={"fused_activation_function": "NONE"})
    b.add_op("MUL", inputs=[s, x], outputs=[y], options={"fused_activation_function": "NONE"})
    b.set_inputs([x]); b.set_outputs([y])
    return b.build()

MODEL = model()
it = oo.Interpreter(model_content=MODEL, isolate=True)
it.allocate_tensors()
inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
it.set_tensor(inp, np.full((1, 64), 1, np.float32))
it.invoke()
in_view, out_view = it.tensor(inp)(), it.tensor(out)()
at_fork = (in_view.copy(), out_view.copy())
parent_worker = it.worker_pid

def reference(x):
    ref = oo.Interpreter(model_content=MODEL)
    ref.allocate_tensors()
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    return ref.get_tensor(ref.get_output_details()[0]["index"])

to_child_r, to_child_w = os.pipe()
to_parent_r, to_parent_w = os.pipe()
pid = os.fork()
if pid:  # the parent: run again with other inputs while the child holds its views
    assert os.read(to_parent_r, 1) == b"r"
    it.set_tensor(inp, np.full((1, 64), 100, np.float32))
    it.invoke()
    # (c) the parent's own views keep tracking its own worker
    parent_ok = (
        np.array_equal(in_view, np.full((1, 64), 100, np.float32))
        and np.array_equal(out_view, reference(np.full((1, 64), 100, np.float32)))
    )
    os.write(to_child_w, b"g")
    _, status = os.waitpid(pid, 0)
    it.invoke()  # still usable
    print("parent views follow its worker:", parent_ok)
    print("child exit", os.waitstatus_to_exitcode(status))
    sys.exit(0)

def child_main():
    os.write(to_parent_w, b"r")
    assert os.read(to_child_r, 1) == b"g"  # the parent's worker has written x = 100 by now
"""


def _run(child_body: str):
    code = (
        _SETUP
        + child_body
        + "\nstatus = 1\ntry:\n    child_main()\n    status = 0\nexcept BaseException:\n"
        + "    import traceback; traceback.print_exc()\nfinally:\n"
        + "    sys.stdout.flush(); sys.stderr.flush()\n    os._exit(status)\n"
    )
    return run_child(code, timeout=180)


def test_a_view_taken_before_fork_keeps_its_values_in_the_child():
    """(a) Before: the child's views showed the parent's second run (x = 100); (c) the parent's still do."""
    p = _run(
        """
    same_in = np.array_equal(in_view, at_fork[0])
    same_out = np.array_equal(out_view, at_fork[1])
    print("child in view kept its values:", same_in, flush=True)
    print("child out view kept its values:", same_out, flush=True)
    in_view[...] = 7  # writing to it in the child must not reach the parent's worker either
"""
    )
    assert p.returncode == 0, crashed(p)
    assert "child in view kept its values: True" in p.stdout, p.stdout
    assert "child out view kept its values: True" in p.stdout, p.stdout
    assert "parent views follow its worker: True" in p.stdout, p.stdout
    assert "child exit 0" in p.stdout, p.stdout


def test_the_child_refuses_to_run_while_a_view_from_before_the_fork_lives():
    """(b) LiveViewsError while a pre-fork view lives; after ``del``, the same numbers as in-process."""
    p = _run(
        """
    global in_view, out_view
    x = np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 64)
    for name, call in [
        ("invoke", lambda: it.invoke()),
        ("set_tensor", lambda: it.set_tensor(inp, x)),
        ("get_tensor", lambda: it.get_tensor(out)),
    ]:
        try:
            call()
            print(name, "ran", flush=True)
        except oo.LiveViewsError as exc:
            msg = str(exc)
            ok = "before fork()" in msg and "del" in msg and "tensor()" in msg
            print(name, "refused:", ok, msg, flush=True)
    # a new view, taken after the fork, is fine to take (but the old ones still block runs)
    new_view = it.tensor(out)
    try:
        it.invoke()
        print("invoke with old views ran", flush=True)
    except oo.LiveViewsError:
        print("invoke with old views refused", flush=True)
    del in_view, out_view
    gc.collect()
    it.set_tensor(inp, x)
    it.invoke()
    got = it.get_tensor(out)
    print("after del, bit-identical:", got.tobytes() == reference(x).tobytes(), flush=True)
    print("new view follows the new worker:", new_view().tobytes() == got.tobytes(), flush=True)
    print("child worker is its own:", it.worker_pid != PARENT_WORKER, flush=True)
""".replace("PARENT_WORKER", "parent_worker")
    )
    assert p.returncode == 0, crashed(p)
    for name in ("invoke", "set_tensor", "get_tensor"):
        assert f"{name} refused: True" in p.stdout, p.stdout
    assert "invoke with old views refused" in p.stdout, p.stdout
    assert "after del, bit-identical: True" in p.stdout, p.stdout
    assert "new view follows the new worker: True" in p.stdout, p.stdout
    assert "child worker is its own: True" in p.stdout, p.stdout
    assert "parent views follow its worker: True" in p.stdout, p.stdout
    assert "child exit 0" in p.stdout, p.stdout
