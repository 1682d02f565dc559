"""A tensor arena the runtime could not allocate is an exception, not a write to address 0.

TFLite 2.17's ``SimpleMemoryArena`` does not check what ``aligned_alloc``
returns (tensorflow/lite/simple_memory_arena.cc: ``AlignedAlloc``, and
``Commit`` returns kTfLiteOk), so ``AllocateTensors`` reports success and
every arena tensor points at address 0 plus its offset; the first
``invoke`` then wrote there (SIGSEGV, found by tools/fuzz_structured.py's
triage).  Later runtimes (2.23) report the failure themselves, but only as
kTfLiteError with nothing in the error reporter ("allocate_tensors failed:
error"); opaque_ops then asks malloc for a lower bound of the arena and
names memory when even that cannot be had.  Either way the process must
live and get a TensorMemoryError.

The child caps its address space just above what it uses, then asks for a
2 GiB arena: FILL makes a 1 GiB tensor from constant dims, and ADD another.
"""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import join_with_signature, squared_sum_model

ELEMENTS = 1 << 28  # float32: 1 GiB per tensor


def _fill_add_model() -> bytes:
    b = ModelBuilder()
    dims = b.add_constant("dims", np.array([ELEMENTS], np.int32))
    value = b.add_constant("value", np.array(1.5, np.float32))
    x = b.add_tensor("x", [1], np.float32)
    filled = b.add_tensor("filled", [ELEMENTS], np.float32)
    y = b.add_tensor("y", [ELEMENTS], np.float32)
    b.add_op("FILL", [dims, value], [filled])
    b.add_op("ADD", [filled, x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


CHILD = """
import resource, sys
import numpy as np
import opaque_ops as oo

it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=sys.argv[2] == "xnnpack")
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (1 << 30)  # room for the process to go on, not for a 2 GiB arena
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
try:
    it.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("refused: TensorMemoryError:", exc)
    try:
        it.invoke()
    except oo.ClosedError as closed:
        print("then closed:", "could not allocate the memory" in str(closed))
    except oo.NotAllocatedError:
        print("then not allocated")
except oo.OpaqueOpsError as exc:
    print("refused by the runtime:", type(exc).__name__, exc)
else:
    it.set_tensor(it.get_input_details()[0]["index"], np.zeros(1, np.float32))
    it.invoke()  # a 2.17.1 runtime writes to address 0 here, without the check
    print("ran")
print("version", oo.runtime_info().version)
"""


def test_a_failed_arena_is_an_exception_and_the_process_lives():
    data = _fill_add_model()
    for mode in ("xnnpack", "reference"):
        p = run_child(CHILD, data.hex(), mode, timeout=300)
        assert p.returncode == 0, crashed(p)
        version = p.stdout.split("version ")[-1].strip()
        if version.startswith("2.17."):
            # This runtime says nothing: opaque_ops' own check speaks.
            assert "refused: TensorMemoryError: the runtime could not allocate the memory" in p.stdout, p.stdout
            assert "address 0" in p.stdout and "then closed: True" in p.stdout, p.stdout
        else:
            # This runtime says only "error" (it was "allocate_tensors failed:
            # error"); the arena's bound, asked of malloc afterwards, names
            # memory: FILL's and ADD's 1 GiB each without XNNPACK, the
            # graph's input and output with it (its partition's tensors are
            # not in the arena).
            need = (2 if mode == "reference" else 1) * 4 * ELEMENTS + 4
            assert (
                "refused: TensorMemoryError: allocate_tensors: the runtime could not allocate its tensor arena"
                in p.stdout
            ), p.stdout
            assert f"(input 0 'x' of shape [1]) this model needs at least {need} bytes" in p.stdout, p.stdout
            # Nothing was allocated, and the interpreter is not closed.
            assert "then not allocated" in p.stdout, p.stdout
        assert "ran" not in p.stdout.splitlines(), p.stdout


def test_the_model_runs_where_the_memory_is_there():
    # The check refuses only a failed arena: with memory, the same model
    # gives FILL's value plus the input (checked on a slice: 1 GiB outputs).
    import opaque_ops as oo

    it = oo.Interpreter(model_content=_fill_add_model(), use_xnnpack=False)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.array([0.25], np.float32))
    it.invoke()
    out = it.tensor(it.get_output_details()[0]["index"])()
    assert out.shape == (ELEMENTS,) and out[:4].tolist() == [1.75] * 4 and out[-1] == 1.75
    del out
    it.close()


def test_in_an_isolated_worker_it_is_the_same_exception_not_a_crash():
    # It was a RuntimeCrashError (SIGSEGV at address 0x40 in FILL); and the
    # exception comes back as itself (a MemoryError subclass, which the
    # worker protocol rebuilt as a generic OpaqueOpsError).
    import pytest

    import opaque_ops as oo

    it = oo.Interpreter(model_content=_fill_add_model(), isolate=True, memory_limit="1G", use_xnnpack=False)
    with pytest.raises(oo.OpaqueOpsError) as caught:
        it.allocate_tensors()
    # (2.17: opaque_ops' check after the allocation; 2.23: its diagnosis of
    # the runtime's bare "error".)
    assert type(caught.value) is oo.TensorMemoryError and isinstance(caught.value, MemoryError), caught.value
    it.close()


# A growing arena: resize_tensor_input() then allocate_tensors() on an
# interpreter that was allocated.  TFLite 2.17's arena copies its old tensors
# into the new block (simple_memory_arena.cc, ResizableAlignedBuffer::Resize)
# without checking the allocation: a SIGSEGV inside AllocateTensors, before
# any check after it can run.  arena_guard.refuse_unaffordable asks malloc
# for a lower bound of the new arena first (model/arena.py).


GROW = """
import resource, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.interpreter import arena_guard

if sys.argv[3] == "unguarded":
    arena_guard.refuse_unaffordable = lambda *args: None
it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=sys.argv[2] == "xnnpack")
it.allocate_tensors()
x, y = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (1 << 30)  # 1 GiB of room: not the 16-24 GiB arena of [1, 2**31 - 1]
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
print("version", oo.runtime_info().version, flush=True)
it.resize_tensor_input(x, [1, 2**31 - 1])
try:
    it.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("refused: TensorMemoryError:", exc, flush=True)
except oo.OpaqueOpsError as exc:
    print("refused by the runtime:", type(exc).__name__, exc, flush=True)
else:
    print("allocated", flush=True)
# Refused, the interpreter is not planned: invoke() says so (no write anywhere).
try:
    it.invoke()
except oo.OpaqueOpsError as exc:
    print("invoke refused:", type(exc).__name__, exc, flush=True)
# Resized back, the same interpreter runs.
it.resize_tensor_input(x, [1, 4])
it.allocate_tensors()
v = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
it.set_tensor(x, v)
it.invoke()
print("small ok:", np.array_equal(it.get_tensor(y), (v + v) * (v + v)), flush=True)
# A large resize that fits under the cap still runs: 3 x 64 MiB.
n = 1 << 24
it.resize_tensor_input(x, [1, n])
it.allocate_tensors()
v = (np.arange(n, dtype=np.float32) % 7).reshape(1, n)
it.set_tensor(x, v)
it.invoke()
print("large ok:", np.array_equal(it.get_tensor(y), (v + v) * (v + v)), flush=True)
"""


def test_a_growing_arena_that_cannot_be_had_is_refused_and_the_interpreter_lives():
    data = squared_sum_model().hex()
    for mode in ("reference", "xnnpack"):
        p = run_child(GROW, data, mode, "guarded", timeout=120)
        assert p.returncode == 0, crashed(p)
        out = p.stdout
        # The guard runs before TFLite is asked, so before XNNPACK's own Prepare too.
        assert "refused: TensorMemoryError: allocate_tensors: the inputs as resized (input 0 'x' to " in out, out
        assert "[1, 2147483647]) need at least " in out and "Nothing was allocated" in out, out
        # True on every runtime (it said "TFLite 2.17 does not report such a
        # failure", also on 2.23, which reports it).
        assert "(checked before the runtime is asked: some TFLite versions, 2.17 among them, crash" in out, out
        assert "2.17 does not report" not in out, out
        # The bound, float32: x, the intermediate and y; with XNNPACK, x and y
        # (the intermediate is inside its partition, not in the arena).
        need = (3 if mode == "reference" else 2) * 4 * (2**31 - 1)
        assert f"need at least {need} bytes" in out, out
        assert "allocated" not in out.splitlines(), out
        assert "invoke refused: " in out and "allocate_tensors" in out.split("invoke refused: ")[1].splitlines()[0], out
        assert "small ok: True" in out and "large ok: True" in out, out


def test_without_the_guard_the_2_17_runtime_dies_there():
    # What the guard is for (and that the test above would see it gone).
    import opaque_ops as oo

    p = run_child(GROW, squared_sum_model().hex(), "reference", "unguarded", timeout=120)
    if oo.runtime_info().version.startswith("2.17."):
        assert p.signal == 11 and "allocated" not in p.stdout, crashed(p)
    else:
        # 2.23 reports the failed arena itself, as a bare "error" (it was a
        # KernelError saying only that): the diagnosis after it names the
        # input, its shape and the bytes, as the guard does.
        assert p.returncode == 0, crashed(p)
        out = p.stdout
        assert "refused: TensorMemoryError: allocate_tensors: the runtime could not allocate its tensor arena" in out
        need = 3 * 4 * (2**31 - 1)
        assert f"(input 0 'x' resized to [1, 2147483647]) this model needs at least {need} bytes" in out, out
        assert "small ok: True" in out and "large ok: True" in out, out


def test_isolated_and_through_a_signature_runner_it_is_the_same_refusal():
    # The isolated worker allocates through the same Interpreter code, under
    # its memory limit; its inputs and outputs live in shared memory, counted
    # in the bound as in process (tests/isolate/test_isolate_placement.py).  A
    # signature runner of subgraph 0 resizes and allocates through it too.
    import pytest

    import opaque_ops as oo

    refused = r"need at least \d+ bytes .*Nothing was allocated"
    v = np.array([[-2.0, 0.5, 1.0, 3.0]], np.float32)
    it = oo.Interpreter(model_content=squared_sum_model(True), isolate=True, memory_limit="2G", use_xnnpack=False)
    it.allocate_tensors()
    x, y = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    it.resize_tensor_input(x, [1, 2**31 - 1])
    with pytest.raises(oo.TensorMemoryError, match=refused):
        it.allocate_tensors()
    it.resize_tensor_input(x, [1, 4])
    it.allocate_tensors()
    it.set_tensor(x, v)
    it.invoke()
    assert np.array_equal(it.get_tensor(y), (v + v) * (v + v))

    runner = it.get_signature_runner("serving_default")
    runner.resize_tensor_input("x_in", [1, 2**31 - 1])
    with pytest.raises(oo.TensorMemoryError, match=refused):
        runner.allocate_tensors()
    out = runner(x_in=v)  # resized back by the call, and run
    assert np.array_equal(out["y_out"], (v + v) * (v + v))
    it.close()


# After a larger shape, a smaller one (or the same bytes in another shape)
# needs no new memory: TFLite keeps its arena and never shrinks it.  Under a
# limit below the new bound the guard refused these, and they ran without
# it (a review's differential run): the bound must be compared with the
# arena already there, not only with what malloc can still give.
SHRINK = """
import resource, sys
import numpy as np
import opaque_ops as oo

it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=sys.argv[2] == "xnnpack")
x, y = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
n = 1 << 24  # 64 MiB per float32 tensor
it.resize_tensor_input(x, [1, n])
it.allocate_tensors()
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (32 << 20)  # 32 MiB of room: less than any of the bounds below
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

def chunks(size, step=1 << 20):
    for start in range(0, size, step):
        yield start, (np.arange(start, min(size, start + step), dtype=np.float32) % 5 - 2)


for shape in ([1, n // 2], [n, 1], [1, n]):
    it.resize_tensor_input(x, shape)
    it.allocate_tensors()
    # In place, a chunk at a time: under the limit there is no room for a
    # whole input beside the arena.
    flat = it.tensor(x)().reshape(-1)
    for start, v in chunks(flat.size):
        flat[start : start + v.size] = v
    del flat
    it.invoke()
    out = it.tensor(y)().reshape(-1)
    ok = out.size == shape[0] * shape[1] and all(
        np.array_equal(out[start : start + v.size], (v + v) * (v + v)) for start, v in chunks(out.size)
    )
    del out
    print(shape, "ok:", ok, flush=True)
it.resize_tensor_input(x, [1, 4 * n])  # larger than any arena before: refused
try:
    it.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("grown: TensorMemoryError", exc, flush=True)
"""


@pytest.mark.parametrize("state", [False, True], ids=["plain", "with_a_variable"])
def test_a_shape_that_fits_the_arena_already_there_is_not_refused(state):
    # (With a variable first among the tensors, the arena was looked for
    # around it, in the persistent arena: the same shapes were refused.)
    for mode in ("reference", "xnnpack"):
        p = run_child(SHRINK, squared_sum_model(state=state).hex(), mode, timeout=120)
        assert p.returncode == 0, crashed(p)
        for shape in ("[1, 8388608]", "[16777216, 1]", "[1, 16777216]"):
            assert f"{shape} ok: True" in p.stdout, p.stdout
        assert "grown: TensorMemoryError" in p.stdout and "need at least" in p.stdout, p.stdout


# Two cases the first bound missed (the same review), each a SIGSEGV inside
# AllocateTensors on 2.17 with the guard on:
# - FULLY_CONNECTED with an input size no multiple of its weights': the shape
#   rules refuse it, and the bound was 0, but 2.17's Prepare takes it and
#   the arena grows; the graph inputs still count;
# - the reference MEAN's dynamic temporary: any dynamic tensor made the
#   bound the inputs alone, but only a dynamic *output* stops TFLite's
#   allocation early;
# - a variable feeding the graph (a second review).
MISSED = """
import resource, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.model import ModelBuilder

f32 = np.float32
b = ModelBuilder()
x = b.add_tensor("x", [1, 16], f32)
if sys.argv[1] == "fully_connected":
    w = b.add_constant("w", np.eye(16, dtype=f32))
    y = b.add_tensor("y", [1, 16], f32)
    b.add_op("FULLY_CONNECTED", [x, w, -1], [y])
    size, room = (1 << 26) + 3, 200 << 20  # the input alone (256 MiB) is more than the room
elif sys.argv[1] == "mean":
    axis = b.add_constant("axis", np.array([1], np.int32))
    e = b.add_tensor("e", [1, 16], f32)
    m = b.add_tensor("m", [1, 1], f32)
    y = b.add_tensor("y", [1, 16], f32)
    b.add_op("EXP", [x], [e])
    b.add_op("MEAN", [e, axis], [m], {"keep_dims": True})
    b.add_op("SUB", [e, m], [y])
    size, room = 1 << 26, 400 << 20  # x, e live to SUB: 512 MiB; x alone fits
else:
    # A variable feeding the graph: it had no shape for the shape rules, so
    # every tensor after it counted 0 and the bound was x alone.
    v = b.add_tensor("v", [1, 1], f32, is_variable=True)
    a = b.add_tensor("a", [1, 16], f32)
    y = b.add_tensor("y", [1, 16], f32)
    b.add_op("ADD", [x, v], [a])
    b.add_op("MUL", [a, a], [y])
    size, room = 1 << 26, 400 << 20  # x, a and y: 768 MiB; x alone fits
b.set_inputs([x])
b.set_outputs([y])
it = oo.Interpreter(model_content=b.build(), use_xnnpack=False)
it.allocate_tensors()
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + room,) * 2)
it.resize_tensor_input(0, [1, size])
try:
    it.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("refused: TensorMemoryError", exc, flush=True)
except oo.OpaqueOpsError as exc:
    print("refused:", type(exc).__name__, exc, flush=True)
"""


def test_shapes_the_rules_refuse_and_dynamic_temporaries_still_get_a_bound():
    for case in ("mean", "variable"):
        p = run_child(MISSED, case, timeout=120)
        assert p.returncode == 0, (case, crashed(p))
        assert "refused: TensorMemoryError" in p.stdout and "need at least" in p.stdout, (case, p.stdout)
    # Shapes the rules refuse (2.17's FULLY_CONNECTED would take this input
    # and grow its arena) are refused by the rules before the runtime sees
    # them, whatever the memory.
    p = run_child(MISSED, "fully_connected", timeout=120)
    assert p.returncode == 0, crashed(p)
    assert (
        "refused: ShapeError operator 0 (FULLY_CONNECTED): input [1, 67108867] has 67108867 elements, not a multiple"
        in p.stdout
    ), p.stdout


# Subgraphs other than 0 have arenas of their own, which a signature runner
# resizes and allocates (TfLiteSignatureRunnerAllocateTensors): the same
# crash inside AllocateTensors on 2.17.  The C API reaches such a subgraph's
# tensors only through its signature, so the guard's bound there counts the
# signature's inputs and outputs alone.


def _two_subgraph_model() -> bytes:
    """Subgraph 0: y = x + 1 ("first"); subgraph 1: y = (x + x) * (x + x), its first 4 elements and max ("second").

    The outputs of "second" are small (head: y[:, :4], peak: max(y)), so its
    calls copy no large array: they run under a limit tighter than the arena.
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    one = b.add_constant("one", np.ones((1, 4), np.float32))
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ADD", [x, one], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("first", {"x": x}, {"y": y})
    main = b.build()

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32, shape_signature=[1, -1])
    a = b.add_tensor("a", [1, 4], np.float32, shape_signature=[1, -1])
    y = b.add_tensor("y", [1, 4], np.float32, shape_signature=[1, -1])
    begin = b.add_constant("begin", np.array([0, 0], np.int32))
    size = b.add_constant("size", np.array([1, 4], np.int32))
    axis = b.add_constant("axis", np.array([1], np.int32))
    head = b.add_tensor("head", [1, 4], np.float32)
    peak = b.add_tensor("peak", [1], np.float32)
    b.add_op("ADD", [x, x], [a])
    b.add_op("MUL", [a, a], [y])
    b.add_op("SLICE", [y, begin, size], [head])
    b.add_op("REDUCE_MAX", [y, axis], [peak], {"keep_dims": False})
    b.set_inputs([x])
    b.set_outputs([head, peak])
    other = b.build()

    return join_with_signature(main, other, "second", {"x_in": x}, {"head": head, "peak": peak})


def _second(v) -> dict:
    """What signature "second" gives for ``v``, from its definition (numpy)."""
    y = (v + v) * (v + v)
    return {"head": y[:, :4], "peak": y.max(axis=1)}


def _same(out: dict, v) -> bool:
    want = _second(v)
    return out.keys() == want.keys() and all(np.array_equal(out[k], want[k]) for k in want)


GROW_SUBGRAPH_1 = """
import resource, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.interpreter import arena_guard

if sys.argv[3] == "unguarded":
    arena_guard.refuse_unaffordable = lambda *args: None
it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=sys.argv[2] == "xnnpack")
runner = it.get_signature_runner("second")
runner.allocate_tensors()
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (1 << 30)  # 1 GiB of room: not the 16-24 GiB arena of [1, 2**31 - 1]
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
print("version", oo.runtime_info().version, flush=True)


