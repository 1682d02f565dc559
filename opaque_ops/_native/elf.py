"""What a shared library needs from the process that loads it, read from its ELF file.

``dlopen`` refuses a library of another architecture, or one that needs a
newer glibc, with messages such as "wrong ELF class: ELFCLASS32" or
"version `GLIBC_2.34' not found".  They are true but do not say what to do.
Reading three small parts of the file first (the header, and the
``.gnu.version_r`` section with its string table) lets the loader say which
architecture and glibc the file wants and which this process has.

This is hand-written rather than taken from pyelftools: it runs at every
runtime and kernel-library load, reads a few hundred bytes, and must not add
an import or a dependency to that path.  The layout is the System V ABI's
(``Elf32_Ehdr``/``Elf64_Ehdr``, ``Elf*_Shdr``, ``Elf*_Verneed``/``Vernaux``,
``Elf*_Sym``), as in ``<elf.h>``.
"""

from __future__ import annotations

import os
import struct
import sys
from functools import lru_cache

from .._records import Record, record

# e_machine values (<elf.h>) -> the names host_arch() and the build targets use.
_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x28: "armv7l", 0x03: "i686"}
_EM_ARM = 0x28
# e_flags of 32-bit ARM: which float calling convention the code uses.  An
# armhf process (Raspberry Pi OS 32-bit) cannot load soft-float code.
_EF_ARM_ABI_FLOAT_HARD = 0x400
_EF_ARM_ABI_FLOAT_SOFT = 0x200
_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_DT_NULL, _DT_NEEDED = 0, 1
_SHT_GNU_VERNEED = 0x6FFFFFFE


class NotElfError(ValueError):
    """The file is not an ELF shared object (too short, or no ``\\x7fELF`` magic)."""


@record
class ElfInfo(Record):
    """The parts of an ELF header that decide whether this process can load the file.

    Attributes
    ----------
    bits : int
        32 or 64 (``EI_CLASS``).
    little_endian : bool
        ``EI_DATA``.
    machine : int
        ``e_machine``.
    flags : int
        ``e_flags`` (the float ABI, on 32-bit ARM).
    """

    # (A lazy dataclass (opaque_ops._records): this module runs at every
    # start-up, where a NamedTuple cost 0.1 ms to define and a dataclass
    # four times that.)

    bits: int
    little_endian: bool
    machine: int
    flags: int

    def __init__(self, bits: int, little_endian: bool, machine: int, flags: int):
        self.bits = bits
        self.little_endian = little_endian
        self.machine = machine
        self.flags = flags

    @property
    def arch(self) -> str:
        """The architecture's name as ``host_arch()`` spells it (``"armv7l"`` for 32-bit ARM)."""
        name = _MACHINES.get(self.machine, f"ELF machine {self.machine:#x}")
        if self.machine == _EM_ARM and self.flags & _EF_ARM_ABI_FLOAT_SOFT:
            return "armel (soft-float)"
        return name

    def loadable_by(self, process: ElfInfo) -> bool:
        """True if a process built as ``process`` can map this file."""
        if (self.bits, self.little_endian, self.machine) != (process.bits, process.little_endian, process.machine):
            return False
        if self.machine == _EM_ARM:
            hard = _EF_ARM_ABI_FLOAT_HARD | _EF_ARM_ABI_FLOAT_SOFT
            return (self.flags & hard) == (process.flags & hard) or not (self.flags & hard)
        return True


def _header(f) -> tuple[ElfInfo, bytes, str]:
    head = f.read(64)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise NotElfError("not an ELF file")
    bits = 32 if head[4] == 1 else 64
    e = "<" if head[5] == 1 else ">"
    machine = struct.unpack_from(e + "H", head, 18)[0]
    flags = struct.unpack_from(e + "I", head, 36 if bits == 32 else 48)[0]
    return ElfInfo(bits, e == "<", machine, flags), head, e


