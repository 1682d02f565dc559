"""README.md's quick start for C authors runs as printed, and its kernel fails cleanly on a wrong node.

The kernel and the Python lines are taken from the page itself, so the test
follows any edit.  They run in a child process: a kernel on the page that
crashes fails this test only.
"""

from __future__ import annotations

import re
import shutil

from tests.helpers.child_process import ROOT, crashed, run_python

README = (ROOT / "README.md").read_text()


def _block_after(marker: str, fence: str) -> str:
    start = README.index(marker)
    m = re.compile(rf"```{fence}\n(.*?)```", re.S).search(README, start)
    assert m is not None, f"no ```{fence} block after {marker!r} in README.md"
    return m.group(1)


def test_the_quick_start_kernel_runs_and_refuses_a_node_without_its_input(tmp_path):
    kernel = _block_after("## Quick start for C authors", "c")
    assert kernel.startswith("// my_ops.c"), kernel[:80]
    (tmp_path / "my_ops.c").write_text(kernel)
    shutil.copy(ROOT / "examples" / "atan" / "atan.tflite", tmp_path / "model.tflite")
    lines = _block_after("Then compile it, test it on numpy arrays", "python")
    # Then what a new user tries next: the op with no input, and with two.
    # Without the count checks, Prepare reads input 0 of a node that has
    # none: TfLiteOpaqueTensorType(NULL), a segmentation fault.
    wrong_nodes = """
import opaque_ops as oo
x = np.ones(3, np.float32)
for given in ([], [x, x]):
    try:
        run_op(ops, "Atan", inputs=given)
    except oo.KernelError as exc:
        assert "NumberOfInputs" in str(exc), exc
    else:
        raise AssertionError(f"Atan ran on {len(given)} inputs")
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.array([-8, 0.5, 2, 2.2, 201], np.float32))
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
assert np.allclose(y, np.arctan(np.array([-8, 0.5, 2, 2.2, 201]) + 0.99999905), atol=1e-6), y
print("quick start ok")
"""
    p = run_python("-c", lines + wrong_nodes, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, timeout=300)
    assert p.returncode == 0 and "quick start ok" in p.stdout, crashed(p)
