"""Before an invoke on TFLite 2.23 with XNNPACK: refuse a read of a resource variable nothing has assigned yet.

The model's part (which subgraph reads which variable before assigning it,
and what each subgraph's invoke may assign) is
:func:`opaque_ops.model.variable_state.reads_before_assignment`; this keeps
the run-time part, per interpreter: the variables, by (container,
shared_name), that an invoke has assigned so far.  TFLite keeps a variable
in the interpreter's resource map from its first assignment on: measured on
2.17.1, 2.23.0 and ai-edge-litert, with XNNPACK and without,
``reset_all_variables()`` leaves it (TfLiteInterpreterResetVariableTensors
resets the tensors marked is_variable, not the resources), so what was
assigned stays assigned for the interpreter's life.  Once every read that
comes first has its variable assigned, nothing is left to check and the
interpreter drops this object (:meth:`Interpreter._check_variables`): the
invoke path is then what it is for any model.

A copy made by pickling starts with fresh variables and a fresh record of
them (it is a new interpreter); a forked child refuses every call.
"""

from __future__ import annotations

from ..errors import KernelError


class AssignedVariables:
    """The variables an interpreter's invokes have assigned, and the reads that wait for them.

    Parameters
    ----------
    found : tuple
        :func:`~opaque_ops.model.cache.variable_reads` of the model (not empty).
    signatures : dict
        ``{subgraph: [signature key, ...]}``, for the messages' advice.
    """

    def __init__(self, found: tuple, signatures: dict):
        # {subgraph: ((container, name, operator), ...)} of its reads that come first
        self._reads = {k: reads for k, reads, _a, _o in found if reads}
        # {subgraph: (names its invoke may assign, whether any other variable too)}
        self._assigns = {k: (frozenset(assigns), other) for k, _r, assigns, other in found}
        self._signatures = signatures
        self._assigned: set = set()

    def before_invoke(self, subgraph: int, what: str, version: str) -> None:
        """Refuse the invoke of ``subgraph`` if it would read a variable never assigned.

        Called just before the invoke; nothing is counted yet: what the
        invoke assigns counts only once it succeeded (:meth:`after_invoke`).
        An invoke that fails may stop before its assignment, or after it: an
        "init" whose later operator fails is not taken as having assigned
        anything, so a read waiting for it stays refused (garbage on 2.23
        with XNNPACK otherwise) until an invoke that assigns it succeeds.

        Parameters
        ----------
        subgraph : int
            The subgraph about to be invoked.
        what : str
            The call, for the message.
        version : str
            The runtime's ``TfLiteVersion()``, for the message.

        Raises
        ------
        KernelError
            The subgraph reads a variable that nothing has assigned yet; the
            class TFLite's own READ_VARIABLE error takes on the runtimes
            whose kernel checks it.
        """
        waiting = [r for r in self._reads.get(subgraph, ()) if (r[0], r[1]) not in self._assigned]
        if waiting:
            raise KernelError(self._message(subgraph, waiting[0], what, version))

    def after_invoke(self, subgraph: int) -> bool:
        """Count what a successful invoke of ``subgraph`` assigned.

        Parameters
        ----------
        subgraph : int
            The subgraph whose invoke has just succeeded.

        Returns
        -------
        bool
            True when no read is left waiting: the caller may drop this.
        """
        names, other = self._assigns.get(subgraph, (frozenset(), False))
        if other:
            self._reads.clear()
            return True
        self._assigned |= names
        for k in [k for k, reads in self._reads.items() if all((c, n) in self._assigned for c, n, _op in reads)]:
            del self._reads[k]
        return not self._reads

    def _message(self, subgraph: int, read: tuple, what: str, version: str) -> str:
        container, name, op = read
        shown = f"{name!r}" if name else "with no shared_name"
        if container:
            shown += f" in container {container!r}"
        by = [
            k for k, (names, other) in self._assigns.items() if k != subgraph and ((container, name) in names or other)
        ]
        runners = [key for k in by for key in self._signatures.get(k, ())]
        if runners:
            fix = (
                f"Run the signature that assigns it first ({', '.join(map(repr, runners))}), or give the model "
                "an init that assigns it (a CALL_ONCE init subgraph before the read)"
            )
        else:
            later = (container, name) in self._assigns.get(subgraph, (frozenset(), False))[0]
            fix = (
                (
                    f"Subgraph {subgraph} assigns it only after this read, so no invoke of it can be the first "
                    "(the runtimes whose kernel checks the read fail every invoke). "
                    if later
                    else "Nothing in the model that runs assigns it. "
                )
                + "Give the model an init that assigns it before the read (a CALL_ONCE init subgraph, "
                "as the converters write it), or an ASSIGN_VARIABLE before the read"
            )
        return (
            f"{what}: operator {op} (READ_VARIABLE) of subgraph {subgraph} reads the resource variable {shown}, "
            f"which nothing has assigned yet in this interpreter; TFLite {version}'s XNNPACK delegate would "
            f"return uninitialised memory with no error (its own READ_VARIABLE kernel fails the invoke: "
            f"tensorflow/lite/kernels/read_variable.cc). {fix}"
        )