def attempt(label, fn):
    try:
        fn()
    except oo.TensorMemoryError as exc:
        print(label, "refused: TensorMemoryError:", exc, flush=True)
    except oo.OpaqueOpsError as exc:
        print(label, "refused by the runtime:", type(exc).__name__, exc, flush=True)
    else:
        print(label, "allocated", flush=True)


# resize_tensor_input() then allocate_tensors() ...
runner.resize_tensor_input("x_in", [1, 2**31 - 1])
attempt("allocate:", runner.allocate_tensors)
# ... and a call with an input of the new shape (which resizes and allocates:
# a zero-stride array of that shape costs no memory; refused before it is read).
huge = np.broadcast_to(np.float32(1), (1, 2**31 - 1))
attempt("call:", lambda: runner(x_in=huge))
# The main subgraph, with its own arena, is untouched.
it.allocate_tensors()
v = np.array([[-2.0, 0.5, 1.0, 3.0]], np.float32)
it.set_tensor(it.get_input_details()[0]["index"], v)
it.invoke()
print("main ok:", np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), v + 1), flush=True)
# The runner resizes back with its input, and runs.
print("small:", {k: a.tolist() for k, a in runner(x_in=v).items()}, flush=True)
# A large resize that fits under the cap still runs: 3 x 64 MiB.
v = (np.arange(1 << 24, dtype=np.float32) % 7 - 3).reshape(1, -1)
print("large:", {k: a.tolist() for k, a in runner(x_in=v).items()}, flush=True)
"""

SMALL = np.array([[-2.0, 0.5, 1.0, 3.0]], np.float32)
LARGE = (np.arange(1 << 24, dtype=np.float32) % 7 - 3).reshape(1, -1)


def _printed(out: str, label: str, v) -> bool:
    want = {k: a.tolist() for k, a in _second(v).items()}
    return f"{label} {want}" in out.splitlines()


def test_a_growing_arena_of_subgraph_1_is_refused_and_its_runner_lives():
    data = _two_subgraph_model().hex()
    for mode in ("reference", "xnnpack"):
        p = run_child(GROW_SUBGRAPH_1, data, mode, "guarded", timeout=120)
        assert p.returncode == 0, crashed(p)
        out = p.stdout
        for label, what in (("allocate:", "allocate_tensors"), ("call:", "")):
            line = next(s for s in out.splitlines() if s.startswith(label))
            assert f"refused: TensorMemoryError: signature 'second'{': ' + what if what else ''}" in line, out
            assert "(subgraph 1: input 'x_in' to [1, 2147483647]) need at least " in line, out
            # The bound: the signature's input and outputs, float32 (the
            # intermediates are not reached through the C API).
            assert f"need at least {4 * (2**31 - 1) + 4 * 4 + 4} bytes" in line and "Nothing was allocated" in line, out
        assert "main ok: True" in out, out
        assert _printed(out, "small:", SMALL) and _printed(out, "large:", LARGE), out


def test_without_the_guard_a_runner_of_subgraph_1_dies_on_the_2_17_runtime():
    # What the guard is for in subgraph 1 (and that the test above would see it gone).
    import opaque_ops as oo

    p = run_child(GROW_SUBGRAPH_1, _two_subgraph_model().hex(), "reference", "unguarded", timeout=120)
    if oo.runtime_info().version.startswith("2.17."):
        assert p.signal == 11 and "allocate: allocated" not in p.stdout, crashed(p)
    else:
        # 2.23 reports the failed arena itself, as a bare "error" (it was a
        # KernelError saying only that): subgraph 1's failure is explained as
        # subgraph 0's, with its signature's input, its shape and the bytes
        # (the input and the two outputs, float32).
        assert p.returncode == 0, crashed(p)
        out = p.stdout
        for label, what in (("allocate:", "allocate_tensors: "), ("call:", "")):
            line = next(s for s in out.splitlines() if s.startswith(label))
            assert (
                f"{label} refused: TensorMemoryError: signature 'second': {what}the runtime could not allocate "
                "its tensor arena (it reports that only as 'error'): with its inputs as they are (subgraph 1: "
                f"input 'x_in' resized to [1, 2147483647]) this model needs at least {4 * (2**31 - 1) + 4 * 4 + 4} "
                "bytes"
            ) in line, out
            assert "Nothing was allocated and the interpreter is still usable" in line, out
        assert "main ok: True" in out, out
        assert _printed(out, "small:", SMALL) and _printed(out, "large:", LARGE), out


def test_an_isolated_runner_of_subgraph_1_gets_the_same_refusal():
    # The worker allocates subgraph 1 through the same Interpreter code,
    # under its memory limit.
    import opaque_ops as oo

    it = oo.Interpreter(model_content=_two_subgraph_model(), isolate=True, memory_limit="2G", use_xnnpack=False)
    runner = it.get_signature_runner("second")
    assert _same(runner(x_in=SMALL), SMALL)
    runner.resize_tensor_input("x_in", [1, 2**31 - 1])
    with pytest.raises(oo.TensorMemoryError, match=r"subgraph 1: .*need at least \d+ bytes .*Nothing was allocated"):
        runner.allocate_tensors()
    assert _same(runner(x_in=SMALL), SMALL)
    it.close()


# No false refusal in subgraph 1 either: smaller shapes after a larger one fit
# the arena already there, under a limit below their bound (SHRINK above).
SHRINK_SUBGRAPH_1 = """
import resource, sys
import numpy as np
import opaque_ops as oo

