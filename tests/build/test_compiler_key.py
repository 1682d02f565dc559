"""What a compile cache key costs at start-up, and that it still says the same (opaque_ops.build.compiler).

- the compiler's identity, asked once and then kept as a note in the cache,
  asked again when the compiler changes;
- ``which``, the PATH lookup without shutil, against ``shutil.which``;
- the header digest, read once per process, against the digest as it was
  computed with pathlib's glob (every existing cache entry's key holds it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from opaque_ops.build import compiler, store


def _fake_compiler(path: Path, version: str, status: int = 0) -> Path:
    # A real executable that answers as a compiler does (--version, -dumpmachine).
    path.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            echo "$@" >> "{path}.calls"
            case "$1" in
              --version) echo "fakecc {version}";;
              -dumpmachine) echo "x86_64-fake-linux";;
            esac
            exit {status}
            """
        )
    )
    path.chmod(0o755)
    return path


def _calls(cc: Path) -> int:
    p = Path(f"{cc}.calls")
    return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.fixture
def fresh(monkeypatch):
    # Nothing asked in this process yet.
    monkeypatch.setattr(compiler, "_identities", {})


def test_identity_is_asked_once_then_read_from_the_cache(tmp_path, fresh, monkeypatch):
    cc = _fake_compiler(tmp_path / "cc", "1.0")
    cache = store.Cache(tmp_path / "cache")
    first = compiler.compiler_identity([str(cc)], cache)
    assert first == f"{cc} | fakecc 1.0 | x86_64-fake-linux"
    assert _calls(cc) == 2
    # A new process (no answers in memory) reads the note: the compiler is not run.
    monkeypatch.setattr(compiler, "_identities", {})
    assert compiler.compiler_identity([str(cc)], cache) == first
    assert _calls(cc) == 2
    # Without a cache, it is asked (once per process).
    monkeypatch.setattr(compiler, "_identities", {})
    assert compiler.compiler_identity([str(cc)]) == first
    assert compiler.compiler_identity([str(cc)]) == first
    assert _calls(cc) == 4


def test_a_changed_compiler_is_asked_again(tmp_path, fresh, monkeypatch):
    cc = _fake_compiler(tmp_path / "cc", "1.0")
    cache = store.Cache(tmp_path / "cache")
    assert "fakecc 1.0" in compiler.compiler_identity([str(cc)], cache)
    # An upgrade: a new file in the same place (another size, another time).
    _fake_compiler(cc, "2.0.1")
    os.utime(cc, ns=(os.stat(cc).st_atime_ns, os.stat(cc).st_mtime_ns + 10**9))
    monkeypatch.setattr(compiler, "_identities", {})
    assert "fakecc 2.0.1" in compiler.compiler_identity([str(cc)], cache)
    # Another command is another identity, even for the same file.
    assert compiler.compiler_identity([str(cc), "-m32"], cache) != compiler.compiler_identity([str(cc)], cache)


def test_an_answer_not_given_in_full_is_not_kept(tmp_path, fresh, monkeypatch):
    cc = _fake_compiler(tmp_path / "cc", "1.0", status=1)
    cache = store.Cache(tmp_path / "cache")
    compiler.compiler_identity([str(cc)], cache)
    assert not list(cache.root.glob("*.note"))
    monkeypatch.setattr(compiler, "_identities", {})
    compiler.compiler_identity([str(cc)], cache)
    assert _calls(cc) == 4  # asked again in the next process


def test_a_note_for_another_file_is_not_believed(tmp_path, fresh, monkeypatch):
    cc = _fake_compiler(tmp_path / "cc", "1.0")
    cache = store.Cache(tmp_path / "cache")
    compiler.compiler_identity([str(cc)], cache)
    (note,) = cache.root.glob("*.note")
    note.write_text("/usr/bin/other | planted | x")
    monkeypatch.setattr(compiler, "_identities", {})
    assert compiler.compiler_identity([str(cc)], cache) == f"{cc} | fakecc 1.0 | x86_64-fake-linux"


