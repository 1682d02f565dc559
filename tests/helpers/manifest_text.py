"""A platform wheel's prebuilt manifest, read independently of opaque_ops.build.bundles.

The format (``prebuilt/<arch>/manifest.txt``): comment lines start with
``#``; ``key value`` lines; ``section name digest source_digest`` lines.
"""

from __future__ import annotations


def manifest_of(text: str | bytes) -> dict:
    """``{key: value, section: {name: {"digest": ..., "source_digest": ...}}}``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    out: dict = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split(" ")
        assert len(words) in (2, 4), f"not a manifest line: {line!r}"
        if len(words) == 2:
            out[words[0]] = words[1]
        else:
            out.setdefault(words[0], {})[words[1]] = {"digest": words[2], "source_digest": words[3]}
    return out
