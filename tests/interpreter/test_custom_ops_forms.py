"""``custom_ops`` takes what the command line's ``--ops`` takes, alone or in a list (issue 17, item 13).

``custom_ops="lib.so"`` used to iterate the string's characters, and
``custom_ops=["my_ops.c"]`` ended in dlopen's "invalid ELF header".  Now a
prebuilt library's path, a ``.c`` file (compiled with compile_ops) and
``"kernels:NAME"`` are accepted, as a single value or in a list, and anything
else is refused with a message that says what to pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN


def _atan(model_bytes, custom_ops):
    it = oo.Interpreter(model_content=model_bytes, custom_ops=custom_ops)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], ATAN_INPUT)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.fixture(scope="module")
def want(atan_model_bytes):
    return _atan(atan_model_bytes, [oo.kernels.atan()])


@pytest.fixture
def c_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "my_ops.c"
    src.write_text(MACRO_ATAN + "/* custom_ops forms */\n")
    return src


def _forms(lib: Path, c_file: Path):
    return {
        "str path alone": str(lib),
        "Path alone": lib,
        "str path in a list": [str(lib)],
        "library object alone": oo.load_ops(lib),
        "kernels:NAME alone": "kernels:atan",
        "kernels:NAME in a list": ["kernels:atan"],
        ".c file in a list": [str(c_file)],
        ".c file alone": c_file,
    }


def test_every_form_runs_the_op(atan_model_bytes, want, c_file):
    lib = oo.kernels.atan().path
    for name, custom_ops in _forms(lib, c_file).items():
        got = _atan(atan_model_bytes, custom_ops)
        # The bundled Atan is within 2 ulp of the libm one that MACRO_ATAN calls.
        assert np.all(np.abs(got.view(np.int32) - want.view(np.int32)) <= 2), (name, got, want)


def test_a_bundle_by_name(atan_model_bytes):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops="kernels:mediapipe")
    assert ("Convolution2DTransposeBias", 1) in it._libs[0].ops


def test_unknown_kernel_name_says_what_exists(atan_model_bytes):
    with pytest.raises(oo.OpLibraryError, match="no bundled kernel or bundle 'nonesuch'.*atan.*kernels.by_name"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops="kernels:nonesuch")


def test_a_file_that_is_not_a_library_says_what_to_pass(atan_model_bytes, tmp_path):
    text = tmp_path / "ops.txt"
    text.write_text("not a library\n")
    with pytest.raises(oo.OpLibraryError) as info:
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=[text])
    msg = str(info.value)
    assert "not a shared library" in msg and ".c" in msg and "kernels:NAME" in msg
    assert "invalid ELF header" not in msg


def test_missing_files_name_the_file(atan_model_bytes, tmp_path):
    for missing in (tmp_path / "gone.so", tmp_path / "gone.c"):
        with pytest.raises(oo.OpLibraryError, match=f"{missing}.*does not exist"):
            oo.Interpreter(model_content=atan_model_bytes, custom_ops=str(missing))


def test_load_ops_of_c_source_names_compile_ops(c_file):
    with pytest.raises(oo.OpLibraryError, match="is C source.*compile_ops"):
        oo.load_ops(c_file)


def test_other_types_are_still_refused_with_the_list_of_what_is_taken(atan_model_bytes):
    with pytest.raises(TypeError, match="custom_ops must hold op libraries"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=[42])
    with pytest.raises(TypeError, match="custom_ops must hold op libraries"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=b"lib.so")