def test_the_real_compiler_key_is_the_same_with_and_without_the_note(tmp_path, fresh, monkeypatch):
    cc = compiler.native_compiler()
    cache = store.Cache(tmp_path / "cache")
    asked = compiler.compiler_identity(cc, cache)
    monkeypatch.setattr(compiler, "_identities", {})
    assert compiler.compiler_identity(cc, cache) == asked
    monkeypatch.setattr(compiler, "_identities", {})
    assert compiler.compiler_identity(cc) == asked


@pytest.mark.parametrize(
    "path_value",
    [None, "", "{bin}", "{bin}:{bin}", "{other}:{bin}", ":{bin}", "{missing}:{bin}", "{notexec}:{bin}"],
)
@pytest.mark.parametrize("name", ["tool", "notexec", "adir", "absent", "sh"])
def test_which_finds_what_shutil_which_finds(tmp_path, monkeypatch, path_value, name):
    for d in ("bin", "other", "notexec"):
        (tmp_path / d).mkdir()
    (tmp_path / "bin" / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "tool").chmod(0o755)
    (tmp_path / "other" / "tool").write_text("not executable")
    (tmp_path / "notexec" / "notexec").write_text("x")
    (tmp_path / "bin" / "adir").mkdir()
    monkeypatch.chdir(tmp_path / "bin")
    if path_value is None:
        monkeypatch.delenv("PATH", raising=False)
    else:
        dirs = {d: str(tmp_path / d) for d in ("bin", "other", "missing", "notexec")}
        monkeypatch.setenv("PATH", path_value.format(**dirs))
    assert compiler.which(name) == shutil.which(name)
    for given in (str(tmp_path / "bin" / name), f"./{name}"):
        assert compiler.which(given) == shutil.which(given)


def _rglob_headers_digest(dirs) -> str:
    # The digest as compiler._headers_digest computed it with pathlib's glob.
    h = hashlib.blake2b(digest_size=32)
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            continue
        for p in sorted(d.rglob("*.h"))[:2000]:
            h.update(str(p).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _headers(root: Path) -> None:
    for rel in ["a.h", "B.h", ".hidden.h", "sub/x.h", "sub/deeper/y.h", "a-b.h", "notes.txt", "x.hpp", "sub/z.c"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"/* {rel} */\n")


def test_headers_digest_is_the_glob_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "_header_digests", {})
    _headers(tmp_path / "inc")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "o.h").write_text("/* followed by no one */")
    (tmp_path / "inc" / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "inc" / "link.h").symlink_to(tmp_path / "inc" / "a.h")
    dirs = [str(tmp_path / "inc"), str(tmp_path / "missing"), str(tmp_path / "inc" / "sub") + "/"]
    assert compiler._headers_digest(dirs) == _rglob_headers_digest(dirs)
    real = [str(compiler._paths.include_dir()), str(compiler._paths.kernels_dir())]
    assert compiler._headers_digest(real) == _rglob_headers_digest(real)


def test_headers_digest_sees_a_changed_added_or_removed_header(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "_header_digests", {})
    _headers(tmp_path / "inc")
    dirs = [str(tmp_path / "inc")]
    seen = {compiler._headers_digest(dirs)}
    a = tmp_path / "inc" / "sub" / "x.h"
    st = os.stat(a)
    a.write_text("/* sub/X.h */\n")  # the same size: only the time tells
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    seen.add(compiler._headers_digest(dirs))
    a.write_text("/* edited, longer than before */\n")
    seen.add(compiler._headers_digest(dirs))
    (tmp_path / "inc" / "new.h").write_text("")
    seen.add(compiler._headers_digest(dirs))
    (tmp_path / "inc" / "B.h").unlink()
    seen.add(compiler._headers_digest(dirs))
    assert len(seen) == 5
    assert compiler._headers_digest(dirs) == _rglob_headers_digest(dirs)
