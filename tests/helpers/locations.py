"""Where the tests find files: this checkout, and the installed test dependencies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
CORPUS = TESTS / "corpus"


def package_file(package: str, *parts: str) -> Path:
    """A file inside an installed distribution, found without importing the package.

    The packages asked for are dependencies of the test suite, so a missing
    one fails the test (a skip would hide that the suite did not run).
    """
    if package == "mediapipe":  # its 0.10.14 models, also where that release has no wheel (3.13)
        from tests.helpers.mediapipe_models import mediapipe_dir

        return mediapipe_dir().joinpath(*parts)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"{package} is not installed; it is a test dependency: pip install -e '.[test]'")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)


def example_module(folder: str, name: str):
    """``examples/<folder>/<name>.py`` loaded as a module.

    The examples are folders of scripts, not packages: the tests load the one
    they need from its file rather than putting the folder on ``sys.path``.
    """
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ADD_DELEGATE_PLUGIN_C = TESTS / "helpers" / "add_delegate_plugin.c"
"""A TFLite delegate plugin (C) that claims float32 ADD and computes a + b + extra (the delegate tests)."""
