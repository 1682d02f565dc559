"""Emptying the caches (opaque_ops.caches, ``opaque-ops cache``): only their own entries go, and
everything they served is built or checked again, with the same results."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops import caches
from opaque_ops.errors import CacheError
from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN, reference, run_atan
from tests.helpers.child_process import run_python

HOUR = 3600.0


@pytest.fixture
def cache_root(tmp_path, monkeypatch, atan_model_bytes):
    """A compile cache and a verdict cache in tmp_path, filled by a real compile and a real interpreter.

    Returns the compile cache directory.
    """
    root = tmp_path / "cache"
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(root))
    monkeypatch.setenv("OPAQUE_OPS_VERDICT_CACHE", str(root / "verdicts"))
    from opaque_ops.model import cache as verdicts

    verdicts.clear()  # (the model's verdict kept in memory would spare the record's write)
    ops = oo.compile_ops(MACRO_ATAN, cache_dir=root)
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[ops])
    it.allocate_tensors()
    it.close()
    return root


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def _names(d) -> set:
    return set(os.listdir(d))


def test_clear_removes_the_caches_entries_and_nothing_else(cache_root, atan_model_bytes):
    root = cache_root
    libraries = {n for n in _names(root) if n.endswith(".so")}
    records = {n for n in _names(root / "verdicts") if n.endswith(".rec")}
    assert libraries and records  # the fixture really filled both
    # Files that are not the caches' own: a user's, a name like ours but not
    # ours, a link with a library's name, another tool's directory.
    foreign = {
        "notes.txt": "mine",
        "kernel.so": "not hex",
        "compiler-zz.note": "not hex",
        "abc-def.so": "two parts",
        "1-2-3.so": "hex, but not an entry's lengths",
        "2024-05-18.json": "a date",
        ".tmp-notes.txt": "a dot file of the user's",
        ".build-settings": "a file, not a directory",
    }
    for name, text in foreign.items():
        (root / name).write_text(text)
        _age(root / name, 30 * 86400)  # old: age is no reason to remove what is not the caches'
    for d in (".build-tools", ".build-releases", ".build-cache_v1"):  # a user's directories
        (root / d).mkdir()
        (root / d / "keep.txt").write_text("k")
        _age(root / d, 2 * HOUR)
    os.symlink(root / "notes.txt", root / ("a" * 64 + "-" + "b" * 16 + "-" + "c" * 64 + ".so"))
    (root / "wheels").mkdir()
    (root / "wheels" / "x.whl").write_text("w")
    # A temporary file and a build directory of a build that may be running
    # (young), and of one that died (old).
    young, old = root / ".tmp-0123456789abcdef.part", root / ".tmp-fedcba9876543210.part"
    young.write_text("y")
    old.write_text("o")
    _age(old, 2 * HOUR)
    dead = root / ".opaque-ops-build-dead_123"
    dead.mkdir()
    (dead / "library.so").write_text("partial")
    _age(dead, 2 * HOUR)

    removed = caches.clear()

    kinds = {os.path.basename(e.path): e.kind for e in removed}
    assert {n for n, k in kinds.items() if k == "library"} == libraries
    assert {n for n, k in kinds.items() if k == "record"} == records
    assert (kinds[old.name], kinds[dead.name]) == ("temporary", "build directory")
    left = _names(root)
    assert set(foreign) | {"wheels", ".build-tools", ".build-releases", ".build-cache_v1", young.name, "verdicts"} | {
        "a" * 64 + "-" + "b" * 16 + "-" + "c" * 64 + ".so"
    } == (left)
    assert (root / "notes.txt").read_text() == "mine" and (root / "wheels" / "x.whl").read_text() == "w"
    assert not any(n.endswith(".rec") for n in _names(root / "verdicts"))
    # What was removed is built and checked again, with the same result as numpy's.
    y = run_atan(atan_model_bytes, oo.compile_ops(MACRO_ATAN, cache_dir=root))
    np.testing.assert_allclose(y, reference(ATAN_INPUT), rtol=1e-6)
    assert {n for n in _names(root) if n.endswith(".so") and "-" in n} - {
        "a" * 64 + "-" + "b" * 16 + "-" + "c" * 64 + ".so"
    }


def test_dry_run_names_what_clear_removes_and_removes_nothing(cache_root):
    before = _names(cache_root), _names(cache_root / "verdicts")
    would = caches.clear(dry_run=True)
    assert (_names(cache_root), _names(cache_root / "verdicts")) == before
    assert would and sorted(e.path for e in would) == sorted(e.path for e in caches.clear())


def test_older_than_keeps_what_was_written_since(cache_root):
    libraries = sorted(str(cache_root / n) for n in _names(cache_root) if n.endswith(".so"))
    _age(libraries[0], 10 * 86400)
    removed = caches.clear(older_than_days=5)
    assert [e.path for e in removed] == [libraries[0]]
    assert all(os.path.exists(p) for p in libraries[1:])
    with pytest.raises(ValueError, match="0 or more"):
        caches.clear(older_than_days=-1)
    with pytest.raises(ValueError, match="0 or more"):
        caches.clear(older_than_days=float("nan"))


def test_a_cache_others_may_write_is_refused_and_left_as_it_is(cache_root):
    before = _names(cache_root)
    os.chmod(cache_root, 0o777)
    try:
        with pytest.raises(CacheError, match="other users write"):
            caches.clear()
        assert _names(cache_root) == before
    finally:
        os.chmod(cache_root, 0o700)


def test_a_running_interpreter_keeps_working_after_its_library_is_removed(cache_root, atan_model_bytes):
    ops = oo.compile_ops(MACRO_ATAN, cache_dir=cache_root)
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[ops])
    it.allocate_tensors()
    assert any(e.kind == "library" for e in caches.clear())
    it.set_tensor(it.get_input_details()[0]["index"], ATAN_INPUT)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), reference(ATAN_INPUT), rtol=1e-6)


def test_a_missing_cache_is_empty_and_the_verdicts_may_be_off(tmp_path, monkeypatch):
    monkeypatch.setenv("OPAQUE_OPS_VERDICT_CACHE", "off")
    found = caches.areas(tmp_path / "none")
    assert [(a.name, a.entries) for a in found] == [("compile cache", [])]
    assert caches.clear(tmp_path / "none") == [] and not (tmp_path / "none").exists()


def test_the_command_shows_and_clears(cache_root):
    env = {"OPAQUE_OPS_CACHE_DIR": str(cache_root), "OPAQUE_OPS_VERDICT_CACHE": str(cache_root / "verdicts")}
    shown = run_python("-m", "opaque_ops", "cache", env=env)
    assert shown.returncode == 0, shown.stderr
    n_libraries = sum(1 for n in _names(cache_root) if n.endswith(".so"))
    n_records = sum(1 for n in _names(cache_root / "verdicts") if n.endswith(".rec"))
    assert (
        f"compile cache: {cache_root}\n" in shown.stdout
        and f"verdict cache: {cache_root / 'verdicts'}\n" in shown.stdout
    )
    assert f"{n_libraries} librar" in shown.stdout and f"{n_records} record" in shown.stdout
    entries = len(caches.clear(dry_run=True))
    dry = run_python("-m", "opaque_ops", "cache", "clear", "--dry-run", "-v", env=env)
    assert dry.returncode == 0 and dry.stdout.count("would remove /") == entries >= n_libraries + n_records, dry.stdout
    assert sum(1 for n in _names(cache_root) if n.endswith(".so")) == n_libraries
    done = run_python("-m", "opaque_ops", "cache", "clear", env=env)
    assert done.returncode == 0 and done.stdout.startswith("removed: "), done.stdout + done.stderr
    assert not any(n.endswith(".so") for n in _names(cache_root))
    bad = run_python("-m", "opaque_ops", "cache", "clear", "--older-than", "soon", env=env)
    assert bad.returncode == 2 and "not a number of days: 'soon'" in bad.stderr, bad.stderr
    os.chmod(cache_root, 0o777)
    try:
        refused = run_python("-m", "opaque_ops", "cache", env=env)
    finally:
        os.chmod(cache_root, 0o700)
    assert refused.returncode == 1 and "other users write" in refused.stdout, refused.stdout + refused.stderr


def test_a_home_relative_cache_dir_is_the_one_the_caches_use(tmp_path, monkeypatch, atan_model_bytes):
    # $OPAQUE_OPS_CACHE_DIR=~/oo-cache: compile_ops expands "~", and so must the command.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", "~/oo-cache")
    monkeypatch.delenv("OPAQUE_OPS_VERDICT_CACHE", raising=False)
    oo.compile_ops(MACRO_ATAN)
    found = {a.name: a for a in caches.areas()}
    assert found["compile cache"].directory == str(tmp_path / "oo-cache")
    assert found["verdict cache"].directory == str(tmp_path / "oo-cache" / "verdicts")
    assert [e.kind for e in found["compile cache"].entries].count("library") == 1
    assert [e.kind for e in caches.clear()].count("library") == 1
    assert not any(n.endswith(".so") for n in _names(tmp_path / "oo-cache"))


def test_a_library_removed_between_lookup_and_load_is_built_again(cache_root, atan_model_bytes, monkeypatch):
    # Another process's `cache clear` lands right after this one found the
    # entry: the first compile_cached answer names a file that is gone.
    from opaque_ops.build import compiler

    real = compiler.compile_cached
    calls = []

    def then_cleared(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out[1])
        if len(calls) == 1:
            caches.clear()
        return out

    # A source this process has never loaded (dlopen would find a loaded copy
    # by its name), built into the cache by another process.
    source = MACRO_ATAN + "\n/* built by another process */\n"
    built = run_python(
        "-c",
        "import sys, opaque_ops as oo; oo.compile_ops(sys.argv[1], cache_dir=sys.argv[2])",
        source,
        str(cache_root),
    )
    assert built.returncode == 0, built.stderr
    monkeypatch.setattr(compiler, "compile_cached", then_cleared)
    y = run_atan(atan_model_bytes, oo.compile_ops(source, cache_dir=cache_root))
    assert calls == [True, False]  # a cache hit, removed, then built again
    np.testing.assert_allclose(y, reference(ATAN_INPUT), rtol=1e-6)


def test_a_broken_verdict_cache_does_not_stop_the_compile_cache_clear(cache_root, monkeypatch, tmp_path):
    bad = tmp_path / "a-file"
    bad.write_text("not a directory")
    monkeypatch.setenv("OPAQUE_OPS_VERDICT_CACHE", str(bad))
    found = {a.name: a for a in caches.areas()}
    assert found["compile cache"].error is None and found["compile cache"].entries
    assert "$OPAQUE_OPS_VERDICT_CACHE" in found["verdict cache"].error, found["verdict cache"].error
    with pytest.raises(CacheError, match=r"\$OPAQUE_OPS_VERDICT_CACHE") as caught:
        caches.clear()
    assert any(e.kind == "library" for e in caught.value.removed)
    assert not any(n.endswith(".so") for n in _names(cache_root))
    env = {"OPAQUE_OPS_CACHE_DIR": str(cache_root), "OPAQUE_OPS_VERDICT_CACHE": str(bad)}
    shown = run_python("-m", "opaque_ops", "cache", env=env)
    assert shown.returncode == 1 and "not read:" in shown.stdout and "compile cache: " in shown.stdout, shown.stdout


def test_the_fast_calls_module_removed_between_lookup_and_load_is_built_again(tmp_path):
    # The same race for the fast calls module: without the retry, the process
    # would run without the module (and its Ctrl-C guard) for its whole life.
    from tests.helpers.fast_module import required_fast_calls

    module = required_fast_calls()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    # The session's module, as a cache entry of this cache (its name carries its keys and digest).
    entry = cache / os.path.basename(module)
    entry.write_bytes(open(module, "rb").read())
    os.chmod(entry, 0o700)
    code = """
