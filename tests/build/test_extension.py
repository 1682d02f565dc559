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
