"""Custom ops: what is passed in ``custom_ops=[...]`` and how it is loaded.

- :mod:`.library` -- :class:`OpLibrary`, :func:`compile_ops`, :func:`load_ops`;
- :mod:`.python_op` -- :func:`python_op`, an op whose kernel is a Python function;
- :mod:`.delegates` -- :class:`Delegate`, :func:`load_delegate`;
- :mod:`.provider` -- :class:`OpProvider`, the declared type of every ``custom_ops`` item;
- :mod:`.sanitizers` -- sanitizer-built libraries refused when their runtime is missing.

Each class owns its ``__reduce__``: a pickle, a process pool and the
isolated worker all re-create ops the same way (bundled kernels by name,
``compile_ops`` libraries through the verified compile cache or from their
source, ``load_ops`` libraries by path, python ops by reference to their
functions, delegates by plugin path and options).
"""