import os, json
from opaque_ops.build import compiler
real = compiler.cached_build
found = []
def then_cleared(*args, **kwargs):
    path = real(*args, **kwargs)
    found.append(path is not None)
    if path is not None and len(found) == 1:
        os.unlink(path)  # another process's `opaque-ops cache clear`, right after the lookup
    return path
compiler.cached_build = then_cleared
from opaque_ops.interpreter import fast_calls
used, where = fast_calls.status()
print(json.dumps({"used": used, "where": where, "found": found}))
"""
    p = run_python("-c", code, env={"OPAQUE_OPS_CACHE_DIR": str(cache), "OPAQUE_OPS_FASTCALLS": None}, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["used"] is True and r["found"] == [True, False], r
    assert os.path.exists(r["where"]) and r["where"].startswith(str(cache)), r


def test_writing_a_record_leaves_a_users_files_in_a_mispointed_verdict_cache(tmp_path, monkeypatch, atan_model_bytes):
    # The verdict cache's own pruning (each new record's write) goes by the
    # same names as `cache clear`: a user's .json and .tmp-* files stay.
    verdicts = tmp_path / "project"
    verdicts.mkdir(mode=0o700)
    mine = {"settings.json": "{}", "2024-05-18.json": "[]", ".tmp-draft.txt": "d", ".tmp-0123.part": "p"}
    for name, text in mine.items():
        (verdicts / name).write_text(text)
        _age(verdicts / name, 30 * 86400)
    monkeypatch.setenv("OPAQUE_OPS_VERDICT_CACHE", str(verdicts))
    from opaque_ops.model import cache as verdict_cache

    verdict_cache.clear()
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[oo.compile_ops(MACRO_ATAN)])
    it.allocate_tensors()
    assert any(n.endswith(".rec") for n in _names(verdicts))  # the record was written
    assert {n: (verdicts / n).read_text() for n in mine} == mine
    verdict_cache.clear(disk=True)
    assert not any(n.endswith(".rec") for n in _names(verdicts))
    assert {n: (verdicts / n).read_text() for n in mine} == mine
