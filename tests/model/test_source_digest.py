"""The verdict cache's code digest: the scandir walk finds what ``Path.rglob("*.py")`` finds, in its order."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from opaque_ops import __version__
from opaque_ops.build import paths
from opaque_ops.model import cache


def _rglob_digest(folder: Path) -> str:
    # The digest as it was computed with pathlib's glob.
    h = hashlib.blake2b(f"opaque_ops {__version__}".encode(), digest_size=32)
    for path in sorted(folder.rglob("*.py")):
        st = os.stat(path)
        h.update(f"\0{path.relative_to(folder).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _tree(root: Path) -> None:
    files = [
        "a.py",
        "a-c.py",
        "a/b.py",
        "a/z/deep.py",
        ".hidden.py",
        "B.py",
        "x.pyc",
        "notes.txt",
        "checks/__init__.py",
    ]
    for rel in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)
    (root / "dir.py").mkdir()  # a directory whose name matches too
    (root / "dir.py" / "inner.py").write_text("x")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"")


def test_walk_matches_rglob_on_a_tricky_tree(tmp_path):
    _tree(tmp_path)
    assert cache._source_digest(tmp_path) == _rglob_digest(tmp_path)
    assert [("/".join(p)) for p in sorted(paths.files_named(str(tmp_path), ".py"))] == [
        p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*.py"))
    ]


def test_walk_does_not_follow_directory_symlinks(tmp_path):
    _tree(tmp_path / "pkg")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "other.py").write_text("y")
    try:
        (tmp_path / "pkg" / "linked").symlink_to(outside, target_is_directory=True)
        (tmp_path / "pkg" / "link.py").symlink_to(outside / "other.py")
    except OSError:
        pytest.skip("no symlinks here")
    assert cache._source_digest(tmp_path / "pkg") == _rglob_digest(tmp_path / "pkg")


def test_the_model_package_digest_is_unchanged():
    folder = Path(cache.__file__).resolve().parent
    assert cache._source_digest(folder) == _rglob_digest(folder)
