"""opaque_ops._native.elf against binutils (readelf, nm) on real runtime files of three architectures."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest

from opaque_ops._native import elf
from tests.helpers.runtime_libraries import foreign_library, wheel_library

ARCHES = ["x86_64", "aarch64", "armv7l"]
needs_binutils = pytest.mark.skipif(
    shutil.which("readelf") is None or shutil.which("nm") is None, reason="needs binutils (apt-get install binutils)"
)


def _lib(arch):
    return foreign_library(arch)


def _readelf(*args) -> str:
    return subprocess.run(["readelf", *map(str, args)], capture_output=True, text=True, check=True).stdout


@needs_binutils
@pytest.mark.parametrize("arch", ARCHES)
def test_header_matches_readelf(arch):
    lib = _lib(arch)
    out = _readelf("-h", lib)
    info = elf.read(lib)
    assert f"ELF{info.bits}" in re.search(r"Class:\s+(\S+)", out).group(1)
    machine = re.search(r"Machine:\s+(.+)", out).group(1).strip()
    assert {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64", "armv7l": "ARM"}[arch] == machine
    assert info.arch == arch
    flags = int(re.search(r"Flags:\s+(0x[0-9a-f]+)", out).group(1), 16)
    assert info.flags == flags
    if arch == "armv7l":
        assert "hard-float ABI" in out


@needs_binutils
@pytest.mark.parametrize("arch", ARCHES)
def test_glibc_needed_matches_readelf_version_needs(arch):
    lib = _lib(arch)
    versions = re.findall(r"Name: GLIBC_(\d+)\.(\d+)", _readelf("-V", "-W", lib))
    assert versions
    assert elf.glibc_needed(lib) == max((int(a), int(b)) for a, b in versions) == (2, 34)


@pytest.mark.parametrize(
    "name",
    [b"GLIBC_2.34", b"GLIBC_2.2.5", b"GLIBC_2.17", b"GLIBC_10.0.1", b"GLIBC_2", b"GLIBC_2.", b"GLIBC_.3",
     b"GLIBC_2.3.4.5", b"GLIBC_2.x", b"GLIBC_PRIVATE", b"GLIBCXX_3.4.29", b"CXXABI_1.3", b"glibc_2.34",
     b"GLIBC_2.34 ", b"GLIBC_\xd9\xa3.1", b"", b"GLIBC_", b"GLIBC_2..3"],
)  # fmt: skip
def test_glibc_version_names_are_read_as_the_pattern_of_the_version_needs_reads_them(name):
    # The version names of .gnu.version_r, as binutils prints them
    # ("Name: GLIBC_2.2.5"): two or three dot-separated decimal numbers.
    m = re.fullmatch(rb"GLIBC_([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", name)
    want = tuple(int(g) for g in m.groups() if g is not None) if m else None
    assert elf._glibc_version(name) == want


@needs_binutils
@pytest.mark.parametrize("arch", ARCHES)
def test_defined_symbols_match_nm(arch):
    lib = _lib(arch)
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    want = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    assert elf.defined_symbols(lib) == want


def test_running_glibc_matches_the_platform_module():
    lib, version = platform.libc_ver()
    if lib != "glibc":
        pytest.skip("not a glibc system")
    assert elf.running_glibc() == tuple(int(p) for p in version.split("."))


def test_this_process_can_load_its_own_runtime_and_not_the_others():
    proc = elf.process()
    assert elf.load_problem(wheel_library()) is None
    for arch in ARCHES:
        if elf.read(_lib(arch)).machine != proc.machine:
            assert "is built for " + arch in elf.load_problem(_lib(arch))


def test_non_elf_and_truncated_files(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF\x02")  # truncated header
    with pytest.raises(elf.NotElfError):
        elf.read(junk)
    assert elf.load_problem(junk) is None  # left to dlopen, whose message says what it is
    assert elf.load_problem(tmp_path / "missing.so") is None


def test_a_corrupt_section_table_does_not_hang_or_crash(tmp_path):
    data = bytearray(wheel_library().read_bytes()[:4096])  # header kept, sections cut off
    bad = tmp_path / "cut.so"
    bad.write_bytes(bytes(data))
    assert elf.glibc_needed(bad) is None
    assert elf.defined_symbols(bad) == set()


@pytest.mark.parametrize("arch", ARCHES)
def test_dynamic_strings_hold_every_needed_library_and_symbol(arch):
    # sanitizers.missing_runtime decides from these alone when no sanitizer's name is in them.
    import opaque_ops as oo

    for lib in (_lib(arch), oo.kernels.atan().path):
        strings = elf.dynamic_strings(lib)
        names = elf.needed_libraries(lib) + sorted(elf.undefined_symbols(lib) | elf.defined_symbols(lib))
        assert len(names) > 10
        assert [n for n in names if n.encode() not in strings] == []
    assert b"__asan_" not in elf.dynamic_strings(oo.kernels.atan().path)
