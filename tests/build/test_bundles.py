"""The bundled kernel files (opaque_ops.build.bundles): the listing says what pathlib's glob says."""

from __future__ import annotations

from pathlib import Path

import pytest

from opaque_ops.build import bundles, paths


def _glob_names(d: Path) -> list[str]:
    # How the kernels were listed before (and how standalone.py listed them).
    return sorted(p.stem for p in d.glob("*.c"))


def test_available_lists_what_the_glob_listed(tmp_path):
    for name in ["a.c", ".hidden.c", "..c", ".c", "x.b.c", "y.h", "z.C", "c"]:
        (tmp_path / name).write_text("")
    (tmp_path / "dir.c").mkdir()  # a directory whose name matches too
    assert bundles.available(tmp_path) == _glob_names(tmp_path)
    assert bundles.available() == _glob_names(paths.kernels_dir())
    assert bundles.available(tmp_path / "missing") == _glob_names(tmp_path / "missing") == []


@pytest.mark.parametrize(
    "given", ["a", "a/b/", "./a//b/.", "a/../b", "/x/./y//z", "/", "//x", "///x", "", ".", "../up"]
)
def test_pure_is_what_pathlib_makes_of_a_path(given):
    # The compile cache's keys hold these strings (compiler.read_source, _headers_digest):
    # they must stay what str(Path(...)) gave before the start-up path dropped pathlib.
    from pathlib import PurePosixPath

    assert paths.pure(given) == str(PurePosixPath(given))


@pytest.mark.parametrize("name", bundles.available())
def test_declared_ops_are_what_the_loaded_library_registers(name):
    # A bundle decides which files to load on these (opaque_ops.ops.library.OpBundle):
    # an op the source's OPAQUE_OP lines miss would go unregistered.
    from opaque_ops import kernels

    assert list(bundles.declared_ops(name)) == kernels.kernel(name).ops
    assert bundles.declared_ops(name)
