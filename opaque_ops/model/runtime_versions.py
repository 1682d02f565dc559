"""Which runtime versions have the builtin-kernel defects that :mod:`~opaque_ops.model.checks.version_rules` refuses.

Apart from the rules so that what must know the runtime's side of a defect
at every allocation or invoke (the SELECT_V2 memory of
:mod:`~opaque_ops.model.select_rows`, the fed-value checks) asks it without
importing the model checks: a start whose model's verdict is on disk never
imports them (tests/interpreter/test_concurrent_start.py, tests/model/test_cache.py).
"""

from __future__ import annotations

import math

# The first runtime version measured without the defects of TFLite 2.17.1's
# kernels that version_rules refuses (2.18 to 2.22 are not known, and are
# treated as 2.17.1 is).
FIXED_IN = (2, 23)


def affected(version: str | None) -> bool:
    """Whether a runtime of this ``TfLiteVersion()`` has the defects (False when it is not known)."""
    if not version:
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < FIXED_IN


def broadcast_writes_into_empty(x, out) -> bool:
    """Whether an affected runtime's BROADCAST_TO of ``x`` to ``out`` (shapes) crashes (see checks.version_rules._broadcast_to; here because the fed-value check of invoke() asks it too)."""
    if len(x) > len(out) or math.prod(out):
        return False
    x = (1,) * (len(out) - len(x)) + tuple(x)
    last = max((k for k, (a, b) in enumerate(zip(x, out)) if a != b), default=-1)
    return last >= 0 and math.prod(x[:last]) > 0 and math.prod(out[last:]) > 0
