"""A strict deep comparison of two parsed models (the compiled reader against the Python one).

Dataclass ``==`` is not strict enough for that: it takes ``1 == True``,
``(1,) != [1]`` only by luck of the container, cannot compare numpy arrays
by value, and skips fields with ``compare=False``.  Here every value must
have the same type, numpy arrays the same dtype (byte order included),
shape, bytes and writeability, floats the same bits, and dicts the same keys
in the same order.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np


def differences(a, b, where: str = "model", out: list | None = None, limit: int = 20) -> list[str]:
    """Where ``a`` and ``b`` differ (empty: the same), at most ``limit`` places."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if type(a) is not type(b):
        out.append(f"{where}: {type(a).__name__} != {type(b).__name__}")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.name != "verdicts":  # filled by model.cache, not by the reader
                differences(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", out, limit)
    elif isinstance(a, np.ndarray):
        if a.dtype.str != b.dtype.str or a.shape != b.shape or a.tobytes() != b.tobytes():
            out.append(f"{where}: array {a.dtype.str}{a.shape} != {b.dtype.str}{b.shape} or other values")
        elif a.flags.writeable != b.flags.writeable:
            out.append(f"{where}: writeable {a.flags.writeable} != {b.flags.writeable}")
    elif isinstance(a, np.dtype):
        if a != b or a.str != b.str:
            out.append(f"{where}: dtype {a.str} != {b.str}")
    elif isinstance(a, (list, tuple)) or type(a).__name__ == "_ReadOnDemand":
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items != {len(b)}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                differences(x, y, f"{where}[{i}]", out, limit)
    elif isinstance(a, dict):
        if list(a) != list(b):
            out.append(f"{where}: keys {list(a)} != {list(b)}")
        else:
            for k in a:
                differences(a[k], b[k], f"{where}[{k!r}]", out, limit)
    elif isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            out.append(f"{where}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{where}: {a!r} != {b!r}")
    return out
