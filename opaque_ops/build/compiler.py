"""The one build path for kernel libraries: ``compile_ops``, ``build.py`` and the wheels.

Every kernel library, whether compiled on the fly by ``compile_ops`` (and
cached), written by ``build.py`` / ``opaque-ops build`` (also cross-built for
aarch64), or prebuilt for the wheels, comes out of :func:`build`:

* cffi drives the compiler, in a child process (``_buildchild.py``): the
  caller's file descriptors, working directory and environment are never
  touched, so any number of threads may compile at once;
* every source file is its own translation unit, linked with the runtime glue
  (``c/src/opaque_ops_runtime.c``) into a plain shared object that is linked to
  no TFLite path and loads in any process that loaded the runtime first;
* ``-z defs`` makes the linker list every undefined symbol: the ``TfLite*``
  ones bind to the runtime at load time, and any other one (a misspelt
  function) is a build error here rather than a ``dlopen`` failure later.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from .. import _digest
from .._records import FACTORY, Record, field, record
from ..errors import CompileError
from . import paths as _paths
from . import store as _cache
from .machine import host_arch as host_arch  # (its home was here)

if TYPE_CHECKING:
    from pathlib import Path

# Part of every cache key: bump it when what a build produces changes.
BUILD_PATH_VERSION = "2"

ENV_CACHE = _cache.ENV_CACHE

# The patterns are compiled at their first use (re's own cache keeps them):
# compiling all six at import cost 0.9 ms of every start that loads a kernel
# or the fast calls module from the compile cache, which never needs them.
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*\Z"
# gcc/clang diagnostics: "file:line:col: error: message" (col optional).
_DIAG = r"^(?P<loc>[^\s:][^:]*:\d+(?::\d+)?): (?P<kind>(?:fatal )?error|warning): (?P<msg>.*)$"
# GNU ld: "undefined reference to `name'"; lld: "undefined symbol: name".
# (GNU ld ends a run of warnings for one name with "more undefined references to `name' follow".)
_UNDEF = r"undefined (?:references? to [`']|symbol: )([A-Za-z_][A-Za-z0-9_.@$]*)"
_RUNTIME_SYMBOL = r"TfLite[A-Za-z0-9_]*\Z"
# clang leaves its sanitizer runtime's symbols for the (preloaded) runtime.
_SANITIZER_SYMBOL = r"__(?:asan|ubsan|tsan|lsan|msan|sanitizer)_[A-Za-z0-9_]*\Z"
# A CPython extension leaves the C API's symbols for the interpreter that imports it.
_PYTHON_SYMBOL = r"_?(?:Py|PY_)[A-Za-z0-9_]*\Z"

# Flags every kernel library is built with.  -Bsymbolic: each library's glue
# calls its own copy even if another library exports the same names.
# -Werror=implicit-function-declaration: a misspelt API name must fail here,
# not as an "undefined symbol" when the library is loaded.
# -ffp-contract=off keeps float results identical across x86-64 and AArch64
# (which would otherwise fuse multiply-adds).
BASE_CFLAGS = [
    "-std=gnu11",
    "-fPIC",
    "-Wall",
    "-Wno-unused-function",
    "-ffp-contract=off",
    "-Werror=implicit-function-declaration",
]
BASE_LDFLAGS = ["-Wl,-Bsymbolic"]
# The TfLite* symbols are undefined on purpose (they bind to the runtime at
# load time).  -z defs + warn-unresolved makes the linker list every
# undefined symbol as a warning, so any other one is caught by build().
CHECK_LDFLAGS = ["-Wl,-z,defs", "-Wl,--warn-unresolved-symbols"]
LIBRARIES = ["m", "dl"]

# Paths are str on the way to a cache hit (a source checkout's start-up loads
# every kernel through it, and pathlib would cost that start-up 2-3 ms);
# build() itself, which runs the compiler, uses pathlib.
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


def cache_dir(override: str | os.PathLike | None = None) -> str:
    """Return the compile cache directory: argument, ``$OPAQUE_OPS_CACHE_DIR``, or the user cache."""
    return _cache.default_dir_str(override)


def which(command: str) -> str | None:
    """What ``shutil.which(command)`` returns on POSIX, without importing :mod:`shutil`.

    The compile cache's lookup runs at every process's start-up where kernels
    are compiled on the machine, and :mod:`shutil` (with the compression
    modules it imports) cost two milliseconds of it.  The same rules: a
    command with a directory part is checked as is; otherwise each directory
    of ``$PATH`` (or the system's default path) in turn, each once, for an
    existing executable that is not a directory.
    """

    def runnable(path: str) -> bool:
        return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)

    if os.path.dirname(command):
        return command if runnable(command) else None
    search = os.environ.get("PATH")
    if search is None:
        try:
            search = os.confstr("CS_PATH")
        except (AttributeError, ValueError):  # no confstr, or no CS_PATH
            search = os.defpath
    if not search:
        return None
    seen = set()
    for d in search.split(os.pathsep):
        if d in seen:
            continue
        seen.add(d)
        path = os.path.join(d, command)
        if runnable(path):
            return path
    return None


def native_compiler() -> list[str]:
    """The command of this machine's C compiler: ``$CC``, else cc, gcc or clang.

    Raises
    ------
    CompileError
        ``$CC`` names a missing program, or no compiler is installed.
    """
    env_cc = os.environ.get("CC")
    if env_cc:
        parts = env_cc.split()
        if which(parts[0]) is None:
            raise CompileError(f"$CC={env_cc!r} was not found on PATH")
        return parts
    for name in ("cc", "gcc", "clang"):
        if which(name):
            return [name]
    raise CompileError("no C compiler found (looked for $CC, cc, gcc, clang); install one, e.g. `apt-get install gcc`")


# The compiler identities asked in this process, by stamp (see compiler_identity).
_identities: dict[tuple, str] = {}


def _ask_identity(command: list[str], exe: str) -> tuple[str, bool]:
    """``(identity, whether the compiler answered both questions)``; see :func:`compiler_identity`."""
    import subprocess

    answered = True

    def ask(*args: str) -> str:
        nonlocal answered
        try:
            out = subprocess.run([*command, *args], capture_output=True, text=True, errors="replace", timeout=60)
        except (OSError, subprocess.SubprocessError):
            answered = False
            return "?"
        lines = out.stdout.strip().splitlines()
        answered = answered and out.returncode == 0 and bool(lines)
        return (lines or ["?"])[0]

    return f"{exe} | {ask('--version')} | {ask('-dumpmachine')}", answered


def compiler_identity(command: list[str], cache: _cache.Cache | None = None) -> str:
    """The compiler's resolved path, ``--version`` line and target (part of the cache key).

    Asking the compiler takes two child processes (milliseconds), so the
    answer is kept per process, and with ``cache`` also in that cache
    directory for later processes, both under the same stamp: the command,
    the resolved executable and its size and modification time.  Upgrading
    or switching the compiler changes the stamp (a new file, or an
    alternatives link that now resolves elsewhere), and so asks again.  An
    answer the compiler did not give in full (a failure, a timeout) is not
    kept on disk.
    """
    exe = which(command[0])
    if exe is None:
        raise CompileError(f"compiler {command[0]!r} was not found on PATH")
    real = os.path.realpath(exe)
    st = os.stat(real)
    stamp = (tuple(command), real, st.st_mtime_ns, st.st_size)
    identity = _identities.get(stamp)
    if identity is not None:
        return identity
    note = "compiler-" + _digest.of_bytes(repr(stamp).encode())[:32]
    kept = cache.read_note(note) if cache is not None else None
    if kept is not None and kept.startswith(f"{real} | "):
        identity = kept
    else:
        identity, answered = _ask_identity(command, real)
        if answered and cache is not None:
            cache.write_note(note, identity)
    _identities[stamp] = identity
    return identity


def read_source(source: str | os.PathLike) -> tuple[str, str, str | None]:
    """Return ``(text, display name, path or None)`` for a path or a string of C.

    A ``str`` naming an existing file is a path, whatever characters it holds;
    one that looks like a file name (one line, no braces or semicolons) but
    names no file is an error; anything else is C text.
    """
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _is_file(source)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise CompileError(f"kernel source {path!r} does not exist; pass a path to a .c file or the C text itself")
        try:
            text = _read_text(path)
        except UnicodeDecodeError as exc:
            # A model, a built library or an object file passed where the C goes.
            raise CompileError(
                f"kernel source {path!r} is not a text file (byte {exc.start} is not {exc.encoding}); "
                "pass a path to a .c file or the C text itself (a model goes to Interpreter(model_path=...), "
                "a built library to load_ops)"
            ) from None
        except OSError as exc:
            raise CompileError(f"cannot read kernel source {path!r}: {exc.strerror or exc}") from None
        if "\0" in text:  # decodes, but no C source holds a NUL byte
            raise CompileError(
                f"kernel source {path!r} is not a text file (it holds NUL bytes); pass a path to a .c file "
                "or the C text itself"
            )
        return text, _paths.pure(path), os.path.realpath(path)
    if not isinstance(source, str):
        raise TypeError(f"source must be a path or a str of C code, not {type(source).__name__}")
    if "\n" not in source and "{" not in source and ";" not in source and len(source) < 4096:
        raise CompileError(f"kernel source {source!r} does not exist; pass a path to a .c file or the C text itself")
    return source, "<string>", None


def _is_file(text: str) -> bool:
    try:
        return len(text) < 4096 and os.path.isfile(text)
    except (OSError, ValueError):
        return False


def factory_lines(ops: dict[str, str] | None) -> str:
    """C lines exporting guide-style factories under the model's op names."""
    if not ops:
        return ""
    lines = ['#include "opaque_ops.h"']
    for model_name, func in sorted(ops.items()):
        if not isinstance(func, str) or not re.match(_IDENT, func):
            raise CompileError(f"ops[{model_name!r}] must name a C function, got {func!r}")
        if not model_name or '"' in model_name or "\\" in model_name or "\n" in model_name:
            raise CompileError(f"invalid op name {model_name!r}")
        lines.append(f'OPAQUE_OP_FACTORY("{model_name}", {func});')
    return "\n".join(lines) + "\n"


def compiler_output_summary(output: str, limit: int = 20) -> str:
    """The compiler's ``file:line: message`` lines, errors first."""
    errors, others = [], []
    for line in output.splitlines():
        m = re.match(_DIAG, line.strip())
        if m:
            (errors if "error" in m.group("kind") else others).append(line.strip())
        elif "undefined reference" in line or "ld:" in line or "collect2" in line:
            errors.append(line.strip())
    picked = errors or others or [l for l in output.splitlines() if l.strip()][-limit:]
    return "\n".join(picked[:limit])


def split_link_output(output: str, sanitized: bool = False, extension: bool = False) -> tuple[str, list[str]]:
    """Drop the expected undefined-TfLite noise; return (remaining output, other undefined names)."""
    kept, missing = [], []
    for line in output.splitlines():
        m = re.search(_UNDEF, line)
        if m:
            name = m.group(1)
            if (
                re.match(_RUNTIME_SYMBOL, name)
                or (sanitized and re.match(_SANITIZER_SYMBOL, name))
                or (extension and re.match(_PYTHON_SYMBOL, name))
            ):
                continue
            if name not in missing:
                missing.append(name)
        elif "in function `" in line or "in function '" in line or line.strip().startswith(">>>"):
            continue  # context lines of the warnings above
        kept.append(line)
    return "\n".join(kept), missing


# Header digests computed in this process, by their files' stamps (see _headers_digest).
_header_digests: dict[tuple, str] = {}


def _headers_digest(dirs) -> str:
    """A digest of the ``.h`` files under ``dirs`` (names and bytes), part of a kernel's cache key.

    Each file is read and hashed once per process: a later call whose files
    all have the same size and modification time (the rule CPython uses for
    its ``.pyc`` files) reuses the digest.  Loading the six bundled MediaPipe
    kernels asked for it six times, at every start-up.
    """
    files = []
    for d in dirs:
        if not os.path.isdir(d):
            continue
        base = _paths.pure(os.fspath(d))
        for parts in sorted(_paths.files_named(os.fspath(d), ".h"))[:2000]:
            files.append(os.path.join(base, *parts))
    stamps = []
    for p in files:
        try:
            st = os.stat(p)
        except OSError:
            stamps = None  # a file that vanished: no stamp, read (and fail) as before
            break
        stamps.append((p, st.st_size, st.st_mtime_ns))
    key = tuple(stamps) if stamps is not None else None
    if key is not None and key in _header_digests:
        return _header_digests[key]
    h = _digest.new()
    for p in files:
        h.update(p.encode())
        with open(p, "rb") as f:
            h.update(f.read())
    digest = h.hexdigest()
    if key is not None:
        _header_digests[key] = digest
    return digest


@record
class BuildSpec(Record):
    """Everything one kernel library is built from.

    Attributes
    ----------
    compiler : list of str
        The compiler command (native or cross).
    sources : list of Path
        Translation units from files, compiled at their own paths.
    text : str, optional
        C text given as a string: one more translation unit.
    ops : dict, optional
        ``{model op name: factory function}`` exported in a generated unit.
    include_dirs, defines, cflags
        ``-I`` directories, ``(name, value or None)`` macros, extra compiler flags.
    debug : bool
        ``-O0 -g`` instead of ``-O2``.
    sanitize : list of str
        Sanitizers (``-fsanitize=...``, at compile and link time).
    label : str
        What the error message calls the build ("compiling atan.c").
    extension : bool
        Build a CPython extension module for the running Python (the fast
        calls, ``c/src/fastcalls.c``) instead of a kernel library: no runtime
        glue, Python's and numpy's headers on the include path, the C API's
        symbols left for the importing interpreter.  Keyed by the Python and
        numpy versions rather than by a digest of their (many) headers.
    python_include : list of str, optional
        For an extension built for another Python (a cross build): the
        directories of that Python's and numpy's headers, instead of the
        running Python's.
    """

    # A dataclass with a written __init__ (opaque_ops._records): a source
    # checkout's start-up builds these for the compile cache's keys.
    compiler: list[str]
    sources: list[Path] = field(default_factory=list)
    text: str | None = None
    ops: dict[str, str] | None = None
    include_dirs: list[Path] = field(default_factory=list)
    defines: list[tuple[str, str | None]] = field(default_factory=list)
    cflags: list[str] = field(default_factory=list)
    debug: bool = False
    sanitize: list[str] = field(default_factory=list)
    label: str = "building the kernel library"
    extension: bool = False
    python_include: list[str] | None = None

    def __init__(
        self,
        compiler: list[str],
        sources: list[Path] = FACTORY,
        text: str | None = None,
        ops: dict[str, str] | None = None,
        include_dirs: list[Path] = FACTORY,
        defines: list[tuple[str, str | None]] = FACTORY,
        cflags: list[str] = FACTORY,
        debug: bool = False,
        sanitize: list[str] = FACTORY,
        label: str = "building the kernel library",
        extension: bool = False,
        python_include: list[str] | None = None,
    ):
        self.compiler = compiler
        self.sources = [] if sources is FACTORY else sources
        self.text = text
        self.ops = ops
        self.include_dirs = [] if include_dirs is FACTORY else include_dirs
        self.defines = [] if defines is FACTORY else defines
        self.cflags = [] if cflags is FACTORY else cflags
        self.debug = debug
        self.sanitize = [] if sanitize is FACTORY else sanitize
        self.label = label
        self.extension = extension
        self.python_include = python_include

    def compile_flags(self) -> list[str]:
        flags = list(BASE_CFLAGS) + (["-O0", "-g"] if self.debug else ["-O2"])
        if self.sanitize:
            flags += ["-fsanitize=" + ",".join(self.sanitize), "-fno-omit-frame-pointer", "-g"]
        return flags + list(self.cflags)

    def link_flags(self) -> list[str]:
        flags = list(BASE_LDFLAGS) + CHECK_LDFLAGS
        if self.sanitize:
            flags.append("-fsanitize=" + ",".join(self.sanitize))
        return flags

    def all_include_dirs(self) -> list[str]:
        dirs = [_paths.include_dir_str()]
        for p in self.sources:
            d = os.path.dirname(os.path.realpath(p))
            if d not in dirs:
                dirs.append(d)
        return dirs + [str(d) for d in self.include_dirs]

    def python_include_dirs(self) -> list[str]:
        """Python's and numpy's headers, for an extension build (else none)."""
        if not self.extension:
            return []
        if self.python_include is not None:
            return list(self.python_include)
        import sysconfig

        import numpy

        return [sysconfig.get_paths()["include"], numpy.get_include()]

    def key(self) -> str:
        """Digest of everything the build reads except the compiler (see :func:`compiler_identity`)."""
        if self.extension:
            return self._extension_key()
        parts = [
            BUILD_PATH_VERSION,
            self.text or "",
            factory_lines(self.ops),
            _read_text(_paths.runtime_source_str()),
            repr(self.defines),
            repr(self.compile_flags()),
            repr(self.link_flags()),
            repr(self.all_include_dirs()),
            _headers_digest(self.all_include_dirs()),
        ]
        for p in self.sources:
            parts += [os.path.realpath(p), _read_text(p)]
        return _parts_digest(parts)

    def _extension_key(self) -> str:
        # Looked up at the first Interpreter of every process, so it reads only
        # what it must: the sources, the flags, and which Python and numpy the
        # module is for (their versions and places stand for their headers,
        # which would take milliseconds to hash, as would loading sysconfig).
        from importlib.machinery import EXTENSION_SUFFIXES

        import numpy

        parts = [
            BUILD_PATH_VERSION,
            "extension",
            self.text or "",
            repr(self.defines),
            repr(self.compile_flags()),
            repr(self.link_flags()),
            sys.version,
            sys.base_prefix,
            EXTENSION_SUFFIXES[0],
            numpy.__version__,
            os.path.dirname(numpy.__file__),
        ]
        if self.python_include is not None:
            parts.append(repr(self.python_include))
        for p in self.sources:
            # (abspath, not resolve: the sources are c_dir()'s, resolved once.)
            with open(p, "rb") as f:
                parts += [os.path.abspath(p), f.read()]
        return _parts_digest(parts)


def _read_text(path) -> str:
    with open(path) as f:  # (the locale's encoding, as Path.read_text reads it: the keys stay the same)
        return f.read()


def _parts_digest(parts) -> str:
    h = _digest.new()
    for part in parts:
        # (A path may hold any bytes: Python keeps those that are not UTF-8 as surrogates.)
        h.update(part if isinstance(part, bytes) else part.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()


def build(spec: BuildSpec, workdir: str | os.PathLike, *, verbose: bool = False) -> tuple[Path, str]:
    """Build ``spec`` inside ``workdir`` (a private, empty directory); return ``(library, log)``.

    The library is written as ``workdir/library.so``; the caller moves it
    where it belongs.  ``log`` is the compiler's output (warnings; with
    ``verbose``, the commands too).

    Raises
    ------
    CompileError
        The compiler failed (the message holds one ``file:line:col: error``
        line per diagnostic), or the library would have undefined symbols
        other than the runtime's.
    """
    from pathlib import Path  # (the build path: a cache hit never gets here)

    work = Path(workdir)
    sources = [os.path.realpath(p) for p in spec.sources]
    if spec.text is not None:
        text_c = work / "kernel_source.c"
        text_c.write_text(f'#line 1 "<string>"\n{spec.text}\n')
        sources.append(str(text_c))
    factories = "" if spec.extension else factory_lines(spec.ops)
    if factories:
        # A translation unit of its own, so the factories need prototypes
        # here: they must have external linkage in the user's file.
        protos = "".join(f"TfLiteOperator* {func}(void);\n" for func in sorted(set(spec.ops.values())))
        gen = work / "opaque_ops_factories.c"
        gen.write_text('#include "opaque_ops.h"\n' + protos + '#line 1 "<opaque_ops: ops=...>"\n' + factories)
        sources.append(str(gen))
    if not spec.extension:
        sources.append(_paths.runtime_source_str())
    output = work / "library.so"
    request = {
        "cc": list(spec.compiler),
        "sources": sources,
        "include_dirs": spec.all_include_dirs() + spec.python_include_dirs(),
        "define_macros": [list(m) for m in spec.defines],
        "extra_compile_args": spec.compile_flags(),
        "extra_link_args": spec.link_flags(),
        "libraries": LIBRARIES,
        "output": str(output),
        "verbose": verbose,
    }
    import json  # (here, with subprocess: a start-up that finds its builds cached runs no compiler)
    import subprocess

    # run_path, not the file as a script: the package directory must not be
    # put on the child's sys.path (it holds modules named like others').
    boot = f"import runpy; runpy.run_path({_CHILD!r}, run_name='__main__')"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", boot],
            input=json.dumps(request),
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",  # (the compiler quotes paths, which may hold any bytes)
        )
    except OSError as exc:
        raise CompileError(f"{spec.label} failed: could not start the build process: {exc}") from None
    log = proc.stdout
    try:
        result = json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        result = {"ok": False, "error": f"the build process exited with status {proc.returncode}"}
    text, missing = split_link_output(log, sanitized=bool(spec.sanitize), extension=spec.extension)
    if not result.get("ok"):
        summary = compiler_output_summary(text) or text.strip() or result.get("error", "")
        raise CompileError(f"{spec.label} failed:\n{summary}", output=log)
    if missing:
        refs = [l.strip() for l in text.splitlines() if re.search(_UNDEF, l)]
        hint = ""
        if spec.ops and set(missing) & set(spec.ops.values()):
            hint = " (a factory named in ops= must be defined in the sources, and not be static)"
        raise CompileError(
            f"{spec.label} failed: undefined symbol(s) {', '.join(missing)}{hint}: neither defined "
            "in the sources nor provided by the TFLite runtime, libc or libm, so the library "
            "would fail to load:\n" + "\n".join(refs[:20]),
            output=log,
        )
    return output, text.strip()


def cached_build(spec: BuildSpec, cache_root: str | os.PathLike | None = None) -> str | None:
    """The verified cache entry for ``spec`` built by any compiler, or None; never compiles.

    Cheaper than :func:`compile_cached` by the compiler's identity (a
    subprocess): for a lookup at every process start (the fast calls), where
    a module built by another version of the compiler is as good.

    Raises
    ------
    CacheError
        As :func:`compile_cached`.
    """
    return _cache.Cache(cache_dir(cache_root)).lookup(spec.key(), None)


def compile_cached(spec: BuildSpec, cache_root: str | os.PathLike | None = None) -> tuple[str, bool, str]:
    """Build ``spec`` through the compile cache; return ``(library, cache_hit, log)``.

    With no compiler on the machine, an entry for the same sources built by
    any compiler is used.

    Raises
    ------
    CacheError
        The cache directory or an entry fails the ownership and mode rules
        (``opaque_ops.build.store``), or the directory cannot be created or written.
    CompileError
        No compiler and no entry, or the compiler failed.
    """
    cache = _cache.Cache(cache_dir(cache_root))
    key = spec.key()
    try:
        compiler_key = _digest.of_bytes(compiler_identity(spec.compiler, cache).encode())[:16]
    except CompileError:
        compiler_key = None
    hit = cache.lookup(key, compiler_key)
    if hit is not None:
        return hit, True, ""
    if compiler_key is None:
        raise CompileError(
            f"{spec.label}: compiler {spec.compiler[0]!r} was not found on PATH and the cache "
            f"({cache.dir}) holds no build of this source; install a C compiler, or build the "
            "library elsewhere with `opaque-ops build` and load it here with opaque_ops.load_ops(path)"
        )
    with cache.workdir() as work:
        built, log = build(spec, work)
        return cache.publish(built, key, compiler_key), False, log


def tempdir(prefix: str = "oo_build_"):
    """A private temporary directory for a build whose result goes elsewhere (``build.py``)."""
    import tempfile

    return tempfile.TemporaryDirectory(prefix=prefix)
