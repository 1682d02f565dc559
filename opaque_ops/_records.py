"""Dataclasses that no start-up pays for: the model reader's classes and ``BuildSpec``.

A class decorated with :func:`record` is a dataclass to every function of
the :mod:`dataclasses` module (``fields``, ``replace``, ``asdict``,
``is_dataclass``), with two costs taken off the start-up path:

- ``@dataclass`` compiles the source of each method it generates when the
  class is defined: 0.3-0.5 ms per class on CPython 3.11.  Here the class
  writes its own ``__init__``, and ``__repr__`` and ``__eq__`` come from
  :class:`Record`, which reads the fields' ``repr`` and ``compare`` flags.
- Importing :mod:`dataclasses` (and :mod:`copy`, which it imports) is
  0.8 ms.  ``@dataclass`` runs on the class only when something first reads
  its ``__dataclass_fields__``, which every function of that module does.

In the class body, a field's options are written ``field(...)`` from this
module (the same keywords as :func:`dataclasses.field`); a default factory is
given to ``__init__`` as the :data:`FACTORY` sentinel, which ``__init__``
replaces with a new value.  tests/test_records.py holds each class to what
the decorator generates from the same fields.
"""

from __future__ import annotations

import _thread
import os
import sys
from collections.abc import Iterable
from typing import Any, Callable

# "Use the default factory": the default of such a field's __init__ argument
# (the generated __init__ shows the same "<factory>" in its signature).
FACTORY: Any = type("_Factory", (), {"__repr__": lambda self: "<factory>"})()
# @dataclass runs once per class, whichever thread reads the fields first.
_lock = _thread.RLock()


# ------------------------------------------------------------ locks after a fork
# The fork handlers of the modules that re-create their locks in a forked
# child.  They live here, not in a module of their own, because this bottom
# module is one that every start-up imports already (the model reader's
# classes are records) and that _native may import: a module more would cost
# each start-up its import (CONTRIBUTING.md, "The start-up path").  Each
# caller says at its call why what its locks guard is safe as the child finds it.


def renew_after_fork(module_globals: dict, **factories: Callable[[], Any]) -> None:
    """In the child of every later fork, give a module new locks in place of its own.

    A lock another thread held at the fork stays held in the child by a
    thread the child does not have, and the child's first caller waits
    forever; a new one is free.

    Parameters
    ----------
    module_globals : dict
        The module's ``globals()``.
    **factories : callable
        The name of each module-level lock, and what makes its new one
        (``_thread.allocate_lock``, ``_thread.RLock``, ``threading.Lock``...).
    """

    def _after_fork_in_child() -> None:
        for name, make in factories.items():
            module_globals[name] = make()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def renew_each_after_fork(objects: Iterable, **factories: Callable[[], Any]) -> None:
    """In the child of every later fork, give each of ``objects`` new locks in place of its own.

    Parameters
    ----------
    objects : iterable
        A collection read again at each fork, such as a
        :class:`weakref.WeakSet` of every instance or a dict's ``values()``.
    **factories : callable
        The attribute name of each lock, and what makes its new one.
    """

    def _after_fork_in_child() -> None:
        for obj in list(objects):
            for name, make in factories.items():
                setattr(obj, name, make())

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


# A fork while another thread was making a class a dataclass left the
# child's copy of _lock held by a thread the child does not have: the
# child's first read of any such class's fields waited forever.
# Re-created, not taken around the fork: the first of them imports
# dataclasses.  The child finds a class made a dataclass or not; one the
# other thread was in the middle of is made again from its field options,
# which @dataclass reads the same way twice.  tests/test_records.py
# forks inside _DataclassFields.__get__.
renew_after_fork(globals(), _lock=_thread.RLock)


class _FieldOptions(dict):
    """The options of a :func:`field` in a class body (see :func:`record`)."""


def field(**options) -> Any:
    """``dataclasses.field(**options)``, kept as its options until the class becomes a dataclass."""
    return _FieldOptions(options)


class _DataclassFields:
    """A class's ``__dataclass_fields__`` until first read, when ``@dataclass`` runs and replaces it.

    ``@dataclass(init=False, repr=False, eq=False)`` generates no method: it
    records the fields (from the annotations, the defaults and the
    :func:`field` options), ``__dataclass_params__`` and the real
    ``__dataclass_fields__``, a plain class attribute from then on.
    """

    def __init__(self, owner: type):
        # The class it stands in for: a subclass reads it through inheritance,
        # and gets the owner's fields, as it would inherit a generated one.
        self.owner = owner

    def __get__(self, obj, cls):
        owner = self.owner
        with _lock:
            if owner.__dict__.get("__dataclass_fields__") is self:
                from dataclasses import dataclass
                from dataclasses import field as make_field

                for name, options in owner._FIELD_OPTIONS.items():
                    setattr(owner, name, make_field(**options))
                dataclass(init=False, repr=False, eq=False)(owner)
        return owner.__dict__["__dataclass_fields__"]


class Record:
    """__repr__ and __eq__ as ``@dataclass`` writes them, from the fields' ``repr`` and ``compare`` flags."""

    # Set by record(): the field names in order, those in the repr and those
    # compared, and each field()'s options.
    _FIELDS: tuple[str, ...] = ()
    _REPR: tuple[str, ...] = ()
    _COMPARE: tuple[str, ...] = ()
    _FIELD_OPTIONS: dict[str, dict] = {}

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self._REPR) + ")"

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, n) for n in self._COMPARE) == tuple(getattr(other, n) for n in self._COMPARE)

    __hash__ = None  # type: ignore[assignment]  # as a dataclass with eq and not frozen


def _replace(self, /, **changes):
    """``copy.replace(obj, **changes)``: ``dataclasses.replace``, as a generated dataclass has it."""
    from dataclasses import replace

    return replace(self, **changes)


def record(cls):
    """Make ``cls`` (a :class:`Record` with its own ``__init__``) a dataclass on first use.

    Its fields are its own annotations, in order (``@dataclass``'s rule; no
    base class is a dataclass).  A default written ``field(...)`` leaves the
    class, as ``@dataclass`` removes a field's default factory from it.
    """
    names = tuple(cls.__dict__.get("__annotations__", {}))
    options = {n: cls.__dict__[n] for n in names if isinstance(cls.__dict__.get(n), _FieldOptions)}
    for n in options:
        delattr(cls, n)
    cls._FIELD_OPTIONS = options
    cls._FIELDS = names
    cls._REPR = tuple(n for n in names if options.get(n, {}).get("repr", True))
    cls._COMPARE = tuple(n for n in names if options.get(n, {}).get("compare", True))
    if sys.version_info >= (3, 10):
        cls.__match_args__ = names  # what @dataclass sets: every field is an __init__ argument
    if sys.version_info >= (3, 13):
        # What @dataclass sets on 3.13 for copy.replace(); it must work before
        # anything has asked for the fields.
        cls.__replace__ = _replace
    cls.__dataclass_fields__ = _DataclassFields(cls)
    return cls
