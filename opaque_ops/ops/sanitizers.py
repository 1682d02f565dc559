"""Sanitizer-built kernel libraries: refused before ``dlopen`` when their runtime is missing.

``dlopen`` of a library built with ``-fsanitize=address`` whose runtime was not
preloaded does not fail cleanly: the ASan runtime prints one line and calls
``exit(1)``, which under pytest's output capture looks like a silent exit.
ThreadSanitizer and LeakSanitizer libraries fail with "cannot allocate memory
in static TLS block".  So the library's ELF file is read first
(``_native.elf``: its ``DT_NEEDED`` entries for gcc's builds, its undefined
``__asan_*`` symbols for clang's) and, when the runtime is not in the process,
the error gives the exact ``LD_PRELOAD`` line to use.
"""

from __future__ import annotations

import ctypes
import os

from .._native import elf

# Sanitizer runtimes that must be in the process before the library is
# loaded: (sanitizer, runtime library prefix, clang's runtime, the prefix of
# the symbols clang leaves undefined, a symbol the runtime defines, extra
# environment for the suggested command line).
# UBSan is absent on purpose: its runtime loads fine through dlopen.
_SANITIZERS = [
    (
        "AddressSanitizer",
        "libasan.so",
        "libclang_rt.asan-{arch}.so",
        "__asan_",
        "__asan_init",
        "ASAN_OPTIONS=detect_leaks=0 ",
    ),
    ("ThreadSanitizer", "libtsan.so", "libclang_rt.tsan-{arch}.so", "__tsan_", "__tsan_init", ""),
    ("LeakSanitizer", "liblsan.so", "libclang_rt.lsan-{arch}.so", "__lsan_", "__lsan_init", ""),
]


def _in_process(symbol: str) -> bool:
    """True if ``symbol`` is already defined in this process's global scope (e.g. by LD_PRELOAD)."""
    try:
        ctypes.CDLL(None)[symbol]
    except (AttributeError, OSError):
        return False
    return True


def _locate(name: str, compilers: tuple[str, ...]) -> str | None:
    """The full path of a runtime library: ask the compiler, then the loader's usual directories."""
    # Imported here: only a sanitizer build whose runtime is missing gets
    # here, and every library load imports this module.
    import shutil
    import subprocess

    for cc in compilers:
        exe = shutil.which(cc)
        if exe is None:
            continue
        try:
            out = subprocess.run(
                [exe, f"-print-file-name={name}"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if os.path.isabs(out) and os.path.exists(out):
            return os.path.normpath(out)
    for d in ("/lib", "/usr/lib", "/lib64", "/usr/lib64"):
        for sub in ("", "x86_64-linux-gnu", "aarch64-linux-gnu", "arm-linux-gnueabihf"):
            p = os.path.join(d, sub, name)
            if os.path.exists(p):
                return p
    return None


def missing_runtime(path: str, arch: str) -> str | None:
    """Explain how to preload the sanitizer runtime ``path`` needs, or None if nothing is missing.

    gcc links the runtime as a ``DT_NEEDED`` library; clang leaves its
    ``__asan_*`` (etc.) symbols undefined for the executable to provide.
    A file that is not ELF, or unreadable, is left to ``dlopen``.
    """
    try:
        # A sanitizer's runtime name or symbol prefix must appear in the
        # dynamic string tables to be needed: most libraries are decided
        # here, without parsing the symbol table (0.1 ms a library, at every
        # kernel load of every start-up).
        strings = elf.dynamic_strings(path)
        if not any(s[1].encode() in strings or s[3].encode() in strings for s in _SANITIZERS):
            return None
        needed_libs = elf.needed_libraries(path)
        undefined = elf.undefined_symbols(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    for title, prefix, clang_rt, symbols, init_symbol, extra_env in _SANITIZERS:
        needed = next((n for n in needed_libs if n.startswith(prefix)), None)
        clang_style = needed is None and any(s.startswith(symbols) for s in undefined)
        if needed is None and not clang_style:
            continue
        if _in_process(init_symbol):
            return None
        if needed is not None:
            lib = _locate(needed, ("gcc", "cc")) or f"$(gcc -print-file-name={needed})"
        else:
            rt = clang_rt.format(arch=arch)
            lib = _locate(rt, ("clang",)) or f"$(clang -print-file-name={rt})"
        return (
            f"{path} is built with {title}, whose runtime must be loaded before anything else in "
            f"the process and is not (loading the library now could end the process with no "
            f"Python error). Run Python with the runtime preloaded:\n"
            f"    LD_PRELOAD={lib} {extra_env}python ..."
        )
    return None
