"""The compile cache's own files: new private files and the notes it keeps (opaque_ops.build.store)."""

from __future__ import annotations

import os
import stat

import pytest

from opaque_ops.build import store
from opaque_ops.errors import CacheError


@pytest.fixture
def cache(tmp_path):
    return store.Cache(tmp_path / "cache")


def test_new_file_is_private_new_and_inside_the_cache(cache):
    made = []
    for _ in range(50):
        fd, path = cache.new_file()
        os.close(fd)
        made.append(path)
        # A str (the cache's paths are, see store's module doc), inside the cache.
        assert isinstance(path, str) and os.path.dirname(path) == cache.dir == str(cache.root)
        name = os.path.basename(path)
        assert name.startswith(".tmp-") and name.endswith(".part")
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 0
    assert len(set(made)) == 50


def test_new_file_never_opens_an_existing_name(cache, monkeypatch):
    # Every name it draws is taken: it must give up, not open (and truncate) one.
    taken = cache.root / ".tmp-00000000000000aa.part"
    taken.write_bytes(b"someone else's")
    monkeypatch.setattr(store.os, "urandom", lambda n: bytes(n - 1) + b"\xaa")
    with pytest.raises(FileExistsError, match="no unused temporary file name"):
        cache.new_file()
    assert taken.read_bytes() == b"someone else's"


def test_a_note_round_trips_and_replaces(cache):
    assert cache.read_note("compiler-x") is None
    cache.write_note("compiler-x", "gcc | 12.2 | x86_64-linux-gnu")
    assert cache.read_note("compiler-x") == "gcc | 12.2 | x86_64-linux-gnu"
    cache.write_note("compiler-x", "clang | 14")
    assert cache.read_note("compiler-x") == "clang | 14"
    # Published by rename: no temporary file is left behind.
    assert sorted(p.name for p in cache.root.iterdir()) == ["compiler-x.note"]
    assert stat.S_IMODE(os.stat(cache.root / "compiler-x.note").st_mode) == 0o600


def test_a_note_others_may_write_is_refused(cache):
    cache.write_note("compiler-x", "gcc")
    os.chmod(cache.root / "compiler-x.note", 0o666)
    with pytest.raises(CacheError, match="writable by other users"):
        cache.read_note("compiler-x")


def test_a_note_that_is_a_link_is_refused(cache, tmp_path):
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("planted")
    os.symlink(elsewhere, cache.root / "compiler-x.note")
    with pytest.raises(CacheError, match="not a regular file"):
        cache.read_note("compiler-x")


def test_a_note_that_cannot_be_written_is_skipped_and_leaves_nothing(cache):
    # A directory where the note would go: the rename fails (as a full disk
    # or a read-only cache would make it fail), and that is not an error.
    (cache.root / "compiler-x.note").mkdir()
    cache.write_note("compiler-x", "gcc")
    assert sorted(p.name for p in cache.root.iterdir()) == ["compiler-x.note"]


def test_an_interrupted_note_leaves_no_temporary_file(cache, monkeypatch):
    def interrupted(*_a):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.write_note("compiler-x", "gcc")
    assert list(cache.root.iterdir()) == []


# The cache's paths are str (store's module doc): its helpers must name the
# directories pathlib's Path.absolute() and .resolve().parents named before.
@pytest.mark.parametrize("given", ["a", "a/b/", "./a//b/.", "a/../b", "/x/./y//z", "/", "//x", "~/c", "../up"])
def test_absolute_paths_are_what_pathlib_made_them(given, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store._absolute(os.path.expanduser(given)) == str(Path(given).expanduser().absolute())


def test_parents_are_what_pathlib_lists(tmp_path):
    from pathlib import Path

    for p in (tmp_path / "a" / "b", Path("/"), Path("/x")):
        assert list(store._parents(str(p))) == [str(q) for q in p.parents]


def test_private_dir_creates_what_pathlib_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = store.private_dir_str("new//deeper/./leaf/", "test directory")
    assert made == str(tmp_path / "new" / "deeper" / "leaf") and os.path.isdir(made)
    assert store.private_dir("new/deeper/leaf") == tmp_path / "new" / "deeper" / "leaf"
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
