"""opaque_ops.build.extension and the build path's extension mode (the fast calls module)."""

from __future__ import annotations

import sysconfig

from opaque_ops.build import compiler, extension


def test_prebuilt_name_is_the_interpreters_extension_tag():
    assert extension.prebuilt_name() + ".so" == "_fastcalls" + sysconfig.get_config_var("EXT_SUFFIX")


def test_key_follows_the_source_and_nothing_else_of_the_run(tmp_path):
    spec = extension.build_spec()
    assert spec.key() == extension.build_spec().key()
    changed = tmp_path / "fastcalls.c"
    changed.write_text(extension.source().read_text() + "\n/* changed */\n")
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


def test_the_module_is_built_from_the_fast_calls_and_the_model_reader(tmp_path):
    spec = extension.build_spec()
    assert [p.name for p in spec.sources] == ["fastcalls.c", "modelreader.c"]
    reader_copy = tmp_path / "modelreader.c"
    reader_copy.write_text(extension.sources()[1].read_text() + "\n/* changed */\n")
    other = compiler.BuildSpec(compiler=spec.compiler, sources=[extension.source(), reader_copy], extension=True)
    assert other.key() != spec.key()


def test_a_prebuilt_module_is_verified_against_both_sources(tmp_path):
    import hashlib
    import json

    from opaque_ops.build import bundles

    a, b, lib = tmp_path / "a.c", tmp_path / "b.c", tmp_path / "_m.so"
    a.write_text("int a;\n")
    b.write_text("int b;\n")
    lib.write_bytes(b"\x7fELF library")
    entry = {"digest": hashlib.blake2b(lib.read_bytes(), digest_size=32).hexdigest()}
    entry["source_digest"] = bundles.source_digest([a, b])
    (tmp_path / bundles.PREBUILT_MANIFEST).write_text(json.dumps({"fastcalls": {"_m": entry}}))
    assert bundles.verified_library(tmp_path, "_m", [a, b], section="fastcalls") == lib
    b.write_text("int b2;\n")
    assert bundles.verified_library(tmp_path, "_m", [a, b], section="fastcalls") is None
    # One file keeps the digest of its bytes (the kernels' entries).
    assert bundles.source_digest(a) == hashlib.blake2b(a.read_bytes(), digest_size=32).hexdigest()
