"""The one digest of opaque_ops' own files and keys: BLAKE2b, 32 bytes, as hex.

Every digest opaque_ops makes and later checks itself goes through here: the
compile cache's entry names and keys, the verdict records' names and their
model key, the prebuilt manifest's entries, and the pre-parsed declarations'
header check.  A digest compared with one made by somebody else stays
SHA-256: the TFLite runtime's known builds (``sha256sum``, pip's ``RECORD``),
in :mod:`opaque_ops._native.runtime_loader`.

Why BLAKE2b and not SHA-256: each process checks several of these digests
while it starts (the prebuilt kernels, the model, the declarations), and
:mod:`hashlib`'s SHA-256 comes from OpenSSL.  Importing ``hashlib`` loads
``_hashlib`` and with it libcrypto: 2 to 3 ms on an x86-64 server, most of
a start-up's budget.  CPython's own ``_blake2`` module loads in about 0.2 ms
and hashes a 230 kB model in 0.17 ms there (OpenSSL's SHA-256: 0.12 ms with
the SHA extensions, which a Raspberry Pi 4 does not have; CPython's own
SHA-256: 0.63 ms).  ``_blake2`` is the module behind ``hashlib.blake2b``
(CPython never takes BLAKE2 from OpenSSL): the same function, imported
without ``hashlib``.  A Python without that module gets hashlib's.

A file's digest is made from one read of the whole file (up to
:data:`ONE_READ`): a fresh 1 MiB block per read would cost an allocation (an
``mmap``) each time, and these files are small.
"""

from __future__ import annotations

import os

try:
    from _blake2 import blake2b as _blake2b
except ImportError:  # not CPython: the documented spelling
    from hashlib import blake2b as _blake2b

SIZE = 32  # bytes; hex digests are twice as long
ONE_READ = 64 << 20  # files up to this size are digested in one read


def new(data: bytes = b""):
    """A BLAKE2b-256 hash object (``update``, ``digest``, ``hexdigest``), fed ``data``."""
    return _blake2b(data, digest_size=SIZE)


def of_bytes(data: bytes) -> str:
    """The hex digest of ``data``."""
    return _blake2b(data, digest_size=SIZE).hexdigest()


def of_file(path: str | os.PathLike) -> str:
    """The hex digest of a file's bytes.

    Raises
    ------
    OSError
        The file cannot be opened or read.
    """
    with open(path, "rb", buffering=0) as f:
        if os.fstat(f.fileno()).st_size <= ONE_READ:
            return _blake2b(f.readall(), digest_size=SIZE).hexdigest()
        h = _blake2b(digest_size=SIZE)
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()
