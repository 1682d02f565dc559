"""On TFLite 2.23 with XNNPACK: no value is stored in a resource variable past the buffer the delegate gave it.

The delegate sizes a variable's buffer by the first value stored in it and
keeps it for the interpreter's life (measured, and the model's part:
:mod:`opaque_ops.model.variable_buffers`).  This keeps the run-time part,
per interpreter: for each variable an invoke may have stored in, the least
size its buffer may have; and, per invocable subgraph, the stores its
current allocation plans (``store_plan``), checked at the allocation against
what earlier invokes may have stored, and again at the subgraph's next
invoke when another subgraph's invoke has since made a buffer smaller than
it was checked against, or when nothing had been stored yet.

Between those points nothing changes: an invoke stores the values its
allocation planned, and those were checked; so the check costs the first
invoke after each allocation, and the C invoke (fast_calls) runs the
others.  The sizes are counted before the invoke runs (a failing invoke may
have stored before it failed); that a store certainly ran (so no later one
can be the first) only once it succeeded.

A copy made by pickling is a new interpreter with a new delegate, and
starts with nothing stored; a forked child refuses every call; an
``isolate=True`` worker runs this in the worker, whose replacement after a
crash is a new interpreter too.
"""

from __future__ import annotations

from ..errors import KernelError, ModelError


class VariableBuffers:
    """What an interpreter's invokes may have stored in its variables, and each subgraph's planned stores.

    Parameters
    ----------
    info : ModelInfo
        The model, its subgraphs at their stored indices.
    version : str
        The runtime's ``TfLiteVersion()``, for the messages.
    """

    def __init__(self, info, version: str) -> None:
        self._info = info
        self._version = version
        # {variable: (least size of its buffer, the first value's shape or None, where they come from,
        #  whether a store certainly ran)}: model.variable_buffers.check_stores's capacity.
        self._capacity: dict = {}
        # {subgraph: the Plan of its current allocation}, for a subgraph whose invoke stores something.
        self._plans: dict = {}
        # The subgraphs whose next invoke checks its plan first: the interpreter's invoke paths take the
        # Python path while any is here (Interpreter._prechecks).  A plan with decided IFs stays here: which
        # branch stores is known only from each invoke's condition.
        self.unchecked: set = set()

    def allocated(self, subgraph: int, shape_of) -> None:
        """After an allocation of ``subgraph`` passed the checks: refuse what every invoke of it would store wrong.

        Raises
        ------
        ModelError
            Whatever its decided IFs' conditions, the allocation's shapes
            make a value larger than its variable's buffer may be (or of
            another shape, where a read takes the variable's).  What only
            some conditions make wrong is refused at the invoke.
        """
        from ..model.variable_buffers import check_stores, combinations, store_plan

        plan = store_plan(self._info, subgraph, shape_of)
        self._plans.pop(subgraph, None)
        self.unchecked.discard(subgraph)
        if not plan.stores:
            return
        refused = None
        for values in combinations(plan):
            try:
                check_stores(plan.resolved(values), plan.dynamic, self._capacity, self._version)
                break
            except ModelError as err:
                refused = refused or err
        else:
            raise refused
        self._plans[subgraph] = plan
        self.unchecked.add(subgraph)

    def before_invoke(self, subgraph: int, what: str, cond_of) -> tuple | None:
        """Just before an invoke of ``subgraph`` in :attr:`unchecked`: check its stores, count what they may store.

        ``cond_of(tensor)``: the value of a decided IF's condition (an input
        of the subgraph), True, False or None (not known).  Returns the
        stores, for :meth:`after_invoke` once the invoke succeeded; None when
        there was nothing to check.

        Raises
        ------
        KernelError
            A store may be larger than its variable's buffer (another
            invoke stored a smaller value first), or of another shape where a
            read takes the variable's.
        """
        from ..model.variable_buffers import check_stores

        plan = self._plans.get(subgraph)
        if plan is None:
            self.unchecked.discard(subgraph)
            return None
        stores = plan.resolved({t: cond_of(t) for t in plan.conds}) if plan.conds else plan.stores
        try:
            changed = check_stores(stores, plan.dynamic, self._capacity, self._version)
        except ModelError as err:
            raise KernelError(f"{what}: {err}") from None
        if not plan.conds:
            self.unchecked.discard(subgraph)
        if changed:
            self._capacity.update(changed)
            # Other subgraphs' plans were checked against larger buffers: again at their next invoke.
            for k, other in self._plans.items():
                if k != subgraph and any(s.key in changed for s in other.stores):
                    self.unchecked.add(k)
        return stores

    def after_invoke(self, stores: tuple) -> None:
        """After a successful invoke of ``stores``: its certain ones ran, so their variables keep this buffer."""
        from ..model.variable_buffers import settles

        for key in settles(stores):
            size, shape, where, _settled = self._capacity[key]
            self._capacity[key] = (size, shape, where, True)
