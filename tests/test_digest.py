"""opaque_ops._digest: BLAKE2b-256, as hashlib computes it."""

from __future__ import annotations

import hashlib

import pytest

from opaque_ops import _digest


def _reference(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 127, 128, 129, 4096, 1 << 20, (1 << 20) + 3])
def test_bytes_and_files_digest_as_hashlib_blake2b_256(tmp_path, size):
    data = bytes((i * 7 + size) % 251 for i in range(size))
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    want = _reference(data)
    assert len(want) == 2 * _digest.SIZE == 64
    assert _digest.of_bytes(data) == want
    assert _digest.of_file(path) == want
    assert _digest.of_file(str(path)) == want
    h = _digest.new()
    h.update(data[: size // 2])
    h.update(data[size // 2 :])
    assert h.hexdigest() == want
    assert _digest.new(data).digest() == bytes.fromhex(want)


def test_a_file_larger_than_one_read_is_digested_in_blocks(tmp_path, monkeypatch):
    data = bytes(range(256)) * 9000  # 2.2 MiB: three 1 MiB blocks
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    monkeypatch.setattr(_digest, "ONE_READ", 1000)
    assert _digest.of_file(path) == _reference(data)


def test_a_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        _digest.of_file(tmp_path / "missing")


def test_it_is_the_constructor_hashlib_documents():
    # CPython's hashlib.blake2b is _blake2's (hashlib never takes BLAKE2 from
    # OpenSSL): the same function, reached without loading OpenSSL.
    assert _digest._blake2b is hashlib.blake2b
