"""The bundled kernel files, the names that stand for groups of them, and their prebuilt copies.

Data about files, with no loading: :mod:`opaque_ops.kernels` loads what these
name, and :mod:`opaque_ops.build.standalone` builds it (``build.py --kernels``,
the platform wheels' prebuilt set).  A prebuilt library is used only when the
package's manifest holds both its digest and its source's.

Paths are ``str`` here, taken and given: a start-up that loads prebuilt
kernels runs this module, and ``import pathlib`` would cost it 2-3 ms.
"""

from __future__ import annotations

import os
import re
from functools import cache

from .. import _digest
from . import paths as _paths
from .machine import host_arch

MEDIAPIPE = [
    "convolution2d_transpose_bias",
    "transform_tensor_bilinear",
    "landmarks_to_transform_matrix",
    "transform_landmarks",
    "max_pooling_with_argmax",
    "max_unpooling",
]

# Names that stand for several kernel files, in Python (``kernels.<name>()``),
# on the command line (``kernels:<name>``) and in ``build.py --kernels <name>``.
BUNDLES = {
    "mediapipe": MEDIAPIPE,
    "all": None,  # every bundled kernel
}

PREBUILT_MANIFEST = "manifest.txt"
# Where opaque_ops kept the manifest before (as JSON): a kernel package built
# then still loads its prebuilt libraries (read_manifest falls back to it).
_JSON_MANIFEST = "manifest.json"
# (Compiled at first use, by re's cache: most starts never read a source for it.)
_OP_LINE = r'OPAQUE_OP\(\s*"([^"]+)"\s*,\s*(\d+)'


def available(directory: str | os.PathLike | None = None) -> list[str]:
    """Names of the bundled kernel files present in this installation (or in ``directory``).

    What ``sorted(p.stem for p in directory.glob("*.c"))`` gives, from one
    listing: it runs for every bundled kernel loaded at start-up, and the
    glob's pattern machinery cost more than the listing.
    """
    try:
        files = os.listdir(_paths.kernels_dir_str() if directory is None else directory)
    except OSError:
        return []
    # PurePath.stem: a name that is only ".c" keeps it (it has no suffix).
    return sorted(f[:-2] if len(f) > 2 else f for f in files if f.endswith(".c"))


def names() -> list[str]:
    """Every name :func:`by_name` accepts: kernel files and bundles."""
    return available() + sorted(BUNDLES)


def expand(name: str) -> list[str]:
    """The kernel files a kernel or bundle name stands for.

    Raises
    ------
    ValueError
        The name is neither a bundled kernel nor a bundle.
    """
    if name in BUNDLES:
        files = BUNDLES[name]
        present = available()
        return present if files is None else [n for n in files if n in present]
    if name in available():
        return [name]
    raise ValueError(f"no bundled kernel {name!r}; available: {', '.join(names())}")


def provided_ops() -> dict[tuple[str, int], str]:
    """``{(op name, version): kernel file}`` for every op a bundled kernel declares.

    Read from the sources (:func:`declared_ops`), so it costs no compile;
    used for hints such as "kernels:mediapipe provides it".
    """
    return {op: name for name in available() for op in declared_ops(name)}


