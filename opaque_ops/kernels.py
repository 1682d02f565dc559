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

from typing import TYPE_CHECKING

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


def bundle(*names: str) -> OpBundle:
    """Several bundled kernels (or bundles) as one ``custom_ops`` entry (all of them if no names)."""
    from .ops.library import OpBundle

    files: list[str] = []
    for n in names or ("all",):
        files += [f for f in expand(n) if f not in files]
    return OpBundle([kernel(n) for n in files], name="+".join(names or ("all",)))


def by_name(name: str) -> OpLibrary | OpBundle:
    """A kernel file or a bundle by name: what ``--ops kernels:NAME`` uses."""
    return bundle(name) if name in BUNDLES else kernel(name)


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