it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=sys.argv[2] == "xnnpack")
runner = it.get_signature_runner("second")
n = 1 << 24  # 64 MiB per float32 tensor
inputs = {k: (np.arange(k, dtype=np.float32) % 5 - 2).reshape(1, k) for k in (n // 2, n // 4, n)}
runner(x_in=inputs[n])  # the arena at its largest
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (32 << 20)  # 32 MiB of room: less than any of the bounds below
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
for k in (n // 2, n // 4, n):
    print(k, {name: a.tolist() for name, a in runner(x_in=inputs[k]).items()}, flush=True)
runner.resize_tensor_input("x_in", [1, 4 * n])  # larger than any arena before: refused
try:
    runner.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("grown: TensorMemoryError", exc, flush=True)
"""


def test_a_shape_that_fits_the_arena_of_subgraph_1_already_there_is_not_refused():
    for mode in ("reference", "xnnpack"):
        p = run_child(SHRINK_SUBGRAPH_1, _two_subgraph_model().hex(), mode, timeout=120)
        assert p.returncode == 0, crashed(p)
        n = 1 << 24
        for k in (n // 2, n // 4, n):
            v = (np.arange(k, dtype=np.float32) % 5 - 2).reshape(1, k)
            assert _printed(p.stdout, str(k), v), p.stdout
        assert "grown: TensorMemoryError" in p.stdout and "subgraph 1: " in p.stdout, p.stdout


# Memory named only when memory is why.  TILE of constant multiples has a
# shape rule, so the guard's bound before the call counts its 1 GiB output
# with the 1 MiB input, and refuses on every runtime before AllocateTensors
# (2.17, which does not check its arena, died there with SIGSEGV while TILE
# had no rule).  A kernel whose Prepare fails, under the same cap and before
# a 1 GiB tensor, keeps its own message: the runtime reports it ("failed to
# prepare"), and the diagnosis speaks only when the runtime said nothing.
TILE = """
import resource, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.model import ModelBuilder

KERNEL = r\"\"\"
#include "opaque_ops.h"
static TfLiteStatus SilentPrepare(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return kTfLiteError; }
static TfLiteStatus SilentInvoke(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return kTfLiteOk; }
OPAQUE_OP("Silent", 1, .prepare = SilentPrepare, .invoke = SilentInvoke);
\"\"\"
f32 = np.float32
b = ModelBuilder()
x = b.add_tensor("x", [1, 4], f32)
if sys.argv[1] == "tile":
    y = b.add_tensor("y", [1, 4096], f32)
    b.add_op("TILE", [x, b.add_constant("multiples", np.array([1, 1024], np.int32))], [y])
    ops = []
else:
    # A kernel that fails its Prepare without reporting anything itself,
    # before a TILE whose output is 1 GiB.
    s = b.add_tensor("s", [1, 4], f32)
    y = b.add_tensor("y", [1, 1 << 28], f32)
    b.add_custom_op("Silent", [x], [s])
    b.add_op("TILE", [s, b.add_constant("multiples", np.array([1, 1 << 26], np.int32))], [y])
    ops = [oo.compile_ops(KERNEL)]
b.set_inputs([x])
b.set_outputs([y])
it = oo.Interpreter(model_content=b.build(), custom_ops=ops, use_xnnpack=sys.argv[2] == "xnnpack")
if sys.argv[1] == "tile":
    it.allocate_tensors()
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20),) * 2)  # no room for 1 GiB
if sys.argv[1] == "tile":
    it.resize_tensor_input(x, [1, 1 << 18])  # x 1 MiB, y 1 GiB
