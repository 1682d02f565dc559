"""The message of a model whose custom ops no library provides (:class:`~opaque_ops.UnresolvedOpsError`).

Built only when TFLite could not resolve an op, so :mod:`.core` imports
this module then and not at every start: its code is not unmarshalled by
an interpreter whose ops all resolve.  (The interpreter's parameter has no
annotation: importing :mod:`.core` here, even for type checking only, would
close a circle with core's import of this module.)
"""

from __future__ import annotations

import re

from ..errors import UnresolvedOpsError

# Custom ops that TFLite's own builtin resolver provides (and their option rules).
from ..model.runtime_ops import RUNTIME_CUSTOM_OPS
from . import xnnpack as _xnnpack

# The op TFLite names when it cannot resolve one.  A pattern, compiled on
# first use by re's own cache: only an error needs it.
_UNRESOLVED = r"unresolved custom op: ([^\s.]+(?:\.[^\s.]+)*?)\.?(?:\s|$)"


def unresolved_error(it, msgs: list[str]) -> UnresolvedOpsError:
    """The UnresolvedOpsError for ``it``'s model, from the runtime's messages ``msgs``.

    TFLite names only the first op it could not resolve; the others are the
    model's custom ops that neither a library of ``it`` nor the runtime
    provides.  The message lists what is missing and what is registered,
    and says how to fix a version or a case mismatch.

    Parameters
    ----------
    it : Interpreter
        The interpreter whose allocation or invoke failed.
    msgs : list of str
        What the runtime's error reporter said.

    Returns
    -------
    UnresolvedOpsError
        To be raised by the caller.
    """
    names = set()
    for m in msgs:
        names.update(re.findall(_UNRESOLVED, m, re.IGNORECASE))
    registered = sorted({op for lib in it._libs for op in lib.ops})
    provided = set(registered)
    missing = [
        (n, v)
        for n, v in it._info.custom_ops()
        if n in names or ((n, v) not in provided and n not in RUNTIME_CUSTOM_OPS)
    ]
    missing += [(n, 0) for n in sorted(names - {n for n, _ in missing})]
    miss = ", ".join(f"{n} v{v}" for n, v in missing)
    reg = ", ".join(f"{n} v{v}" for n, v in registered) or "none"
    hint = ""
    reg_names = {n for n, _ in registered}
    if any(n in reg_names for n, _ in missing):
        hint = " An op with that name is registered under another version: the op version must match the model's."
    lower = {n.lower(): n for n in reg_names}
    for n, _ in missing:
        if n not in reg_names and n.lower() in lower:
            hint += f" {lower[n.lower()]!r} differs from {n!r} only in case: {_rename_hint(it, lower[n.lower()], n)}"
    hint += _xnnpack.unresolved_hint(n for n, _ in missing)
    return UnresolvedOpsError(
        f"the model needs custom ops that no library provides: {miss}. Registered: {reg}.{hint} "
        "Pass a library that provides them in custom_ops=[...].",
        missing=missing,
        registered=registered,
        messages=msgs,
    )


def _rename_hint(it, registered: str, wanted: str) -> str:
    """How to register ``registered`` under the model's name ``wanted``.

    The fix depends on where the name came from: a guide-style factory named
    in ``compile_ops(ops=...)`` is renamed there, but an ``OPAQUE_OP("NAME",
    ...)`` line (or a prebuilt library) fixes the name in C, and ``ops=``
    cannot rename it (it only exports factories).
    """
    for lib in it._libs:
        origin = getattr(lib, "_origin", None) or ("load",)
        if registered not in {n for n, _ in lib.ops}:
            continue
        if origin[0] == "compile" and registered in (origin[2].get("ops") or {}):
            factory = origin[2]["ops"][registered]
            return (
                f"name it as the model does in compile_ops(ops={{{wanted!r}: {factory!r}}}) instead of {registered!r}."
            )
        if origin[0] == "kernel":
            break
        return (
            f'the kernel declares {registered!r} itself: change its OPAQUE_OP("{registered}", ...) '
            f'line to OPAQUE_OP("{wanted}", ...) in the C source and build it again.'
        )
    return f"register the op under the model's name {wanted!r}."
