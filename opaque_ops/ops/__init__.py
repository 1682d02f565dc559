"""Custom ops: what is passed in ``custom_ops=[...]`` and how it is loaded.

- :mod:`.library` -- :class:`OpLibrary`, :func:`compile_ops`, :func:`load_ops`;
- :mod:`.python_op` -- :func:`python_op`, an op whose kernel is a Python function;
- :mod:`.delegates` -- :class:`Delegate`, :func:`load_delegate`;
- :mod:`.sanitizers` -- sanitizer-built libraries refused when their runtime is missing;
- :mod:`.pickling` -- how each of them crosses to another process.
"""
