"""opaque_ops/_native/ffi.py: the pre-parsed declarations match tflite_c.h, or are not used."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from cffi import FFI

from opaque_ops import _native
from opaque_ops._native import _ffi_abi
from opaque_ops._native import ffi as ffi_module
from tests.helpers.child_process import run_python
from tests.helpers.locations import ROOT


def _shape(t, depth=0):
    """A ctype's structure, without its spelling: kinds, primitive names, arguments."""
    if depth > 3:
        return t.kind
    if t.kind == "function":
        return ("function", _shape(t.result, depth + 1), tuple(_shape(a, depth + 1) for a in t.args), t.ellipsis)
    if t.kind == "pointer":
        return ("pointer", _shape(t.item, depth + 1))
    if t.kind in ("primitive", "enum"):
        return (t.kind, t.cname)
    # Struct layouts are compared by size below; `.fields` of an opaque struct
    # asserts inside cffi for pre-parsed declarations (nothing else reads it).
    return t.kind


def test_the_pre_parsed_module_is_made_from_the_header_in_the_repo():
    # tools/gen_ffi.py must run after every edit of tflite_c.h; CI fails otherwise.
    # BLAKE2b-256 (opaque_ops/_digest.py), computed here with hashlib's own.
    digest = hashlib.blake2b(Path(ffi_module.HEADER).read_bytes(), digest_size=32).hexdigest()
    assert _ffi_abi.HEADER_DIGEST == digest, "run: python tools/gen_ffi.py"
    assert ffi_module.ffi is _ffi_abi.ffi  # and it is the one in use


def test_it_declares_what_parsing_the_header_declares():
    # Same functions on the real runtime, same struct layouts: an independent
    # parse of the header (cffi's cdef) is the reference.
    parsed = FFI()
    parsed.cdef(Path(ffi_module.HEADER).read_text())
    path = _native.load_runtime().path
    fast, slow = ffi_module.ffi.dlopen(path), parsed.dlopen(path)
    assert sorted(dir(fast)) == sorted(dir(slow))
    text = Path(ffi_module.HEADER).read_text()
    types = set(re.findall(r"typedef\s+struct\s*\w*\s*\{.*?\}\s*(\w+)\s*;", text, re.S))
    types |= {f"struct {n}" for n in re.findall(r"^struct\s+(\w+)\s*\{", text, re.M)}
    assert {"TfLiteIntArray", "TfLiteCustomAllocation", "struct timespec"} <= types
    for name in sorted(types):
        assert ffi_module.ffi.sizeof(name) == parsed.sizeof(name), name
    resolved = 0
    for name in dir(fast):
        try:
            obj = getattr(fast, name)
        except ffi_module.ffi.error:  # declared for another library (libc, the isolate helper)
            continue
        if callable(obj):
            # Compared by structure: the pre-parsed module may name a typedef'd
            # struct by its tag, which changes the spelling, not the type.
            assert _shape(ffi_module.ffi.typeof(obj)) == _shape(parsed.typeof(getattr(slow, name))), name
            resolved += 1
    assert resolved > 50


def test_an_edited_header_is_parsed_instead(tmp_path):
    edited = tmp_path / "tflite_c.h"
    edited.write_text(Path(ffi_module.HEADER).read_text() + "\nint opaque_ops_test_only_declaration(int x);\n")
    ffi = ffi_module.declared(edited)
    assert ffi is not _ffi_abi.ffi
    # ABI mode lists what was declared, defined by the library or not.
    assert "opaque_ops_test_only_declaration" in dir(ffi.dlopen(None))
    assert "opaque_ops_test_only_declaration" not in dir(_ffi_abi.ffi.dlopen(None))


def test_gen_ffi_check_passes_on_the_repo():
    r = run_python(ROOT / "tools" / "gen_ffi.py", "--check")
    assert r.returncode == 0, r.stderr
