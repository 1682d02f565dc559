"""The small examples run as their READMEs say, and print what the READMEs show."""

from __future__ import annotations

import re

from tests.helpers.child_process import crashed, run_python
from tests.helpers.locations import ROOT


def _python(*args, timeout=300):
    return run_python(*args, timeout=timeout)


def test_atan_demo_prints_what_the_readme_shows():
    p = _python(ROOT / "examples" / "atan" / "run.py")
    assert p.returncode == 0, crashed(p)
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"What the demo prints \(.*?\):\n\n```\n(.*?)```", readme, re.S).group(1)
    shown = block.strip().splitlines()
    printed = p.stdout.strip().splitlines()
    assert len(printed) == len(shown), p.stdout
    # The two machine-dependent lines, by their form (the README elides the paths).
    assert re.fullmatch(r"TFLite \d+\.\d+\.\d+ from /\S+\.so", printed[0]), printed[0]
    assert re.fullmatch(r"kernel library: <OpLibrary \S+\.so: Atan v1>  \((compiled|cache hit)\)", printed[1]), printed[
        1
    ]
    assert shown[0].startswith("TFLite ") and shown[1].startswith("kernel library: <OpLibrary ")
    assert printed[2:] == shown[2:]


def test_clamp_check_and_its_tests():
    p = _python(ROOT / "examples" / "clamp" / "check.py")
    assert p.returncode == 0, crashed(p)
    assert p.stdout.strip().splitlines()[-1] == "ok"
    assert "shape (1, 64, 64, 3): C and Python agree on 12288 values" in p.stdout
    p = _python("-m", "pytest", "-q", "-p", "no:cacheprovider", ROOT / "examples" / "clamp")
    assert p.returncode == 0, crashed(p)
    assert "2 passed" in p.stdout


def test_extract_image_patches_example_checks_the_worked_example():
    p = _python(ROOT / "examples" / "extract_image_patches" / "run.py")
    assert p.returncode == 0, crashed(p)
    assert "first patch (3x3 around pixel (0,0), zero padded): [0, 0, 0, 0, 1, 2, 0, 11, 12]" in p.stdout
    assert "OK: matches the worked example" in p.stdout
