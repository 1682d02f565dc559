"""The TFLite runtime builds opaque_ops has been tested with, by SHA-256 of the file.

A file whose digest is here is one of these exact builds; anything else is
an unknown build (it may work: the lookup warns, a named file is trusted).
To add a build: run the test suite against it with ``OPAQUE_OPS_TFLITE_LIB``
(``.ci/run`` shows how), then add its digest (``sha256sum FILE``), its size
and where it comes from.  ``tests/native/test_runtime.py`` checks every pymicro-wakeword
entry against the ``RECORD`` of the wheel it names, which pip verified on install.
"""

from __future__ import annotations

from typing import NamedTuple


class KnownBuild(NamedTuple):
    """One tested build of the TFLite C library.

    Attributes
    ----------
    sha256 : str
        Hex digest of the whole file.
    size : int
        File size in bytes (lets the lookup rule out a file without hashing it).
    version : str
        ``TfLiteVersion()``.
    arch : str
        The architecture, as ``host_arch()`` names it.
    source : str
        Where the file comes from: package, versions and path inside it.
    custom_ops : bool
        Whether it exports the opaque kernel API (kernel libraries and python_ops work).
    """

    # (A NamedTuple, not a frozen dataclass: the table is built at every
    # start-up, and a dataclass costs four times as much to define.)

    sha256: str
    size: int
    version: str
    arch: str
    source: str
    custom_ops: bool = True


_PYMICRO = "pymicro-wakeword {} wheel, pymicro_wakeword/lib/libtensorflowlite_c.so"
_LITERT_LM = "litert-lm-api 0.18.1 wheel, litert_lm/liblitert-lm.so"

KNOWN_BUILDS: tuple[KnownBuild, ...] = (
    KnownBuild(
        "25465edb5cd7aadd00249d4d28f1d922ce5cc90195ad4403458111dd63493bae",
        4835320,
        "2.17.1",
        "x86_64",
        _PYMICRO.format("2.0.0-2.5.0"),
    ),
    KnownBuild(
        "12062437bfde367b1be592ebc4a9fe64b8453f90b3b7dc21fade002c38e1ac1a",
        3607232,
        "2.17.1",
        "aarch64",
        _PYMICRO.format("2.0.0-2.5.0"),
    ),
    # Built for Cortex-A7 (armv7-a, NEON, hard float) without the opaque
    # kernel API and without XNNPACK: builtin ops only.
    KnownBuild(
        "fcb6ef6f3f9c68889868fb55aba544d43d0fe9703c1efeb2756e82b553d032ab",
        3612544,
        "2.17.1",
        "armv7l",
        _PYMICRO.format("2.4.1-2.5.0"),
        custom_ops=False,
    ),
    # CI's second pass: TFLite 2.23 (4-argument TfLiteOperatorCreate, no CreateWithData).
    KnownBuild(
        "b837c18cc98920ea0f979c454795dcabb6c1f132b9b4a4a309243e67d62e94b9", 131785976, "2.23.0", "x86_64", _LITERT_LM
    ),
    KnownBuild(
        "9a2ad189678a4c2148eb498ac4785272cb37f96dc07a3a6019553963b363c00c", 133496240, "2.23.0", "aarch64", _LITERT_LM
    ),
)

BY_DIGEST = {b.sha256: b for b in KNOWN_BUILDS}
SIZES = frozenset(b.size for b in KNOWN_BUILDS)
