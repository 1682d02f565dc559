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


def _entry(i: int) -> dict:
    return {"digest": f"{i:064x}", "source_digest": f"{i + 1000:064x}"}


MANIFEST = {
    "arch": "x86_64",
    "build_path": "2",
    "kernels": {"atan": _entry(1), "max_unpooling": _entry(2)},
    "fastcalls": {"_fastcalls.cpython-311-x86_64-linux-gnu": _entry(3)},
}


def test_a_manifest_reads_back_as_written_and_as_an_independent_reader_reads_it():
    from tests.helpers.manifest_text import manifest_of

    text = bundles.format_manifest(MANIFEST)
    assert bundles.parse_manifest(text) == MANIFEST == manifest_of(text)
    assert bundles.parse_manifest(text.replace(" ", "  \t")) == MANIFEST  # any white space between words


@pytest.mark.parametrize(
    "bad",
    [
        {"arch": "x86 64"},
        {"arch": ""},
        {"#arch": "x"},
        {"kernels": {"a b": _entry(1)}},
        {"kernels": {"a": {"digest": "", "source_digest": "x"}}},
        {"kernels": {"a": {"digest": "x\ny", "source_digest": "x"}}},
    ],
)
def test_a_manifest_that_could_not_be_read_back_is_not_written(bad):
    with pytest.raises(ValueError, match="cannot hold"):
        bundles.format_manifest(bad)


@pytest.mark.parametrize(
    "text", ["arch", "kernels a b", "kernels a b c d e", "arch x\narch a b c", "kernels a b c\nkernels y"]
)
def test_a_line_that_is_no_manifest_line_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match="line [12] of a prebuilt manifest is not one"):
        bundles.parse_manifest(text)


def test_a_package_built_with_the_json_manifest_still_loads_prebuilt(tmp_path):
    # Kernel packages built before manifest.txt carry manifest.json: their libraries are still used.
    import json

    from opaque_ops import _digest

    source = tmp_path / "k.c"
    source.write_text("/* a kernel */\n")
    lib = tmp_path / "k.so"
    lib.write_bytes(b"\x7fELF not really")
    entry = {"digest": _digest.of_file(lib), "source_digest": _digest.of_file(source)}
    (tmp_path / "manifest.json").write_text(json.dumps({"arch": "x86_64", "kernels": {"k": entry}}))
    assert bundles.verified_library(tmp_path, "k", source) == str(lib)
    # manifest.txt, when present, is the one read.
    (tmp_path / "manifest.txt").write_text(bundles.format_manifest({"kernels": {"k": _entry(9)}}))
    assert bundles.verified_library(tmp_path, "k", source) is None
    (tmp_path / "manifest.txt").write_text(bundles.format_manifest({"kernels": {"k": entry}}))
    assert bundles.verified_library(tmp_path, "k", source) == str(lib)
    for broken in ("[1, 2]", "{", "[" * 100_000 + "]" * 100_000):
        (tmp_path / "manifest.txt").unlink(missing_ok=True)
        (tmp_path / "manifest.json").write_text(broken)
        assert bundles.verified_library(tmp_path, "k", source) is None
        with pytest.raises(ValueError):
            bundles.read_manifest(tmp_path)