@cache
def declared_ops(name: str) -> tuple[tuple[str, int], ...]:
    """``(op name, version)`` of each ``OPAQUE_OP("Name", version, ...)`` line of bundled kernel ``name``.

    What the library registers once loaded (``tests/build/test_bundles.py``
    holds every bundled kernel to that), known without loading it: a bundle
    loads only the kernel files whose ops a model uses.  Empty if the source
    cannot be read.
    """
    try:
        with open(os.path.join(_paths.kernels_dir_str(), f"{name}.c"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ()
    return tuple(sorted({(op, int(version)) for op, version in re.findall(_OP_LINE, text)}))


def prebuilt_dir() -> str | None:
    """The directory of libraries prebuilt for this machine in the installed package, if any."""
    # (The package directory as _paths resolved it once: this runs at every
    # process's first Interpreter, and resolving costs a syscall per component.)
    d = os.path.join(_paths.package_dir_str(), "prebuilt", host_arch())
    return d if os.path.isfile(os.path.join(d, PREBUILT_MANIFEST)) else None


@cache
def prebuilt_manifest() -> dict:
    """The manifest of :func:`prebuilt_dir`, read once per process ({} if there is none or it is unreadable).

    The bundled kernels and the fast calls module are both checked against
    it, at every start-up of a platform wheel.
    """
    d = prebuilt_dir()
    if d is None:
        return {}
    try:
        return read_manifest(d)
    except (OSError, ValueError):
        return {}


# The manifest is lines of words, not JSON: every start-up of a platform
# wheel reads it (the fast calls module is checked against it), and the
# json module cost that start-up 1.1 ms to import, where a split per line
# reads this.  Names and digests hold no white space (format_manifest
# refuses any that would).
_MANIFEST_HEADER = (
    "# opaque_ops prebuilt libraries: each is loaded only if its digest and its C source's match a line here.\n"
    "# <key> <value>, or <section> <library name> <library digest> <source digest>\n"
)


def format_manifest(manifest: dict) -> str:
    """The text of a manifest: ``{key: str, section: {name: {"digest", "source_digest"}}}`` as lines.

    Raises
    ------
    ValueError
        A key, name or value is empty or holds white space (it could not be read back).
    """
    lines = []
    for key, value in sorted(manifest.items()):
        rows = (
            [(key, str(value))]
            if not isinstance(value, dict)
            else [(key, name, e["digest"], e["source_digest"]) for name, e in sorted(value.items())]
        )
        for row in rows:
            if row[0].startswith("#") or any(
                not word or len(word.split()) != 1 or word != word.strip() for word in row
            ):
                raise ValueError(
                    f"a prebuilt manifest cannot hold {row!r}: its words must be non-empty, without spaces"
                )
            lines.append(" ".join(row))
    return _MANIFEST_HEADER + "\n".join(lines) + "\n"


def parse_manifest(text: str) -> dict:
    """The manifest :func:`format_manifest` wrote, as that dict.

    Raises
    ------
    ValueError
        A line is neither ``key value`` nor ``section name digest source_digest``.
    """
    manifest: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) == 2 and not isinstance(manifest.get(words[0]), dict):
            manifest[words[0]] = words[1]
        elif len(words) == 4 and isinstance(manifest.setdefault(words[0], {}), dict):
            manifest[words[0]][words[1]] = {"digest": words[2], "source_digest": words[3]}
        else:
            raise ValueError(f"line {number} of a prebuilt manifest is not one: {line!r}")
    return manifest


def read_manifest(d: str | os.PathLike) -> dict:
    """The manifest of prebuilt directory ``d`` (its ``manifest.txt``, or an older package's ``manifest.json``).

    Raises
    ------
    OSError
        Neither file can be read.
    ValueError
        The file is not a manifest.
    """
    try:
        with open(os.path.join(d, PREBUILT_MANIFEST), encoding="utf-8") as f:
            return parse_manifest(f.read())
    except FileNotFoundError:
        import json  # (only for a kernel package built before manifest.txt)

        with open(os.path.join(d, _JSON_MANIFEST), encoding="utf-8") as f:
            try:
                manifest = json.load(f)
            except RecursionError:
                manifest = None
        if not isinstance(manifest, dict):
            raise ValueError(f"{os.path.join(d, _JSON_MANIFEST)} is not a manifest") from None
        return manifest


def prebuilt_library(name: str) -> str | None:
    """The prebuilt library of kernel ``name`` if it is present, intact and from this source."""
    source = os.path.join(_paths.kernels_dir_str(), f"{name}.c")
    return verified_library(prebuilt_dir(), name, source, prebuilt_manifest())


def source_digest(source: str | os.PathLike | list) -> str:
    """The ``source_digest`` of a prebuilt manifest entry for ``source``.

    One file: the digest of its bytes (:mod:`opaque_ops._digest`).  Several
    (the fast calls module is built from ``fastcalls.c`` and
    ``modelreader.c``): the digest of their digests in order, so that a
    change to any of them, or bytes moved from one to the next, gives another
    digest.
    """
    if isinstance(source, (str, os.PathLike)):
        return _digest.of_file(source)
    h = _digest.new()
    for p in source:
        h.update(bytes.fromhex(_digest.of_file(p)))
    return h.hexdigest()


def verified_library(
    d: str | os.PathLike | None,
    name: str,
    source: str | os.PathLike | list,
    manifest: dict | None = None,
    section: str = "kernels",
) -> str | None:
    """``d/<name>.so`` if ``d``'s manifest holds its digest and the digest of ``source``, else None.

    The one rule for loading a prebuilt library without a compiler, for the
    bundled kernels and for kernel packages (``opaque-ops scaffold``) alike:
    a library whose bytes or whose C source changed since the wheel was built
    is not loaded, and the caller compiles the source instead.

    Parameters
    ----------
    d : path-like or None
        The directory of prebuilt libraries for this machine (None: there is none).
    name : str
        The kernel file's stem.
    source : path-like or list of path-like
        The C file(s) the library was built from, as installed (see :func:`source_digest`).
    manifest : dict, optional
        ``d``'s manifest, already read; read from ``d`` if not given.
    section : str
        The manifest's table that lists it: ``"kernels"``, or ``"fastcalls"``
        for the fast calls module (one entry per Python ABI).
    """
    if d is None:
        return None
    if manifest is None:
        try:
            manifest = read_manifest(d)
        except (OSError, ValueError):
            return None
    entry = manifest.get(section, {}).get(name) if isinstance(manifest, dict) else None
    if not isinstance(entry, dict):
        return None
    lib = os.path.join(d, f"{name}.so")
    try:
        if source_digest(source) != entry["source_digest"]:
            return None  # the C file was changed after the wheel was built: compile it
        if _digest.of_file(lib) != entry["digest"]:
            return None  # damaged install: compile rather than load it
    except (OSError, KeyError):
        return None
    return lib
