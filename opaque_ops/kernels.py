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

Kernel packages
---------------
A pip-installed project (as ``opaque-ops scaffold`` writes one) registers a
function returning its op library under the entry point group
:data:`ENTRY_POINT_GROUP`; its name then works like a bundled one:
``oo.kernels.NAME()`` and ``--ops kernels:NAME``.  The bundled names come
first and never read the entry points, so a broken third-party package can
only break its own name, with an error that names the package.
:func:`package_kernels` is what such a package calls: the same prebuilt-or-
compiled rule as the bundled kernels, on the package's own C files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from .build.bundles import (  # noqa: F401  (public names of this module)
    BUNDLES,
    MEDIAPIPE,
    PREBUILT_MANIFEST,
    available,
    expand,
    names,
    prebuilt_dir,
    prebuilt_library,
    provided_ops,
)

if TYPE_CHECKING:  # imported when first used: building a kernel needs cffi
    from .ops.library import OpBundle, OpLibrary
    from .ops.provider import OpProvider


def kernel(name: str) -> OpLibrary:
    """One bundled kernel file as an op library: prebuilt if the package has it, else compiled.

    Parameters
    ----------
    name : str
        A bundled kernel file name (see :func:`available`), e.g. ``"extract_image_patches"``.

    Returns
    -------
    OpLibrary
        ``lib.prebuilt`` tells which it is.  The same object for the same
        name (built once per process); it pickles by name.
    """
    from .ops.library import bundled_kernel

    return bundled_kernel(name)


def bundle(*kernel_names: str) -> OpBundle:
    """Several bundled kernels (or bundles) as one ``custom_ops`` entry (all of them if no names).

    Each kernel file is loaded when first needed (see
    :class:`~opaque_ops.ops.library.OpBundle`): an interpreter loads those
    whose ops its model uses.
    """
    from .ops.library import DeferredKernel, OpBundle

    files: list[str] = []
    for n in kernel_names or ("all",):
        files += [f for f in expand(n) if f not in files]
    return OpBundle([DeferredKernel(n) for n in files], name="+".join(kernel_names or ("all",)))


def by_name(name: str) -> OpProvider:
    """A kernel file, a bundle or an installed kernel package by name: what ``--ops kernels:NAME`` uses."""
    if name in BUNDLES:
        return bundle(name)
    if name in available():
        return kernel(name)
    if name in _entry_points():
        return package(name)
    raise ValueError(
        f"no bundled kernel or kernel package {name!r}; available: " + ", ".join(names() + sorted(_entry_points()))
    )


#: The entry point group under which kernel packages register (``opaque-ops scaffold`` writes it).
ENTRY_POINT_GROUP = "opaque_ops.kernels"


@cache
def _entry_points() -> dict:
    """``{name: entry point}`` of the installed kernel packages (read once per process)."""
    from importlib.metadata import entry_points

    try:
        eps = entry_points()
        found = eps.select(group=ENTRY_POINT_GROUP) if hasattr(eps, "select") else eps.get(ENTRY_POINT_GROUP, ())
    except Exception:
        return {}
    bundled = set(names())
    # A package may not take a bundled name: kernels:mediapipe always means the bundled one.
    return {ep.name: ep for ep in found if ep.name not in bundled}


def installed_packages() -> dict[str, str]:
    """``{kernel name: distribution name}`` of the installed kernel packages."""
    return {name: _dist_name(ep) for name, ep in sorted(_entry_points().items())}


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or ep.value.split(":", 1)[0].split(".", 1)[0]


