"""opaque_ops.build.extension and the build path's extension mode (the fast calls module)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from opaque_ops.build import compiler, extension
from tests.helpers.locations import ROOT


def test_prebuilt_name_is_the_interpreters_extension_tag():
    assert extension.prebuilt_name() + ".so" == "_fastcalls" + sysconfig.get_config_var("EXT_SUFFIX")
    assert "." + extension.running_tag() + ".so" == sysconfig.get_config_var("EXT_SUFFIX")
    assert extension.prebuilt_name("cpython-313-aarch64-linux-gnu") == "_fastcalls.cpython-313-aarch64-linux-gnu"


def test_key_follows_the_source_and_nothing_else_of_the_run(tmp_path):
    spec = extension.build_spec()
    assert spec.key() == extension.build_spec().key()
    changed = tmp_path / "fastcalls.c"
    changed.write_text(Path(extension.source()).read_text() + "\n/* changed */\n")
    other = compiler.BuildSpec(compiler=spec.compiler, sources=[changed], extension=True)
    assert other.key() != spec.key()
    # A kernel library of the same file is another build altogether.
    assert compiler.BuildSpec(compiler=spec.compiler, sources=[extension.source()]).key() != spec.key()


def test_python_symbols_are_left_for_the_interpreter_only_in_an_extension():
    log = (
        "/usr/bin/ld: x.o: warning: undefined reference to `PyLong_FromLong'\n"
        "/usr/bin/ld: x.o: warning: undefined reference to `PY_TIMEOUT_MAX'\n"
        "/usr/bin/ld: x.o: warning: more undefined references to `_Py_Dealloc' follow\n"
        "/usr/bin/ld: x.o: warning: undefined reference to `misspelt_function'\n"
    )
    _, missing = compiler.split_link_output(log, extension=True)
    assert missing == ["misspelt_function"]
    _, missing = compiler.split_link_output(log)
    assert missing == ["PyLong_FromLong", "PY_TIMEOUT_MAX", "_Py_Dealloc", "misspelt_function"]


def test_the_module_is_built_from_the_fast_calls_the_model_reader_and_the_ctrl_c_guard(tmp_path):
    spec = extension.build_spec()
    assert [Path(p).name for p in spec.sources] == ["fastcalls.c", "modelreader.c", "sigint_guard.c"]
    # A change to any one of them is a new build.
    for k in (1, 2):
        copy = tmp_path / Path(extension.sources()[k]).name
        copy.write_text(Path(extension.sources()[k]).read_text() + "\n/* changed */\n")
        sources = list(extension.sources())
        sources[k] = str(copy)
        other = compiler.BuildSpec(compiler=spec.compiler, sources=sources, extension=True)
        assert other.key() != spec.key()


def test_a_prebuilt_module_is_verified_against_both_sources(tmp_path):
    import hashlib

    from opaque_ops.build import bundles

    a, b, lib = tmp_path / "a.c", tmp_path / "b.c", tmp_path / "_m.so"
    a.write_text("int a;\n")
    b.write_text("int b;\n")
    lib.write_bytes(b"\x7fELF library")
    entry = {"digest": hashlib.blake2b(lib.read_bytes(), digest_size=32).hexdigest()}
    entry["source_digest"] = bundles.source_digest([a, b])
    (tmp_path / bundles.PREBUILT_MANIFEST).write_text(bundles.format_manifest({"fastcalls": {"_m": entry}}))
    assert bundles.verified_library(tmp_path, "_m", [a, b], section="fastcalls") == str(lib)
    b.write_text("int b2;\n")
    assert bundles.verified_library(tmp_path, "_m", [a, b], section="fastcalls") is None
    # One file keeps the digest of its bytes (the kernels' entries).
    assert bundles.source_digest(a) == hashlib.blake2b(a.read_bytes(), digest_size=32).hexdigest()


@pytest.mark.parametrize(
    "pythons, message",
    [
        ([("cpython-311-x86_64-linux-gnu", ["{d}"])], "not a CPython ABI tag for aarch64"),
        ([("cpython-311-aarch64-linux-gnu", [])], "header directories of cpython-311-aarch64-linux-gnu missing: none"),
        ([("cpython-313-aarch64-linux-gnu", ["{d}/nowhere"])], "nowhere"),
        (
            [("cpython-311-aarch64-linux-gnu", ["{d}"]), ("cpython-311-aarch64-linux-gnu", ["{d}"])],
            "names a Python twice",
        ),
    ],
)
def test_a_cross_builds_target_pythons_are_checked_before_anything_is_built(tmp_path, pythons, message):
    from opaque_ops.build.standalone import BuildError, build_prebuilt

    out = tmp_path / "out"
    pythons = [(tag, [d.format(d=tmp_path) for d in dirs]) for tag, dirs in pythons]
    with pytest.raises(BuildError, match=re.escape(message)):
        build_prebuilt("aarch64", out, target_pythons=pythons)
    assert not out.exists()


def test_a_native_build_refuses_the_running_python_as_another_one(tmp_path):
    # It builds the running Python's module anyway: naming it again would
    # build it twice, from other headers perhaps.
    from opaque_ops.build.standalone import BuildError, build_prebuilt, host_arch

    running = extension.running_tag()
    out = tmp_path / "out"
    with pytest.raises(BuildError, match="names a Python twice"):
        build_prebuilt(host_arch(), out, target_pythons=[(running, [str(tmp_path)])])
    assert not out.exists()


def _setup_target_pythons(env: dict) -> list:
    """setup.py's reading of OPAQUE_OPS_WHEEL_PYTHON_TAG / _INCLUDE, in a child with only ``env`` set."""
    code = (
        "import json, runpy, sys; sys.argv = ['setup.py', '--version']\n"
        "import setuptools; setuptools.setup = lambda **kw: None\n"
        f"ns = runpy.run_path({str(ROOT / 'setup.py')!r})\n"
        "print(json.dumps(ns['target_pythons']()))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPAQUE_OPS_WHEEL_")}
    r = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        return ["exit", r.returncode, r.stderr.strip().splitlines()[-1]]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_setup_reads_one_header_group_per_tag():
    assert _setup_target_pythons({}) == []
    one = {"OPAQUE_OPS_WHEEL_PYTHON_TAG": "cpython-311-aarch64-linux-gnu", "OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": "/a:/b"}
    assert _setup_target_pythons(one) == [["cpython-311-aarch64-linux-gnu", ["/a", "/b"]]]
    two = {
        "OPAQUE_OPS_WHEEL_PYTHON_TAG": "cpython-311-aarch64-linux-gnu, cpython-313-aarch64-linux-gnu",
        "OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": "/a:/b;/c:/d:/e",
    }
    assert _setup_target_pythons(two) == [
        ["cpython-311-aarch64-linux-gnu", ["/a", "/b"]],
        ["cpython-313-aarch64-linux-gnu", ["/c", "/d", "/e"]],
    ]
    # A group per tag, or nothing is built: the wheel must not pair a Python with another's headers.
    short = {**two, "OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": "/a:/b"}
    got = _setup_target_pythons(short)
    assert got[:2] == ["exit", 1] and "names 2 Python(s)" in got[2] and "gives 1 group(s)" in got[2]
    assert _setup_target_pythons({"OPAQUE_OPS_WHEEL_PYTHON_INCLUDE": "/a"})[:2] == ["exit", 1]
