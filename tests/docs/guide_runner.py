"""Run every code block of a Markdown page, in order, in the current directory.

``python -m tests.docs.guide_runner PAGE.md`` is how ``tests/docs/test_guide.py``
checks ``docs/c_authors_guide.md``.  The convention, on each fence's info string:

- ``c file=NAME`` (also ``h``): the block is written to ``NAME``;
- ``python``: run in one namespace shared by all python blocks of the page
  (tracebacks name the page and its line numbers);
- ``bash``: each command line is run; only ``opaque-ops ...`` (run as
  ``python -m opaque_ops``) and ``python ...`` (this interpreter) are allowed.
  ``exit=N`` is every command's expected exit status (default 0), each
  ``expect="TEXT"`` a text its output (stdout and stderr) must contain, and
  ``needs=TOOL`` a program that must be on PATH (the block is skipped, and
  reported, when it is not);
- ``text``: not run.

Any other fence, or an unknown attribute, is an error: no block escapes by a typo.
The run stops at the first failing block: its line, and what went wrong, go
to stderr, and the exit status is 1.  A summary (``guide_run.json``: the
blocks run and skipped) is written in the directory.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

KINDS = {"c": {"file"}, "h": {"file"}, "python": set(), "bash": {"exit", "expect", "needs"}, "text": set()}
FENCE = re.compile(r"^```(.*)$")


class GuideError(Exception):
    """The page breaks the convention, or one of its blocks failed."""


@dataclass
class Block:
    kind: str
    line: int  # the line of the block's first line of code (1-based)
    code: str
    attrs: dict[str, list[str]] = field(default_factory=dict)

    def attr(self, name: str, default: str | None = None) -> str | None:
        values = self.attrs.get(name)
        return values[-1] if values else default


def parse(text: str, page: str = "page") -> list[Block]:
    """The fenced blocks of ``text``, checked against the convention."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i + 1
        try:
            words = shlex.split(m.group(1))
        except ValueError as exc:
            raise GuideError(f"{page}:{start}: cannot read the fence's info string {m.group(1)!r}: {exc}") from None
        if not words or words[0] not in KINDS:
            raise GuideError(
                f"{page}:{start}: a fence must name one of {sorted(KINDS)} (use `text` for a block "
                f"that must not run), got {m.group(1)!r}"
            )
        kind, attrs = words[0], {}
        for w in words[1:]:
            key, eq, value = w.partition("=")
            if not eq or key not in KINDS[kind]:
                raise GuideError(
                    f"{page}:{start}: unknown attribute {w!r} on a {kind} block; known: {sorted(KINDS[kind]) or 'none'}"
                )
            attrs.setdefault(key, []).append(value)
        if kind in ("c", "h") and "file" not in attrs:
            raise GuideError(f"{page}:{start}: a {kind} block needs file=NAME (where it is written)")
        end = start
        while end < len(lines) and lines[end] != "```":
            end += 1
        if end == len(lines):
            raise GuideError(f"{page}:{start}: the block is never closed")
        blocks.append(Block(kind, start + 1, "\n".join(lines[start:end]) + "\n", attrs))
        i = end + 1
    return blocks


def _command(line: str) -> list[str]:
    argv = shlex.split(line, comments=True)
    if argv[0] == "opaque-ops":
        return [sys.executable, "-m", "opaque_ops", *argv[1:]]
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    raise GuideError(f"bash blocks run `opaque-ops ...` and `python ...` commands only; got {line!r}")


def run_bash(block: Block) -> str:
    want = int(block.attr("exit", "0"))
    output = []
    for line in block.code.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        p = subprocess.run(_command(line), capture_output=True, text=True, timeout=600)
        output.append(p.stdout + p.stderr)
        if p.returncode != want:
            raise GuideError(
                f"`{line}` exited with {p.returncode}, the page says {want}\n"
                f"stdout: {p.stdout[-3000:]}\nstderr: {p.stderr[-3000:]}"
            )
    text = "".join(output)
    for expected in block.attrs.get("expect", []):
        if expected not in text:
            raise GuideError(f"the output does not contain {expected!r}:\n{text[-4000:]}")
    return text


def run(page: Path) -> dict:
    blocks = parse(page.read_text(), str(page))
    namespace: dict = {"__name__": "__guide__"}
    summary: dict = {"page": str(page), "blocks": len(blocks), "ran": [], "skipped": []}
    for block in blocks:
        where = f"{page}:{block.line}"
        try:
            if block.kind in ("c", "h"):
                Path(block.attr("file")).write_text(block.code)
            elif block.kind == "python":
                code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
                exec(code, namespace)
            elif block.kind == "bash":
                tool = block.attr("needs")
                if tool is not None and shutil.which(tool) is None:
                    summary["skipped"].append({"line": block.line, "needs": tool})
                    print(f"skipped {where}: needs {tool}", flush=True)
                    continue
                run_bash(block)
        except GuideError as exc:
            raise GuideError(f"{where}: {block.kind} block failed: {exc}") from None
        except Exception:
            raise GuideError(f"{where}: {block.kind} block failed:\n{traceback.format_exc()}") from None
        summary["ran"].append({"line": block.line, "kind": block.kind})
        print(f"ran {where} ({block.kind})", flush=True)
    return summary


def main(argv: list[str]) -> int:
    page = Path(argv[0]).resolve()
    try:
        summary = run(page)
    except GuideError as exc:
        print(f"FAILED {exc}", file=sys.stderr, flush=True)
        return 1
    Path("guide_run.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
