"""docs/c_authors_guide.md runs: every code block on the page, extracted from the page itself.

The convention (fence tags, attributes) is in tests/docs/guide_runner.py and
at the top of the page.  The page runs in a child process, in a fresh
directory, so a kernel on the page that crashes fails this test only.
"""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from tests.docs.guide_runner import GuideError, parse
from tests.helpers.child_process import ROOT, crashed, run_python

GUIDE = ROOT / "docs" / "c_authors_guide.md"


def run_page(page, cwd):
    return run_python("-m", "tests.docs.guide_runner", page, cwd=cwd, timeout=900)


def test_every_block_of_the_guide_runs_and_its_asserts_hold(tmp_path):
    blocks = parse(GUIDE.read_text(), str(GUIDE))
    p = run_page(GUIDE, tmp_path)
    assert p.returncode == 0, crashed(p)
    summary = json.loads((tmp_path / "guide_run.json").read_text())
    # Every block ran (or was skipped for a missing tool): none was dropped on the way.
    assert len(summary["ran"]) + len(summary["skipped"]) == len(blocks) == summary["blocks"]
    kinds = {b.kind for b in blocks}
    assert {"c", "python", "bash", "text"} <= kinds
    # What the examples produce is on disk: the model, the prebuilt library, the scaffolded project.
    assert (tmp_path / "model.tflite").stat().st_size > 0
    assert (tmp_path / "libmy_ops.so").read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "my_kernels" / "my_kernels" / "c" / "negate.c").is_file()
    if summary["skipped"]:
        needs = ", ".join(sorted({s["needs"] for s in summary["skipped"]}))
        pytest.skip(
            f"the rest of the guide ran; blocks that need {needs} did not (apt-get install gcc-aarch64-linux-gnu)"
        )


def test_the_readme_links_the_guide():
    assert "(docs/c_authors_guide.md)" in (ROOT / "README.md").read_text()


def test_the_guide_covers_every_flex_and_rawopts_function_and_code_with_its_value():
    page = GUIDE.read_text()
    rows = [line for line in page.splitlines() if line.startswith("|")]
    functions, codes = set(), {}
    for header in ("flex.h", "rawopts.h"):
        text = (ROOT / "c" / "include" / "opaque_ops" / header).read_text()
        # Public functions (oo_flex_x, oo_raw_x; the oo_flex__x internals excluded) and enum constants.
        functions |= set(re.findall(r"static inline [\w\s\*]+?\b(oo_(?:flex|raw)_[a-z]\w*)\(", text))
        codes.update(re.findall(r"^\s+(OO_(?:FLEX|RAW)_\w+) = (-?\d+)", text, re.M))
    assert len(functions) > 20 and len(codes) > 35
    undescribed = sorted(f for f in functions if not any(f in row for row in rows))
    assert not undescribed, f"no table row of the guide describes {undescribed}"
    wrong = sorted(
        f"{name} = {value}"
        for name, value in codes.items()
        if not re.search(rf"\| `{name}` \| {value} \||`{name}` {value}(?![\d])", page)
    )
    assert not wrong, f"the guide does not give these codes with their values: {wrong}"


def _page(tmp_path, body: str):
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(body))
    return page


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n", "page.md:6: python block failed"),
        ('```bash exit=0\npython -c "raise SystemExit(3)"\n```\n', "exited with 3, the page says 0"),
        ('```bash expect="hello"\npython -c "print(1)"\n```\n', "the output does not contain 'hello'"),
        ("```bash\nls -l\n```\n", "bash blocks run `opaque-ops ...` and `python ...` commands only"),
    ],
    ids=["failed assert", "exit status", "expected output", "other commands"],
)
def test_a_broken_block_fails_the_run_and_names_its_line(tmp_path, body, says):
    p = run_page(_page(tmp_path, body), tmp_path)
    assert p.returncode == 1, crashed(p)
    assert says in p.stderr, p.stderr


@pytest.mark.parametrize(
    ("fence", "says"),
    [
        ("```", "a fence must name one of"),
        ("```py", "a fence must name one of"),
        ("```c", "a c block needs file=NAME"),
        ("```python file=x.py", "unknown attribute 'file=x.py' on a python block"),
    ],
)
def test_a_block_outside_the_convention_is_refused_not_skipped(fence, says):
    with pytest.raises(GuideError, match="page:2: " + says.replace("(", r"\(")):
        parse(f"text\n{fence}\ncode\n```\n")