try:
    it.allocate_tensors()
except oo.TensorMemoryError as exc:
    print("refused: TensorMemoryError:", exc, flush=True)
except oo.OpaqueOpsError as exc:
    print("refused:", type(exc).__name__, exc, flush=True)
else:
    print("allocated", flush=True)
# The allocated-shape verdicts kept (and written to the model's record).
print("kept:", sorted(repr(key[1]) for key in it._info.verdicts["store"]._allocated), flush=True)
if sys.argv[1] == "tile":
    it.resize_tensor_input(x, [1, 4])
    it.allocate_tensors()
    v = np.array([[1.0, -2.0, 0.5, 3.0]], f32)
    it.set_tensor(x, v)
    it.invoke()
    print("small ok:", np.array_equal(it.get_tensor(y), np.tile(v, (1, 1024))), flush=True)
"""


@pytest.mark.parametrize("mode", ["reference", "xnnpack"])
def test_memory_is_named_when_the_runtime_says_only_error_and_not_otherwise(mode, tmp_path):
    # (A verdict cache of its own: what it keeps is asserted.)
    p = run_child(TILE, "silent", mode, timeout=120, env={"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path)})
    assert p.returncode == 0, crashed(p)
    assert "refused: KernelError allocate_tensors failed: Node number 0 (Silent) failed to prepare." in p.stdout, (
        p.stdout
    )
    assert "TensorMemoryError" not in p.stdout, p.stdout
    # No verdict from an allocation that failed: the shapes after the node
    # that failed were never planned (a verdict on them was kept, and a later
    # process with the same verdict cache trusted it).
    assert "kept: []" in p.stdout, p.stdout
    p = run_child(TILE, "tile", mode, timeout=120)
    assert p.returncode == 0, crashed(p)
    out = p.stdout
    # x (1 MiB) and y (1 GiB), from the shape rules before the call.
    need = 4 * (1 << 18) + 4 * (1 << 28)
    assert (
        f"refused: TensorMemoryError: allocate_tensors: the inputs as resized (input 0 'x' to [1, 262144]) "
        f"need at least {need} bytes"
    ) in out, out
    assert "Nothing was allocated and the interpreter is still usable" in out, out
    assert "small ok: True" in out, out


# After XNNPACK's reshape of a partition fails ("XNNPack delegate failed to
# reshape runtime": here its workspace for 8 GiB intermediates), the
# delegate keeps the sizes it reshaped to and plans no memory for them; a
# later reshape to a shape up to those sizes plans nothing either, and its
# invoke writes past the workspace: a smaller allocation "succeeded", and a
# 64 MiB one died in invoke (SIGSEGV, both runtimes, subgraph 0 and 1).  And
# the allocated-shape checks, run on the half-planned graph, blamed the
# shape ("output tensor 2 ('y') was planned as [1, 4] ... Resize the input to
# a shape without empty dimensions") and kept that verdict in the model's
# record.  Now: the memory is named, the interpreter is closed with the
# reason, and no verdict is kept.  The guard before the call is turned off:
# it refuses this case first, but its bound can be affordable where
# XNNPACK's workspace is not.
XNNPACK_FAILED = """
import resource, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.interpreter import arena_guard

