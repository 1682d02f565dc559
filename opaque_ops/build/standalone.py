"""Build standalone kernel libraries: ``python build.py`` / ``opaque-ops build``.

The result is a plain shared object (not a Python extension): user C files,
the bundled kernels asked for and the runtime glue, compiled straight with
the C compiler.  It is linked to no TFLite path, so it loads on any machine
whose ``libtensorflowlite_c`` is loaded first with ``RTLD_GLOBAL`` -- which
``opaque_ops.load_ops`` and ``c/tools/oo_run.c`` both do -- and that machine
needs no compiler::

    python build.py ops.c -o ops.so                          # this machine
    python build.py ops.c --target aarch64 -o ops-arm64.so   # a Raspberry Pi etc.
    python build.py atan.c --op Atan=AtanOpRegistrationExternal
    python build.py --kernels extract_image_patches convolution2d_transpose_bias
    python build.py --kernels mediapipe --target aarch64 -o mediapipe-arm64.so

Cross-building for ``--target aarch64`` on an x86-64 Debian/Ubuntu machine
needs ``apt-get install gcc-aarch64-linux-gnu`` (it brings
``libc6-dev-arm64-cross``); ``qemu-user`` runs the result for testing.

Sanitizers
----------
``--sanitize address,undefined`` builds with ``-fsanitize=address,undefined
-fno-omit-frame-pointer -g``.  The ASan runtime has to be the first library
in the process, and Python is not built with it, so preload it; Python's
interpreter keeps objects alive until exit by design, so turn leak reports
off::

    python build.py ops.c --sanitize address,undefined -o ops-asan.so
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        python -m pytest tests/test_my_kernel.py

Tests then load ``ops-asan.so`` with ``opaque_ops.load_ops``.  A memory error
in a kernel aborts the process with ASan's report on stderr; UBSan findings
print ``runtime error: ...`` (add ``-fno-sanitize-recover=all`` through
``--cflag`` to make them fatal).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from ..errors import CompileError, OpaqueOpsError
from . import compiler as _cbuild
from . import paths as _paths
from .compiler import host_arch

__all__ = ["BuildError", "build_library", "build_prebuilt", "main", "TARGETS", "CROSS_COMPILERS"]

TARGETS = ("native", "x86_64", "aarch64")

# Target -> (compiler to use when the host is another architecture, apt package).
CROSS_COMPILERS = {
    "aarch64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
    "x86_64": ("x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu"),
}

_SANITIZERS = {"address", "undefined", "leak", "thread", "pointer-compare", "pointer-subtract"}
_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class BuildError(CompileError):
    """The library could not be built (bad arguments, no compiler, compiler errors)."""


def _resolve_target(target: str) -> str:
    if target not in TARGETS:
        raise BuildError(f"unknown --target {target!r}; choose one of {', '.join(TARGETS)}")
    return host_arch() if target == "native" else target


def find_compiler(target: str = "native", cc: str | None = None) -> list[str]:
    """Return the compiler command for ``target``.

    Parameters
    ----------
    target : str
        ``"native"``, ``"x86_64"`` or ``"aarch64"``.
    cc : str, optional
        An explicit compiler (may include arguments); otherwise ``$CC`` for
        native builds, or the GNU cross compiler for another architecture.

    Returns
    -------
    list of str

    Raises
    ------
    BuildError
        No suitable compiler is installed; the message says what to install.
    """
    arch = _resolve_target(target)
    if cc:
        parts = cc.split()
        if shutil.which(parts[0]) is None:
            raise BuildError(f"compiler {parts[0]!r} (from --cc) was not found on PATH")
        return parts
    if arch == host_arch():
        try:
            return _cbuild.native_compiler()
        except CompileError as exc:
            raise BuildError(str(exc)) from None
    if arch not in CROSS_COMPILERS:
        raise BuildError(f"cannot build for {arch} on a {host_arch()} machine")
    name, package = CROSS_COMPILERS[arch]
    if shutil.which(name) is None:
        raise BuildError(
            f"cross compiler {name} not found; to build for --target {arch} on this "
            f"{host_arch()} machine install it with `apt-get install {package}` "
            "(Debian/Ubuntu), or pass --cc"
        )
    return [name]


def kernel_sources(names, kernels_dir: str | os.PathLike | None = None) -> list[Path]:
    """Return the bundled kernel files for ``names``: kernel files or bundles (``"mediapipe"``, ``"all"``).

    The bundle names are those of :mod:`opaque_ops.kernels` (``oo.kernels.mediapipe()``).

    Raises
    ------
    BuildError
        A name is neither a ``<name>.c`` in the kernels directory nor a bundle.
    """
    from .bundles import BUNDLES
    from .bundles import available as _available

    kdir = Path(kernels_dir) if kernels_dir is not None else _paths.kernels_dir()
    available = _available(kdir)
    out: list[Path] = []
    for name in names:
        name = name[:-2] if name.endswith(".c") else name
        if name in BUNDLES and name not in available:
            picked = available if BUNDLES[name] is None else [n for n in BUNDLES[name] if n in available]
        else:
            picked = [name]
        for stem in picked:
            path = kdir / f"{stem}.c"
            if not path.is_file():
                raise BuildError(
                    f"no bundled kernel {stem!r} in {kdir}; available: "
                    + (", ".join(available + sorted(BUNDLES)) or "none")
                )
            if path not in out:
                out.append(path)
    return out


def _default_output(sources: list[Path], arch: str) -> Path:
    stem = sources[0].stem if sources else "kernels"
    suffix = "" if arch == host_arch() else f".{arch}"
    return Path.cwd() / f"{stem}{suffix}.so"


def build_library(
    sources=(),
    output: str | os.PathLike | None = None,
    *,
    target: str = "native",
    ops: dict[str, str] | None = None,
    kernels=(),
    kernels_dir: str | os.PathLike | None = None,
    include_dirs=(),
    defines=(),
    debug: bool = False,
    sanitize=(),
    extra_cflags=(),
    cc: str | None = None,
    verbose: bool = False,
) -> Path:
    """Compile C kernel sources into a standalone kernel library.

    Every source file (and every bundled kernel) is its own translation unit,
    so files may share ``static`` helper names.

    Parameters
    ----------
    sources : sequence of path-like
        The user's ``.c`` files.
    output : path-like, optional
        The library to write; default ``<first source stem>[.<arch>].so`` in the
        current directory.
    target : {"native", "x86_64", "aarch64"}
        Architecture to build for; another than the host's needs a cross compiler.
    ops : dict, optional
        ``{model op name: C factory function}`` for guide-style factories
        (adds ``OPAQUE_OP_FACTORY`` lines in a generated file, so the factory
        must not be ``static``).
    kernels : sequence of str
        Bundled kernels (``c/kernels/<name>.c``) to include; ``"all"`` for every one.
    kernels_dir : path-like, optional
        Where to find ``kernels`` instead of the bundled directory.
    include_dirs : sequence of path-like
        Extra ``-I`` directories (the opaque_ops headers and each source's own
        directory are always on the path).
    defines : sequence of str
        ``NAME`` or ``NAME=VALUE`` macros.
    debug : bool
        ``-O0 -g`` instead of ``-O2``.
    sanitize : sequence of str
        Sanitizers, e.g. ``("address", "undefined")``; see the module docstring
        for running tests under them.
    extra_cflags : sequence of str
        Passed to the compiler as they are.
    cc : str, optional
        Compiler command to use instead of the automatic choice.
    verbose : bool
        Print the compiler command line to stderr.

    Returns
    -------
    pathlib.Path
        The library written.

    Raises
    ------
    BuildError
        Bad arguments, no compiler, or the compiler failed; the message holds
        one ``file:line:col: error: ...`` line per diagnostic.
    """
    arch = _resolve_target(target)
    src_paths = [Path(s) for s in sources]
    for p in src_paths:
        if not p.is_file():
            raise BuildError(f"source file {str(p)!r} does not exist")
    kernel_paths = kernel_sources(kernels, kernels_dir) if kernels else []
    if not src_paths and not kernel_paths:
        raise BuildError("nothing to build: give at least one .c file or --kernels NAME")
    for name in defines:
        if not _MACRO.match(str(name).split("=", 1)[0]):
            raise BuildError(f"invalid macro {name!r}; use -D NAME or -D NAME=VALUE")
    sanitizers = [s.strip() for item in sanitize for s in str(item).split(",") if s.strip()]
    for s in sanitizers:
        if s not in _SANITIZERS:
            raise BuildError(f"unknown sanitizer {s!r}; choose from {', '.join(sorted(_SANITIZERS))}")
    try:
        _cbuild.factory_lines(ops)  # validates the names before any compiler runs
    except CompileError as exc:
        raise BuildError(str(exc)) from None

    compiler = find_compiler(target, cc)
    out = Path(output) if output is not None else _default_output(src_paths or kernel_paths, arch)
    out = out.resolve()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create {out.parent}: {exc.strerror or exc}") from None

    spec = _cbuild.BuildSpec(
        compiler=compiler,
        sources=src_paths + kernel_paths,
        ops=ops,
        include_dirs=[Path(d) for d in include_dirs],
        defines=[tuple(d.split("=", 1)) if "=" in d else (d, None) for d in map(str, defines)],
        cflags=[str(a) for a in extra_cflags],
        debug=debug,
        sanitize=sanitizers,
        label=f"building {out.name}",
    )
    # The build happens in a private directory and the result is moved into
    # place: a failed build never leaves a half-written library where an old
    # good one was.
    with _cbuild.tempdir() as tmp:
        try:
            built, log = _cbuild.build(spec, tmp, verbose=verbose)
        except CompileError as exc:
            raise BuildError(str(exc), output=exc.output) from None
        if verbose and log:
            print(log, file=sys.stderr)
        shutil.move(str(built), str(out))
    return out


def build_prebuilt(
    target: str,
    out_dir: str | os.PathLike,
    *,
    cc: str | None = None,
    kernels_dir: str | os.PathLike | None = None,
    target_pythons=(),
) -> dict:
    """Build every bundled kernel for ``target`` into ``out_dir``, as the platform wheels carry them.

    One library per kernel file (``<name>.so``), so ``opaque_ops.kernels.kernel(name)``
    means the same with or without a compiler, and a ``manifest.txt`` with
    each library's digest and its source's (:mod:`opaque_ops._digest`),
    which ``opaque_ops.kernels`` checks before loading one.  A native build
    of the bundled kernels also carries the fast calls module
    (:mod:`opaque_ops.build.extension`) for the running Python, and any build
    of them one for each of ``target_pythons``, under the manifest's
    ``fastcalls``.  The libraries come out of the same build path as
    ``build.py`` and ``compile_ops``.

    Parameters
    ----------
    target : {"native", "x86_64", "aarch64"}
    out_dir : path-like
        Created if missing; emptied first.
    cc : str, optional
        Compiler command instead of the automatic choice.
    kernels_dir : path-like, optional
        Build every ``.c`` file of this directory instead of the bundled
        kernels: a kernel package made by ``opaque-ops scaffold`` ships its own.
    target_pythons : sequence of (str, list of path-like), optional
        Pythons of the target to build the fast calls module for, one pair
        each: its ABI tag (``"cpython-311-aarch64-linux-gnu"`` for Raspberry
        Pi OS bookworm's, ``"cpython-313-aarch64-linux-gnu"`` for trixie's,
        ``"cpython-313-x86_64-linux-gnu"``) and the directories of its
        headers and its numpy's.  A cross build carries a module for these
        alone; a native build, for the running Python and these (a wheel
        that serves a Python with no compiler, such as a slim container's).

    Returns
    -------
    dict
        The manifest written.
    """
    from .bundles import PREBUILT_MANIFEST, format_manifest

    arch = _resolve_target(target)
    native = arch == _cbuild.host_arch() and cc is None
    from . import extension as _extension

    target_pythons = [(str(tag), list(include)) for tag, include in target_pythons]
    if target_pythons:
        if kernels_dir is not None:
            raise BuildError("target_pythons is for the bundled kernels' build: a kernel package has no fast calls")
        tags = [tag for tag, _ in target_pythons]
        if native:
            tags.append(_extension.running_tag())  # the running Python's, built anyway
        if len(set(tags)) != len(tags):
            raise BuildError(f"target_pythons names a Python twice (a native build includes the running one): {tags}")
        for tag, include in target_pythons:
            if not re.fullmatch(rf"cpython-3\d+-{re.escape(arch)}-linux-gnu", tag):
                raise BuildError(
                    f"target_pythons: tag {tag!r} is not a CPython ABI tag for {arch} (cpython-3NN-{arch}-linux-gnu)"
                )
            missing = [str(d) for d in include if not Path(d).is_dir()]
            if not include or missing:
                raise BuildError(f"target_pythons: header directories of {tag} missing: {missing or 'none given'}")
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = {"arch": arch, "build_path": _cbuild.BUILD_PATH_VERSION, "kernels": {}}
    for source in kernel_sources(["all"], kernels_dir):
        lib = build_library(
            [], out / f"{source.stem}.so", target=target, kernels=[source.stem], kernels_dir=kernels_dir, cc=cc
        )
        manifest["kernels"][source.stem] = _manifest_entry(lib, source)
    if kernels_dir is None and (native or target_pythons):
        # The fast calls module (a CPython extension, one per Python ABI): for
        # the Python running a native build, and for each of target_pythons.
        specs = [(_extension.prebuilt_name(), _extension.build_spec())] if native else []
        if target_pythons:
            compiler = find_compiler(target, cc)
            specs += [
                (_extension.prebuilt_name(tag), _extension.build_spec(compiler, python_include=include))
                for tag, include in target_pythons
            ]
        manifest["fastcalls"] = {}
        for name, spec in specs:
            with _cbuild.tempdir() as work:
                try:
                    built, _log = _cbuild.build(spec, work)
                except CompileError as exc:
                    raise BuildError(str(exc), output=exc.output) from None
                shutil.move(str(built), str(out / f"{name}.so"))
            manifest["fastcalls"][name] = _manifest_entry(out / f"{name}.so", _extension.sources())
    (out / PREBUILT_MANIFEST).write_text(format_manifest(manifest))
    return manifest


def _manifest_entry(lib: Path, source: Path | list[Path]) -> dict:
    """A prebuilt manifest's entry: the library's digest and its source's (``bundles.verified_library`` checks both)."""
    from .. import _digest
    from .bundles import source_digest

    return {"digest": _digest.of_file(lib), "source_digest": source_digest(source)}


def _parse_op(spec: str) -> tuple[str, str]:
    name, sep, func = spec.partition("=")
    if not sep or not name or not func:
        raise argparse.ArgumentTypeError(f"--op takes ModelName=c_factory, got {spec!r}")
    return name, func


def make_parser(prog: str = "build.py") -> argparse.ArgumentParser:
    """The command-line parser (shared by ``build.py`` and ``opaque-ops build``)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Build a standalone opaque_ops kernel library (a plain .so that "
        "opaque_ops.load_ops() and oo_run load without a compiler).",
        epilog="Cross builds for aarch64 need `apt-get install gcc-aarch64-linux-gnu`. "
        "Run tests against a --sanitize address build with "
        "LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 python -m pytest ...",
    )
    p.add_argument("sources", nargs="*", metavar="SOURCE.c", help="kernel source files")
    p.add_argument("-o", "--output", help="library to write (default: <first source>.so here)")
    p.add_argument("--target", default="native", choices=TARGETS, help="architecture to build for")
    p.add_argument("--debug", action="store_true", help="-O0 -g instead of -O2")
    p.add_argument("--sanitize", action="append", default=[], metavar="LIST", help="sanitizers, e.g. address,undefined")
    p.add_argument(
        "--op",
        action="append",
        default=[],
        type=_parse_op,
        metavar="MODEL_NAME=FACTORY",
        help="export a guide-style factory function under the model's op name",
    )
    p.add_argument(
        "-I", dest="include_dirs", action="append", default=[], metavar="DIR", help="add an include directory"
    )
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VAL]", help="define a macro")
    p.add_argument(
        "--kernels",
        nargs="+",
        default=[],
        metavar="NAME",
        help="bundled kernels to include: a kernel file (c/kernels/NAME.c) or a bundle, "
        "as in opaque_ops.kernels: 'mediapipe', 'all'",
    )
    p.add_argument("--kernels-dir", help="take --kernels from this directory instead")
    p.add_argument(
        "--cflag",
        dest="extra_cflags",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra compiler flag (repeatable)",
    )
    p.add_argument("--cc", help="compiler command to use")
    p.add_argument("-v", "--verbose", action="store_true", help="print the compiler command")
    return p


def main(argv=None, prog: str = "build.py") -> int:
    """Run the command line; return the exit status (0 on success, 1 on failure).

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.
    prog : str
        Program name shown in usage messages.
    """
    args = make_parser(prog).parse_args(argv)
    ops = {}
    for name, func in args.op:
        if name in ops and ops[name] != func:
            print(f"error: --op {name} given twice ({ops[name]}, {func})", file=sys.stderr)
            return 1
        ops[name] = func
    try:
        out = build_library(
            args.sources,
            args.output,
            target=args.target,
            ops=ops or None,
            kernels=args.kernels,
            kernels_dir=args.kernels_dir,
            include_dirs=args.include_dirs,
            defines=args.defines,
            debug=args.debug,
            sanitize=args.sanitize,
            extra_cflags=args.extra_cflags,
            cc=args.cc,
            verbose=args.verbose,
        )
    except OpaqueOpsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
