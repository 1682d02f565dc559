"""A model's strings on the terminal: doctor, inspect and run escape control characters, quote
suggested commands for the shell, and --json keeps the strings exact."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opaque_ops.cli.common import shell_command, shell_word, shown, terminal_safe
from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import run_cli

ESC_OP = "NanOp\x1b[31mRED"
ODD_OP = "it's a \u00fcn\u00ef op"  # a quote, spaces and non-ASCII letters, all printable
IN_NAME = "in\x1b]0;pwned\x07put"  # an OSC sequence: sets the terminal's title
OUT_NAME = "out\u202eput"  # a right-to-left override
DESCRIPTION = "made\x1b[2Jhere"  # ESC [2J clears the screen
KEY = "k\x1b[1m"


def _bash_reads(word: str) -> str:
    """What bash makes of one shell word: the string a pasted command would pass."""
    done = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True)
    return done.stdout.decode("utf-8")


@pytest.mark.parametrize(
    "arg",
    [
        "plain",
        "with space",
        "it's",
        'say "hi"',
        "\u00fcn\u00ef",
        ESC_OP,
        IN_NAME,
        OUT_NAME,
        "a\\x1b",
        "tab\there",
        "$HOME",
    ],
)
def test_shell_word_is_read_back_by_bash_as_the_same_string(arg):
    word = shell_word(arg)
    assert word.isprintable(), word
    assert _bash_reads(word) == arg


def test_a_file_name_that_is_not_utf8_is_read_back_as_its_bytes():
    # Python holds such a name's bytes as lone surrogates (surrogateescape);
    # they were written as \udcff, which bash made into other bytes, and
    # the pasted command named another file (a review's report).
    import os

    name = os.fsdecode(b"/tmp/m\xff\x1b[31m.tflite")
    word = shell_word(name)
    assert word.isprintable() and "\\xff" in word, word
    done = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True)
    assert done.stdout == os.fsencode(name)


def test_shown_and_terminal_safe():
    assert shown("Atan") == "Atan" and shown(ODD_OP) == ODD_OP
    assert shown(ESC_OP) == "'NanOp\\x1b[31mRED'"
    assert shown(OUT_NAME) == "'out\\u202eput'"
    # A printable name that reads like a quoted one is quoted, so it cannot pass for an escaped one.
    assert shown("'a\\x1b'") == repr("'a\\x1b'")
    assert terminal_safe("a\x1bb\nc\x9bd") == "a\\x1bb\nc\\x9bd"
    assert shell_command(["opaque-ops", "scaffold", "m.tflite", "--op", ESC_OP]) == (
        "opaque-ops scaffold m.tflite --op $'NanOp\\x1b[31mRED'"
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    b = ModelBuilder(description=DESCRIPTION)
    x = b.add_tensor(IN_NAME, [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.float32)
    z = b.add_tensor("z", [1, 4], np.float32)
    b.add_custom_op(ESC_OP, [x], [y], options={KEY: "v\x1b[0m", "nested": {KEY: 1}})
    b.add_custom_op(ODD_OP, [y], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    b.add_signature("sig\x1b", {"x": x}, {"z": z})
    path = tmp_path_factory.mktemp("terminal") / "hostile.tflite"
    path.write_bytes(b.build())
    return path


@pytest.fixture(scope="module")
def builtin_only(tmp_path_factory) -> Path:
    b = ModelBuilder()
    x = b.add_tensor(IN_NAME, [1, 4], np.float32)
    y = b.add_tensor(OUT_NAME, [1, 4], np.float32)
    b.add_op("RELU", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    path = tmp_path_factory.mktemp("terminal") / "relu.tflite"
    path.write_bytes(b.build())
    return path


def _no_controls(text: str) -> None:
    bad = sorted({c for c in text if not c.isprintable() and c != "\n"})
    assert not bad, (bad, text)


def test_doctor_text_escapes_the_models_strings_and_quotes_its_commands(hostile):
    r = run_cli("doctor", hostile)
    assert r.returncode == 1, r.stderr
    text = r.stdout
    _no_controls(text)
    for expected in (
        "description: 'made\\x1b[2Jhere'",
        "  'in\\x1b]0;pwned\\x07put'  [1, 4]  float32  (tensor 0)",
        "  custom  'NanOp\\x1b[31mRED' v1  x1  MISSING",
        f"  custom  {ODD_OP} v1  x1  MISSING",
        "'k\\x1b[1m': string = 'v\\x1b[0m'",
        "nested: map = {'k\\x1b[1m': 1}",
        "  'sig\\x1b' (subgraph 0)",
    ):
        assert expected in text, (expected, text)
    # Each suggested command, pasted into a shell, names the op exactly.
    steps = re.findall(r"next step: opaque-ops scaffold .* --op (.*)$", text, re.MULTILINE)
    assert [_bash_reads(word) for word in steps] == [ESC_OP, ODD_OP]
    everything = re.search(r"all missing ops in one project: (.*)$", text, re.MULTILINE).group(1)
    assert everything.endswith(f"--op {shell_word(ESC_OP)} --op {shell_word(ODD_OP)}")


def test_doctor_json_keeps_the_strings_exact(hostile):
    r = run_cli("doctor", hostile, "--json")
    facts = json.loads(r.stdout)
    assert facts["model"]["description"] == DESCRIPTION
    assert [t["name"] for t in facts["inputs"]] == [IN_NAME]
    assert [e["name"] for e in facts["operators"]] == [ESC_OP, ODD_OP]
    entries = {e["key"]: e["value"] for e in facts["operators"][0]["options"][0]["entries"]}
    assert entries == {KEY: "v\x1b[0m", "nested": {KEY: 1}}


def test_inspect_escapes_the_models_strings(hostile):
    r = run_cli("inspect", hostile)
    assert r.returncode == 0, r.stderr
    _no_controls(r.stdout)
    for expected in (
        "description: 'made\\x1b[2Jhere'",
        "  'in\\x1b]0;pwned\\x07put'  [1, 4]  float32  (tensor 0)",
        "  'NanOp\\x1b[31mRED' v1  x1  MISSING",
        "options: {'k\\x1b[1m'='v\\x1b[0m', nested={'k\\x1b[1m': 1}}",
        f"  {ODD_OP} v1  x1  MISSING",
        "  'sig\\x1b': inputs",
    ):
        assert expected in r.stdout, (expected, r.stdout)


def test_run_escapes_tensor_names_in_its_output_and_errors(builtin_only, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.array([[-1, 2, -3, 4]], np.float32))
    r = run_cli("run", builtin_only, "--input", f"0={x}")
    assert r.returncode == 0, r.stderr
    _no_controls(r.stdout)
    assert r.stdout.startswith("'out\\u202eput': shape (1, 4) float32  min 0 max 4"), r.stdout
    # An unknown input: the error lists the model's inputs, escaped.
    r = run_cli("run", builtin_only, "--input", f"nope={x}")
    assert r.returncode == 1
    _no_controls(r.stderr)
    assert "inputs: 'in\\x1b]0;pwned\\x07put'" in r.stderr, r.stderr
    # Not given at all: the message names it (through main()'s error line).
    r = run_cli("run", builtin_only)
    assert r.returncode == 1
    _no_controls(r.stderr)
    assert "no --input for in\\x1b]0;pwned\\x07put" in r.stderr, r.stderr


def test_a_reader_that_goes_away_is_not_an_error(hostile):
    # ``opaque-ops doctor m --json | head``: the pipe closed before the report
    # was written ended in "opaque-ops: error: [Errno 32] Broken pipe" (a new
    # user's report).  Here the read end is closed before the child writes.
    import os
    import sys

    from tests.helpers.child_process import ROOT

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.Popen(
        [sys.executable, "-m", "opaque_ops", "doctor", str(hostile), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err
    assert p.returncode == 1, (p.returncode, err)
