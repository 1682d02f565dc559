"""The kernel headers: upstream-compatible names, guide-style C, both name generations."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from opaque_ops import runtime_info
from opaque_ops.build import paths as _paths

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


def test_guide_source_links_against_the_real_runtime_with_upstream_names(tmp_path, atan_source):
    """With OPAQUE_OPS_UPSTREAM_NAMES the header declares only upstream names and
    routes nothing through opaque_ops; linking with --no-undefined against the
    real libtensorflowlite_c proves every symbol the kernel uses exists there."""
    from pathlib import Path

    lib = Path(runtime_info().path)
    out = tmp_path / "atan_upstream.so"
    cmd = [
        CC,
        "-std=c11",
        "-Wall",
        "-Werror",
        "-DOPAQUE_OPS_UPSTREAM_NAMES",
        f"-I{_paths.include_dir()}",
        "-shared",
        "-fPIC",
        str(atan_source),
        "-o",
        str(out),
        f"-L{lib.parent}",
        f"-l:{lib.name}",
        "-lm",
        "-Wl,--no-undefined",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # The source itself mentions nothing of opaque_ops.
    text = atan_source.read_text()
    assert "OpaqueOps" not in text and "OPAQUE_OP" not in text and "opaque_ops.h" not in text


def test_both_create_arities_compile(tmp_path):
    src = tmp_path / "arity.c"
    src.write_text(
        '#include "tensorflow/lite/c/c_api_opaque.h"\n'
        'TfLiteOperator* a(void) { return TfLiteOperatorCreate(kTfLiteBuiltinCustom, "A", 1); }\n'
        'TfLiteOperator* b(void) { return TfLiteOperatorCreate(kTfLiteBuiltinCustom, "B", 1, (void*)0); }\n'
        'TfLiteRegistrationExternal* c(void) { return TfLiteRegistrationExternalCreate(kTfLiteBuiltinCustom, "C", 1); }\n'
    )
    r = subprocess.run(
        [
            CC,
            "-std=c11",
            "-Wall",
            "-Werror",
            f"-I{_paths.include_dir()}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "arity.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_forwarding_headers_exist():
    inc = _paths.include_dir() / "tensorflow" / "lite" / "c"
    for name in ("c_api.h", "c_api_opaque.h", "common.h"):
        assert (inc / name).is_file()