def read(path: str | os.PathLike) -> ElfInfo:
    """Return the :class:`ElfInfo` of ``path``.

    Raises
    ------
    OSError
        The file cannot be read.
    NotElfError
        It is not an ELF file.
    """
    with open(path, "rb") as f:
        return _header(f)[0]


def _sections(f, head: bytes, bits: int, e: str) -> list[tuple[int, int, int, int, int]]:
    """``(sh_type, sh_offset, sh_size, sh_link, sh_entsize)`` of every section."""
    if bits == 32:
        shoff = struct.unpack_from(e + "I", head, 32)[0]
        shentsize, shnum = struct.unpack_from(e + "HH", head, 46)
        fmt, fields = e + "IIIIIIIIII", (1, 4, 5, 6, 9)
    else:
        shoff = struct.unpack_from(e + "Q", head, 40)[0]
        shentsize, shnum = struct.unpack_from(e + "HH", head, 58)
        fmt, fields = e + "IIQQQQIIQQ", (1, 4, 5, 6, 9)
    if not shoff or not shnum or shentsize < struct.calcsize(fmt) or shnum > 65535:
        return []
    f.seek(shoff)
    table = f.read(shnum * shentsize)
    out = []
    for i in range(len(table) // shentsize):
        s = struct.unpack_from(fmt, table, i * shentsize)
        out.append(tuple(s[k] for k in fields))
    return out


def _read_at(f, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def _cstr(blob: bytes, offset: int) -> bytes:
    end = blob.find(b"\0", offset)
    return blob[offset : end if end >= 0 else len(blob)]


def _glibc_version(name: bytes) -> tuple[int, ...] | None:
    """``(x, y)`` or ``(x, y, z)`` of a ``GLIBC_x.y[.z]`` version name; None for any other name.

    By hand, not a regular expression: this module runs at every start-up
    (the runtime's and each kernel file's checks), where compiling one cost
    0.1 ms, and the rule is this short.
    """
    if not name.startswith(b"GLIBC_"):
        return None
    parts = name[6:].split(b".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def glibc_needed(path: str | os.PathLike) -> tuple[int, ...] | None:
    """The newest ``GLIBC_x.y`` symbol version ``path`` needs, or None if it needs none.

    Read from the ``.gnu.version_r`` (verneed) section, which lists, per
    needed library, the symbol versions the dynamic loader must find.
    """
    with open(path, "rb") as f:
        info, head, e = _header(f)
        sections = _sections(f, head, info.bits, e)
        best: tuple[int, ...] | None = None
        for sh_type, offset, size, link, _ in sections:
            if sh_type != _SHT_GNU_VERNEED or link >= len(sections):
                continue
            data = _read_at(f, offset, min(size, 1 << 20))
            # The string table can be megabytes (C++ names): read only the names used.
            str_offset, str_size = sections[link][1], sections[link][2]
            pos = 0
            for _need in range(1000):  # bounded: a corrupt file cannot loop forever
                if pos + 16 > len(data):
                    break
                _ver, cnt, _file, aux, nxt = struct.unpack_from(e + "HHIII", data, pos)
                apos = pos + aux
                for _k in range(min(cnt, 1000)):
                    if apos + 16 > len(data):
                        break
                    _hash, _flags, _other, name, anext = struct.unpack_from(e + "IHHII", data, apos)
                    v = _glibc_version(_cstr(_read_at(f, str_offset + name, 32), 0)) if name < str_size else None
                    if v is not None:
                        best = v if best is None or v > best else best
                    if not anext:
                        break
                    apos += anext
                if not nxt:
                    break
                pos += nxt
        return best


def _dynamic_symbols(path: str | os.PathLike, defined: bool) -> set[str]:
    with open(path, "rb") as f:
        info, head, e = _header(f)
        sections = _sections(f, head, info.bits, e)
        names: set[str] = set()
        for sh_type, offset, size, link, entsize in sections:
            if sh_type != _SHT_DYNSYM or link >= len(sections):
                continue
            data = _read_at(f, offset, size)
            strtab = _read_at(f, sections[link][1], sections[link][2])
            if info.bits == 32:
                fmt, name_i, shndx_i = e + "IIIBBH", 0, 5
            else:
                fmt, name_i, shndx_i = e + "IBBHQQ", 0, 3
            step = entsize or struct.calcsize(fmt)
            for pos in range(0, len(data) - step + 1, step):
                sym = struct.unpack_from(fmt, data, pos)
                if (sym[shndx_i] != 0) == defined and sym[name_i]:
                    names.add(_cstr(strtab, sym[name_i]).decode("utf-8", "replace"))
        return names


def defined_symbols(path: str | os.PathLike) -> set[str]:
    """Names of the functions and objects ``path`` exports (its defined dynamic symbols).

    This is what ``nm -D --defined-only`` lists, without symbol versions.  It
    reads the whole ``.dynsym`` table: for tests and diagnostics, not for the
    load path (``dlsym`` answers there).
    """
    return _dynamic_symbols(path, defined=True)


def undefined_symbols(path: str | os.PathLike) -> set[str]:
    """Names ``path`` expects the process to provide (``nm -D --undefined-only``)."""
    return _dynamic_symbols(path, defined=False)


def needed_libraries(path: str | os.PathLike) -> list[str]:
    """The ``DT_NEEDED`` entries of ``path``'s ``.dynamic`` section (``readelf -d``), in order."""
    with open(path, "rb") as f:
        info, head, e = _header(f)
        sections = _sections(f, head, info.bits, e)
        fmt = e + ("iI" if info.bits == 32 else "qQ")
        step = struct.calcsize(fmt)
        names: list[str] = []
        for sh_type, offset, size, link, _ in sections:
            if sh_type != _SHT_DYNAMIC or link >= len(sections):
                continue
            data = _read_at(f, offset, min(size, 1 << 20))
            strtab = _read_at(f, sections[link][1], min(sections[link][2], 1 << 20))
            for pos in range(0, len(data) - step + 1, step):
                tag, value = struct.unpack_from(fmt, data, pos)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    names.append(_cstr(strtab, value).decode("utf-8", "replace"))
        return names


def dynamic_strings(path: str | os.PathLike) -> bytes:
    """The string tables the ``.dynamic`` and ``.dynsym`` sections name, joined by NUL bytes.

    Every ``DT_NEEDED`` entry (:func:`needed_libraries`) and every dynamic
    symbol name (:func:`undefined_symbols`) of ``path`` is a string of these
    tables, so a name that is not a substring of this is neither: a cheap
    first test before parsing the symbol table (see
    :func:`opaque_ops.ops.sanitizers.missing_runtime`).
    """
    with open(path, "rb") as f:
        info, head, e = _header(f)
        sections = _sections(f, head, info.bits, e)
        links = sorted(
            {
                link
                for sh_type, _, _, link, _ in sections
                if sh_type in (_SHT_DYNAMIC, _SHT_DYNSYM) and link < len(sections)
            }
        )
        return b"\0".join(_read_at(f, sections[k][1], sections[k][2]) for k in links)


@lru_cache(maxsize=1)
def process() -> ElfInfo | None:
    """The :class:`ElfInfo` of this process's executable (what it can load), or None if unreadable."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            return read(exe)
        except (OSError, ValueError):
            continue
    return None


def running_glibc() -> tuple[int, ...] | None:
    """The glibc version of this process (``confstr(_CS_GNU_LIBC_VERSION)``), or None (not glibc)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        return None
    name, _, version = text.strip().partition(" ")
    parts = version.split(".")
    if name != "glibc" or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in v)


# What users meet most: the glibc of the systems a Raspberry Pi runs, and Debian/Ubuntu.
GLIBC_OF_SYSTEMS = (
    "Debian 11 / Raspberry Pi OS bullseye ship glibc 2.31, Ubuntu 22.04 ships 2.35, "
    "Debian 12 / Raspberry Pi OS bookworm ships 2.36"
)


def load_problem(path: str | os.PathLike) -> str | None:
    """Why this process cannot load the shared library ``path``, or None if nothing is known against it.

    Checks the ELF class, byte order and machine (and the float ABI on
    32-bit ARM) against the running executable, and the newest ``GLIBC_*``
    version the file needs against the running glibc.  A missing file or a
    non-ELF file is left to ``dlopen``, whose message says so.
    """
    try:
        lib = read(path)
    except (OSError, ValueError):
        return None
    proc = process()
    if proc is not None and not lib.loadable_by(proc):
        return (
            f"is built for {lib.arch}, but this machine is {proc.arch}: "
            f"this Python is a {proc.bits}-bit {proc.arch} process and loads only {proc.bits}-bit {proc.arch} code"
        )
    need = glibc_needed(path)
    have = running_glibc()
    if need is not None and have is not None and need > have:
        return (
            f"needs glibc {_dotted(need)} or newer (it uses GLIBC_{_dotted(need)} symbols), "
            f"but this system has glibc {_dotted(have)}; {GLIBC_OF_SYSTEMS}"
        )
    return None


_PT_LOAD, _PT_DYNAMIC = 1, 2


def damage(path: str | os.PathLike) -> str | None:
    """Why the ELF file ``path`` is truncated or damaged, or None if its structure holds.

    ``dlopen`` maps every ``PT_LOAD`` segment with ``mmap``; a segment whose
    bytes lie past the end of the file maps pages with no file behind them,
    and the first touch kills the process with SIGBUS (an interrupted copy or
    download of a ``.so``).  So the program header table, every loaded
    segment (``p_offset + p_filesz``), the dynamic segment and the section
    header table must lie inside the file.  A missing or non-ELF file is left
    to ``dlopen``, whose message says so.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            try:
                info, head, e = _header(f)
            except NotElfError:
                return None
            if len(head) < (52 if info.bits == 32 else 64):
                return f"its ELF header is cut short ({size} bytes)"
            if info.bits == 32:
                phoff, shoff = struct.unpack_from(e + "II", head, 28)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", head, 42)
                fmt, want = e + "IIIIIIII", 32  # p_type p_offset p_vaddr p_paddr p_filesz ...
                fields = (0, 1, 4)
            else:
                phoff, shoff = struct.unpack_from(e + "QQ", head, 32)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", head, 54)
                fmt, want = e + "IIQQQQQQ", 56  # p_type p_flags p_offset p_vaddr p_paddr p_filesz ...
                fields = (0, 2, 5)
            if not phnum or not phoff:
                return "it has no program headers (not a shared library, or damaged)"
            if phentsize < want:
                return f"its program header entries are {phentsize} bytes, less than the {want} the format needs"
            if phoff + phnum * phentsize > size:
                return (
                    f"its program header table (offset {phoff}, {phnum} entries) ends past "
                    f"the end of the {size}-byte file"
                )
            table = _read_at(f, phoff, phnum * phentsize)
            loads = 0
            for i in range(phnum):
                entry = struct.unpack_from(fmt, table, i * phentsize)
                p_type, p_offset, p_filesz = (entry[k] for k in fields)
                if p_type not in (_PT_LOAD, _PT_DYNAMIC):
                    continue
                loads += p_type == _PT_LOAD
                if p_offset + p_filesz > size:
                    kind = "loadable segment" if p_type == _PT_LOAD else "dynamic segment"
                    return (
                        f"its {kind} #{i} (bytes {p_offset}..{p_offset + p_filesz}) ends past "
                        f"the end of the {size}-byte file"
                    )
            if not loads:
                return "it has no loadable segment"
            if shoff and shnum and shoff + shnum * shentsize > size:
                return (
                    f"its section header table (offset {shoff}, {shnum} entries) ends past "
                    f"the end of the {size}-byte file"
                )
            return None
    except OSError:
        return None