@cache
def package(name: str) -> OpProvider:
    """The op library of the installed kernel package registered as ``name``.

    Parameters
    ----------
    name : str
        Its entry point name in :data:`ENTRY_POINT_GROUP`.

    Returns
    -------
    OpLibrary or OpBundle

    Raises
    ------
    OpLibraryError
        The package's entry point cannot be imported, fails, or returns no op library;
        the message names the package.
    """
    from .errors import OpaqueOpsError, OpLibraryError

    ep = _entry_points().get(name)
    if ep is None:
        raise ValueError(f"no kernel package {name!r}; installed: {', '.join(installed_packages()) or 'none'}")
    where = f"kernel package {_dist_name(ep)!r} (entry point {ep.name} = {ep.value} in {ENTRY_POINT_GROUP})"
    try:
        lib = ep.load()()
    except OpaqueOpsError:
        raise  # a compile error in the package's C code says what it is
    except Exception as exc:
        raise OpLibraryError(f"{where} is broken: {type(exc).__name__}: {exc}") from exc
    from .ops.provider import OpProvider

    if not isinstance(lib, OpProvider):
        raise OpLibraryError(f"{where} returned {type(lib).__name__}, not an op library")
    return lib


@cache
def package_kernels(name: str, root: str | os.PathLike) -> OpBundle:
    """A kernel package's C files as one ``custom_ops`` entry: prebuilt if its wheel has them, else compiled.

    What the ``__init__.py`` of an ``opaque-ops scaffold`` project calls.  One
    library per ``root/c/*.c`` file, as for the bundled kernels: the copy in
    ``root/prebuilt/<arch>/`` when the package's manifest holds its digest and
    its source's (:func:`opaque_ops.build.bundles.verified_library`), otherwise
    the file compiled once with :func:`opaque_ops.compile_ops` and cached.

    Parameters
    ----------
    name : str
        The package's kernel name (shown in the bundle's repr).
    root : path-like
        The installed package directory.

    Returns
    -------
    OpBundle
    """
    from .build.bundles import read_manifest, verified_library
    from .build.machine import host_arch
    from .ops.library import OpBundle, OpLibrary, compile_ops

    # str paths, no pathlib: this runs at the start-up of every app that uses the package.
    root = os.fspath(root)
    prebuilt = os.path.join(root, "prebuilt", host_arch())
    c_dir = os.path.join(root, "c")
    try:
        sources = sorted(f for f in os.listdir(c_dir) if f.endswith(".c"))
    except OSError:
        sources = []
    try:
        manifest = read_manifest(prebuilt)  # (once, for every file)
    except (OSError, ValueError):
        manifest = None  # no prebuilt library is used: each file is compiled
    libs = []
    for file in sources:
        source = os.path.join(c_dir, file)
        lib_path = verified_library(prebuilt if manifest is not None else None, file[: -len(".c")], source, manifest)
        libs.append(OpLibrary(lib_path, prebuilt=True) if lib_path is not None else compile_ops(source))
    if not libs:
        from .errors import OpLibraryError

        raise OpLibraryError(f"kernel package {name!r} has no C files in {c_dir}")
    return OpBundle(libs, name=name)


def __getattr__(attr: str) -> Callable[[], OpProvider]:
    # oo.kernels.NAME() for an installed kernel package, next to the bundled functions.
    if not attr.startswith("_") and attr in _entry_points():

        def load() -> OpProvider:
            return package(attr)

        load.__name__ = load.__qualname__ = attr
        load.__doc__ = f"The installed kernel package {installed_packages()[attr]!r}."
        return load
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def atan() -> OpLibrary:
    """``Atan`` v1: elementwise arctangent of float32 (the custom-ops guide's op)."""
    return kernel("atan")


def clamp() -> OpLibrary:
    """``Clamp`` v1: elementwise clamp of float32 to [0, 1]."""
    return kernel("clamp")


def extract_image_patches() -> OpLibrary:
    """``ExtractImagePatches`` v1 (TF's op, as converted with allow_custom_ops)."""
    return kernel("extract_image_patches")


def mediapipe() -> OpBundle:
    """All of MediaPipe's custom ops: selfie segmentation, face attention mesh, argmax pooling."""
    return bundle("mediapipe")


def all_kernels() -> OpBundle:
    """Every bundled kernel."""
    return bundle("all")
