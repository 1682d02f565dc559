"""Ready-made kernels for custom ops found in real models.

Each function returns something to pass in ``custom_ops=[...]``::

    it = opaque_ops.Interpreter(model_path="selfie_segmentation.tflite",
                                custom_ops=[opaque_ops.kernels.mediapipe()])

Where the kernels come from, in order:

1. the library prebuilt for this machine's architecture inside the installed
   package (the x86_64 and aarch64 wheels carry one per kernel file), checked
   against the package's own manifest of digests; no compiler is needed;
2. otherwise (a source checkout, an sdist install, another architecture) the
   bundled C file, compiled once with :func:`opaque_ops.compile_ops` and then
   taken from the compile cache.

The same names work everywhere: ``oo.kernels.mediapipe()``,
``opaque-ops run --ops kernels:mediapipe`` and ``opaque-ops build --kernels
mediapipe`` (see :data:`BUNDLES`).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path

from . import _paths

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

PREBUILT_MANIFEST = "manifest.json"
_OP_LINE = re.compile(r'OPAQUE_OP\(\s*"([^"]+)"\s*,\s*(\d+)')


def available() -> list[str]:
    """Names of the bundled kernel files present in this installation."""
    return sorted(p.stem for p in _paths.kernels_dir().glob("*.c"))


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
        return available() if files is None else [n for n in files if n in available()]
    if name in available():
        return [name]
    raise ValueError(f"no bundled kernel {name!r}; available: {', '.join(names())}")


def provided_ops() -> dict[tuple[str, int], str]:
    """``{(op name, version): kernel file}`` for every op a bundled kernel declares.

    Read from the ``OPAQUE_OP("Name", version, ...)`` lines of the sources, so
    it costs no compile; used for hints such as "kernels:mediapipe provides it".
    """
    found = {}
    for name in available():
        for op, version in _OP_LINE.findall((_paths.kernels_dir() / f"{name}.c").read_text()):
            found[(op, int(version))] = name
    return found


def prebuilt_dir() -> Path | None:
    """The directory of libraries prebuilt for this machine in the installed package, if any."""
    from ._cbuild import host_arch

    d = Path(__file__).resolve().parent / "prebuilt" / host_arch()
    return d if (d / PREBUILT_MANIFEST).is_file() else None


@lru_cache(maxsize=None)
def _manifest() -> dict:
    d = prebuilt_dir()
    if d is None:
        return {}
    try:
        return json.loads((d / PREBUILT_MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def _prebuilt(name: str) -> Path | None:
    """The prebuilt library of kernel ``name`` if it is present, intact and from this source."""
    entry = _manifest().get("kernels", {}).get(name)
    d = prebuilt_dir()
    if entry is None or d is None:
        return None
    lib = d / f"{name}.so"
    source = _paths.kernels_dir() / f"{name}.c"
    try:
        if hashlib.sha256(source.read_bytes()).hexdigest() != entry["source_sha256"]:
            return None  # the C file was changed after the wheel was built: compile it
        if hashlib.sha256(lib.read_bytes()).hexdigest() != entry["sha256"]:
            return None  # damaged install: compile rather than load it
    except (OSError, KeyError):
        return None
    return lib


@lru_cache(maxsize=None)
def kernel(name: str):
    """One bundled kernel file as an op library: prebuilt if the package has it, else compiled.

    Parameters
    ----------
    name : str
        A bundled kernel file name (see :func:`available`), e.g. ``"extract_image_patches"``.

    Returns
    -------
    OpLibrary
        ``lib.prebuilt`` tells which it is.
    """
    from .oplib import OpLibrary, compile_ops

    if name not in available():
        raise ValueError(f"no bundled kernel {name!r}; available: {', '.join(names())}")
    lib_path = _prebuilt(name)
    if lib_path is not None:
        lib = OpLibrary(lib_path, prebuilt=True)
    else:
        lib = compile_ops(_paths.kernels_dir() / f"{name}.c")
    lib._origin = ("kernel", name)  # pickled by name: the worker loads or builds its own
    return lib


def bundle(*names: str):
    """Several bundled kernels (or bundles) as one ``custom_ops`` entry (all of them if no names)."""
    from .oplib import OpBundle

    files: list[str] = []
    for n in names or ("all",):
        files += [f for f in expand(n) if f not in files]
    return OpBundle([kernel(n) for n in files], name="+".join(names or ("all",)))


def by_name(name: str):
    """A kernel file or a bundle by name: what ``--ops kernels:NAME`` uses."""
    return bundle(name) if name in BUNDLES else kernel(name)


def atan():
    """``Atan`` v1: elementwise arctangent of float32 (the custom-ops guide's op)."""
    return kernel("atan")


def clamp():
    """``Clamp`` v1: elementwise clamp of float32 to [0, 1]."""
    return kernel("clamp")


def extract_image_patches():
    """``ExtractImagePatches`` v1 (TF's op, as converted with allow_custom_ops)."""
    return kernel("extract_image_patches")


def mediapipe():
    """All of MediaPipe's custom ops: selfie segmentation, face attention mesh, argmax pooling."""
    return bundle("mediapipe")


def all_kernels():
    """Every bundled kernel."""
    return bundle("all")
