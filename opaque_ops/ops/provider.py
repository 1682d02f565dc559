"""The declared type of what ``custom_ops=[...]`` holds.

:class:`OpProvider` is the one base of everything that provides custom ops
to an interpreter: :class:`~opaque_ops.OpLibrary` (compiled, loaded or
bundled C kernels), :class:`~opaque_ops.ops.python_op.PythonOp` and
:class:`~opaque_ops.ops.library.OpBundle`.  The interpreter, the isolated
worker and pickling test ``isinstance(item, OpProvider)``, not the presence
of attributes.  Each subclass owns its ``__reduce__``: that is how it
travels to another process (a pickle, a pool, the isolated worker).
"""

from __future__ import annotations

# The message for anything else in custom_ops, in one place for every entry
# point that checks (Interpreter, isolated Interpreter, run_op).
NOT_AN_OP_PROVIDER = (
    "custom_ops must hold op libraries (from compile_ops, load_ops, python_op or "
    "opaque_ops.kernels) or paths to prebuilt libraries, not {type}"
)


class OpProvider:
    """Something that provides custom ops: pass it in ``Interpreter(custom_ops=[...])``.

    Subclasses implement :meth:`operators`, :attr:`ops` and ``__reduce__``
    (and may implement :meth:`operators_for`).
    """

    def operators(self) -> list:
        """The operators to register with TFLite (internal handles of :mod:`opaque_ops._native`)."""
        raise NotImplementedError

    def operators_for(self, names) -> list:
        """The operators to register for a model whose custom ops are named ``names``.

        All of :meth:`operators` here; a provider made of parts loaded on
        demand (:class:`~opaque_ops.ops.library.OpBundle`) loads only the
        parts that provide those names.  :attr:`ops` must not need them
        loaded.
        """
        return self.operators()

    @property
    def ops(self) -> list[tuple[str, int]]:
        """``(name, version)`` of every op provided."""
        raise NotImplementedError

    @property
    def names(self) -> list[str]:
        """The op names provided."""
        return sorted({n for n, _v in self.ops})

    def __reduce__(self):
        raise NotImplementedError(f"{type(self).__name__} must say how it travels to another process")


def not_an_op_provider(item) -> TypeError:
    """The error for an item of ``custom_ops`` that provides no ops."""
    return TypeError(NOT_AN_OP_PROVIDER.format(type=type(item).__name__))
