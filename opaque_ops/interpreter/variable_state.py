"""Before an invoke on TFLite 2.23 with XNNPACK: refuse a read of a resource variable nothing has assigned yet.

The model's part (which subgraph reads which variable before assigning it,
and what each subgraph's invoke may assign) is
:func:`opaque_ops.model.variable_state.reads_before_assignment`; this keeps
the run-time part, per interpreter: the variables, by (container,
shared_name), that an invoke has assigned so far, counted once the invoke
succeeded; and, for a read that only an IF's branch may assign first, the
branch the IF's condition (an input of the invoked subgraph, read just
before the invoke) picks.  TFLite keeps a variable
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
        # {subgraph: [(container, name, operator, IFs it waits on), ...]} of its reads that may come first:
        # certain ones (no IF: refused while their variable is unassigned) and those only a decided IF's
        # branch may assign first (refused when the branch the condition picks does not).
        self._reads = {
            k: [(*r, ()) for r in reads] + [(c, n, op, tuple(after)) for c, n, op, after in waiting]
            for k, reads, _a, _o, _i, waiting in found
            if reads or waiting
        }
        # {subgraph: (names its invoke may assign apart from its decided IFs, whether any other variable too)}
        self._assigns = {k: (frozenset(assigns), other) for k, _r, assigns, other, _i, _w in found}
        # {subgraph: ((condition tensor, names then assigns, names else assigns), ...)}: its decided IFs
        self._ifs = {
            k: tuple((cond, frozenset(then), frozenset(other)) for cond, then, other in ifs)
            for k, _r, _a, _o, ifs, _w in found
            if ifs
        }
        self._signatures = signatures
        # What an invoke that succeeded assigned, or may have (an IF whose
        # branch was not known): a read is refused only when its variable is
        # certainly unassigned, and neither kind becomes unassigned again.
        self._assigned: set = set()

    def before_invoke(self, subgraph: int, what: str, version: str, cond_of) -> tuple:
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
        cond_of : callable
            ``cond_of(tensor)``: the value of the condition of one of the
            subgraph's decided IFs (one of its inputs, as written for this
            invoke), or None when it cannot be read.

        Returns
        -------
        tuple
            The branch each decided IF of the subgraph takes (True: then,
            False: else, None: not known), for :meth:`after_invoke`.

        Raises
        ------
        KernelError
            The subgraph reads a variable that nothing has assigned yet; the
            class TFLite's own READ_VARIABLE error takes on the runtimes
            whose kernel checks it.
        """
        ifs = self._ifs.get(subgraph, ())
        taken = tuple(cond_of(cond) for cond, _t, _e in ifs)
        for read in self._reads.get(subgraph, ()):
            container, name, _op, after = read
            key = (container, name)
            if key in self._assigned:
                continue
            # (a decided IF before the read: its branch assigns the variable, or may, when it is not known)
            if any(taken[p] is None or key in ifs[p][1 if taken[p] else 2] for p in after):
                continue
            raise KernelError(self._message(subgraph, read, what, version, taken))
        return taken

    def after_invoke(self, subgraph: int, taken: tuple) -> bool:
        """Count what a successful invoke of ``subgraph`` assigned.

        Parameters
        ----------
        subgraph : int
            The subgraph whose invoke has just succeeded.
        taken : tuple
            What :meth:`before_invoke` returned for it: the branches its
            decided IFs took.  The branch not taken assigned nothing; one
            not known counts as assigning what it may.

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
        for (_cond, then, other_branch), branch in zip(self._ifs.get(subgraph, ()), taken):
            if branch is not False:
                self._assigned |= then
            if branch is not True:
                self._assigned |= other_branch
        for k in [k for k, reads in self._reads.items() if all((r[0], r[1]) in self._assigned for r in reads)]:
            del self._reads[k]
        return not self._reads

    def _message(self, subgraph: int, read: tuple, what: str, version: str, taken: tuple) -> str:
        container, name, op, after = read
        shown = f"{name!r}" if name else "with no shared_name"
        if container:
            shown += f" in container {container!r}"
        ifs = self._ifs.get(subgraph, ())
        by = [k for k in self._assigns if k != subgraph and self._may_assign(k, (container, name))]
        runners = [key for k in by for key in self._signatures.get(k, ())]
        if runners:
            fix = (
                f"Run the signature that assigns it first ({', '.join(map(repr, runners))}), or give the model "
                "an init that assigns it (a CALL_ONCE init subgraph before the read)"
            )
        else:
            names = self._assigns.get(subgraph, (frozenset(), False))[0]
            later = (container, name) in names or any((container, name) in t for _c, *b in ifs for t in b)
            fix = (
                (
                    "The IF "
                    + ", ".join(
                        f"on condition tensor {ifs[p][0]} ({'then' if taken[p] else 'else'}-branch taken)"
                        for p in after
                    )
                    + " before the read runs a branch that does not assign it, with the condition given to "
                    "this invoke (the runtimes whose kernel checks the read fail this invoke). Invoke first with "
                    "a condition whose branch assigns it; or: "
                    if after
                    else f"Subgraph {subgraph} assigns it only after this read, so no invoke of it can be the first "
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

    def _may_assign(self, subgraph: int, key: tuple) -> bool:
        """Whether an invoke of ``subgraph`` may assign variable ``key`` (through any of its IFs' branches too)."""
        names, other = self._assigns.get(subgraph, (frozenset(), False))
        return other or key in names or any(key in t or key in e for _c, t, e in self._ifs.get(subgraph, ()))
