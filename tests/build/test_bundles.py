"""The bundled kernel files (opaque_ops.build.bundles): the listing says what pathlib's glob says."""

from __future__ import annotations

from pathlib import Path

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
