"""The in-process interpreter: :class:`Interpreter`, :class:`SignatureRunner` and what guards them.

- :mod:`.core` -- :class:`Interpreter`, the one path that moves tensor memory;
- :mod:`.signature_runner` -- :class:`SignatureRunner`;
- :mod:`.reshape_target` -- what the one memory-moving path works on (a subgraph, a shape);
- :mod:`.one_op` -- one custom op in a model of its own (``testing.run_op``'s in-process core);
- :mod:`.isolation_default` -- what ``isolate=`` means, and the isolated class ``opaque_ops.isolate`` registers;
- :mod:`.tensors` -- tensor details (sparse tensors' parameters from the model reader's parse),
  numpy views and the checks on values set;
- :mod:`.xnnpack` -- when XNNPACK is applied and which nodes it takes;
- :mod:`.call_lock` -- the per-interpreter call lock and its owner;
- :mod:`.fork_guard` -- what an interpreter is after ``fork()``;
- :mod:`.variable_state`, :mod:`.variable_buffers` -- resource variables on 2.23 with XNNPACK: reads
  before any assignment, and stores past the buffer of a variable's first value;
- :mod:`.sigint` -- Ctrl-C during ``invoke()``.
"""