arena_guard.refuse_unaffordable = lambda *args: None
data = bytes.fromhex(sys.argv[1])
it = oo.Interpreter(model_content=data, use_xnnpack=True)
if sys.argv[2] == "main":
    x = it.get_input_details()[0]["index"]
    resize, allocate = (lambda shape: it.resize_tensor_input(x, shape)), it.allocate_tensors
else:
    runner = it.get_signature_runner("second")
    resize, allocate = (lambda shape: runner.resize_tensor_input("x_in", shape)), runner.allocate_tensors
allocate()
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
cap = vm + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
print("version", oo.runtime_info().version, flush=True)
resize([1, 2**31 - 1])
try:
    allocate()
except oo.OpaqueOpsError as exc:
    print("refused:", type(exc).__name__ + ":", exc, flush=True)
else:
    print("allocated", flush=True)
for shape in ([1, 4], [1, 1 << 24]):
    try:
        resize(shape)
        allocate()
    except oo.ClosedError as exc:
        print(shape, "closed:", exc, flush=True)
    else:
        print(shape, "allocated", flush=True)
# A new interpreter, as the message says, runs the 64 MiB shape.
v = (np.arange(1 << 24, dtype=np.float32) % 7 - 3).reshape(1, -1)
fresh = oo.Interpreter(model_content=data, use_xnnpack=True)
if sys.argv[2] == "main":
    fresh.resize_tensor_input(x, v.shape)
    fresh.allocate_tensors()
    fresh.set_tensor(x, v)
    fresh.invoke()
    out = fresh.get_tensor(fresh.get_output_details()[0]["index"])
    print("fresh ok:", np.array_equal(out, (v + v) * (v + v)), flush=True)
else:
    got = fresh.get_signature_runner("second")(x_in=v)
    y = (v + v) * (v + v)
    print("fresh ok:", np.array_equal(got["head"], y[:, :4]) and np.array_equal(got["peak"], y.max(axis=1)), flush=True)
"""

# What a later process finds in the model's record (the same verdict cache):
# the input shapes of the allocated-shape verdicts it would trust.
VERDICTS = """
import sys
import opaque_ops as oo

it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=True)
print("kept:", sorted(repr(key[1]) for key in it._info.verdicts["store"]._allocated), flush=True)
"""


@pytest.mark.parametrize("target", ["main", "second"])
def test_a_failed_xnnpack_reshape_names_memory_closes_the_interpreter_and_keeps_no_verdict(target, tmp_path):
    data = (squared_sum_model() if target == "main" else _two_subgraph_model()).hex()
    env = {"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path)}
    p = run_child(XNNPACK_FAILED, data, target, timeout=120, env=env)
    assert p.returncode == 0, crashed(p)
    out = p.stdout
    what = "allocate_tensors" if target == "main" else "signature 'second': allocate_tensors"
    refused = next(s for s in out.splitlines() if s.startswith("refused:"))
    assert (
        f"refused: TensorMemoryError: {what}: the runtime could not allocate its tensor arena (XNNPACK said "
        "only 'XNNPack delegate failed to reshape runtime'): with its inputs as they are ("
    ) in refused, out
    assert "resized to [1, 2147483647]) this model needs at least " in refused, out
    assert "this Interpreter was closed, create a new one" in refused and "ModelError" not in out, out
    # Every later call is refused, with the reason (the 64 MiB one was a SIGSEGV).
    for shape in ("[1, 4]", "[1, 16777216]"):
        assert f"{shape} closed: this Interpreter was closed after {what} failed inside XNNPACK's reshape" in out, out
    assert "fresh ok: True" in out, out
    # The record holds the verdict of the first allocation ([1, 4]) and none
    # for the shape whose allocation failed.
    p = run_child(VERDICTS, data, timeout=120, env=env)
    assert p.returncode == 0, crashed(p)
    kept = p.stdout
    if target == "main":
        assert "((1, 4),)" in kept, kept
    assert "2147483647" not in kept, kept


# A first allocation of a subgraph other than 0 that fails (its declared
# input is 1 GiB; no resize, so the guard is not asked): on 2.17 the
# runner's allocate_tensors() "succeeded" with the input at address 0, and
# its call said "NotAllocatedError: ... call allocate_tensors() first"; on
# 2.23 it was a KernelError "error".  Both now name the memory.


def _large_subgraph_1_model() -> bytes:
    """Subgraph 0: y = x + 1; subgraph 1 ("second"): peak = max((x + x) * (x + x)), x declared [1, 2**28] (1 GiB)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.float32)
    one = b.add_constant("one", np.ones((1, 4), np.float32))
    y = b.add_tensor("y", [1, 4], np.float32)
    b.add_op("ADD", [x, one], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("first", {"x": x}, {"y": y})
    main = b.build()

    b = ModelBuilder()
    x = b.add_tensor("x", [1, ELEMENTS], np.float32)
    a = b.add_tensor("a", [1, ELEMENTS], np.float32)
    y = b.add_tensor("y", [1, ELEMENTS], np.float32)
    axis = b.add_constant("axis", np.array([1], np.int32))
    peak = b.add_tensor("peak", [1], np.float32)
    b.add_op("ADD", [x, x], [a])
    b.add_op("MUL", [a, a], [y])
    b.add_op("REDUCE_MAX", [y, axis], [peak], {"keep_dims": False})
    b.set_inputs([x])
    b.set_outputs([peak])
    other = b.build()

    return join_with_signature(main, other, "second", {"x_in": x}, {"peak": peak})


FIRST_SUBGRAPH_1 = """
import resource, sys
import numpy as np
import opaque_ops as oo

it = oo.Interpreter(model_content=bytes.fromhex(sys.argv[1]), use_xnnpack=False)
it.allocate_tensors()
runner = it.get_signature_runner("second")
vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20),) * 2)  # no room for 1 GiB
print("version", oo.runtime_info().version, flush=True)
huge = np.broadcast_to(np.float32(1), (1, 1 << 28))  # (no memory: refused before it is read)
for label, fn in (("allocate:", runner.allocate_tensors), ("call:", lambda: runner(x_in=huge))):
    try:
        fn()
    except oo.OpaqueOpsError as exc:
        print(label, type(exc).__name__ + ":", exc, flush=True)
    else:
        print(label, "ok", flush=True)
"""


def test_a_failed_first_allocation_of_subgraph_1_names_memory():
    p = run_child(FIRST_SUBGRAPH_1, _large_subgraph_1_model().hex(), timeout=120)
    assert p.returncode == 0, crashed(p)
    out = p.stdout
    assert "NotAllocatedError" not in out and "KernelError" not in out, out
    if out.split("version ")[1].startswith("2.17."):
        # 2.17 reports success: the input at address 0 says what failed, and
        # the interpreter is closed (the arena keeps the failed buffer).
        assert (
            "allocate: TensorMemoryError: the runtime could not allocate the memory for this model's tensors "
            f"(its arena allocation failed, which TFLite does not report: subgraph 1's input 'x_in', {4 * ELEMENTS} "
            "bytes, was left at address 0)"
        ) in out, out
        assert "call: ClosedError: this Interpreter was closed: the runtime could not allocate" in out, out
    else:
        for label, what in (("allocate:", "allocate_tensors: "), ("call:", "")):
            assert (
                f"{label} TensorMemoryError: signature 'second': {what}the runtime could not allocate its tensor "
                "arena (it reports that only as 'error'): with its inputs as they are (subgraph 1: input 'x_in' "
                f"of shape [1, {ELEMENTS}]) this model needs at least {4 * ELEMENTS + 4} bytes"
            ) in out, out
