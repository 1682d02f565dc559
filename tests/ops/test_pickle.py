"""Pickling interpreters and op libraries: multiprocessing and ProcessPoolExecutor workers.

What crosses (each class's own __reduce__: Interpreter, OpLibrary, python_op, Delegate): the model bytes, the constructor's
arguments, the input shapes and whether it was allocated; bundled kernels by
name, compile_ops libraries by path (or their source where the file is
gone), load_ops libraries by path, python_ops by reference to importable
functions, delegates by plugin path and options.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers import pickled_ops
from tests.helpers.atan import ATAN_INPUT
from tests.helpers.child_process import crashed, run_child
from tests.helpers.locations import ADD_DELEGATE_PLUGIN_C, package_file

X = np.array([-2.0, -0.25, 0.0, 0.5, 3.0, 100.0], np.float32)


def _close(y, ref):
    # The bundled Atan is within 2 ulp of atan in float64 (c/kernels/atan.c).
    assert y.dtype == ref.dtype and y.shape == ref.shape
    np.testing.assert_array_max_ulp(y, ref, maxulp=2)


def _ops():
    return [oo.python_op("PyTriple", invoke=pickled_ops.py_triple), oo.kernels.atan()]


def test_round_trip_in_process_keeps_shapes_allocation_and_arguments():
    it = oo.Interpreter(
        model_content=pickled_ops.triple_atan_model(), custom_ops=_ops(), num_threads=1, use_xnnpack=False
    )
    it.resize_tensor_input(0, [3])
    it.allocate_tensors()
    copy = pickle.loads(pickle.dumps(it))
    assert copy is not it and type(copy) is oo.Interpreter
    assert list(copy.get_input_details()[0]["shape"]) == [3]
    assert copy.xnnpack is False and copy._init_args["num_threads"] == 1
    copy.set_tensor(0, X[:3])
    copy.invoke()  # allocated already, as the original was
    _close(copy.get_tensor(copy.get_output_details()[0]["index"]), pickled_ops.reference(X[:3]))
    # An interpreter pickled before allocate_tensors() arrives unallocated.
    fresh = pickle.loads(pickle.dumps(oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops())))
    with pytest.raises(oo.NotAllocatedError):
        fresh.invoke()


def test_tensor_contents_do_not_travel():
    it = oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops())
    it.allocate_tensors()
    it.set_tensor(0, X)
    copy = pickle.loads(pickle.dumps(it))
    assert not np.array_equal(copy.get_tensor(0), X)


def test_closed_interpreter_and_lambda_python_op_give_clear_errors():
    it = oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops())
    it.close()
    with pytest.raises(oo.ClosedError, match="closed Interpreter cannot be pickled"):
        pickle.dumps(it)
    op = oo.python_op("PyTriple", invoke=lambda i, o: None)
    with pytest.raises(pickle.PicklingError) as e:
        pickle.dumps(oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=[op, oo.kernels.atan()]))
    msg = str(e.value)
    assert "python_op 'PyTriple'" in msg and "<locals>.<lambda>'" in msg and "module level" in msg


def test_bundled_kernels_travel_by_name_and_rebuild_in_an_empty_cache(tmp_path):
    blob = pickle.dumps(oo.kernels.atan())
    assert b"atan" in blob and str(oo.kernels.atan().path).encode() in blob
    # A worker with its own, empty compile cache (another machine) builds the kernel from its name.
    p = run_child(f"""
        import os, pickle
        os.environ["OPAQUE_OPS_CACHE_DIR"] = {str(tmp_path / "other_cache")!r}
        lib = pickle.loads({blob!r})
        print(lib.names, str(lib.path).startswith({str(tmp_path / "other_cache")!r}))
    """)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split() == ["['Atan']", "True"]


def test_compile_ops_library_rebuilds_from_its_source_where_the_file_is_gone(tmp_path, atan_source):
    src = tmp_path / "my_atan.c"
    shutil.copy(atan_source, src)
    lib = oo.compile_ops(src, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=tmp_path / "cache")
    same_machine = pickle.loads(pickle.dumps(lib))
    assert same_machine.path == lib.path and same_machine.names == ["Atan"]
    blob = pickle.dumps(lib)
    # Another machine: neither the library nor the source file exists there.
    shutil.rmtree(tmp_path / "cache")
    src.unlink()
    other = pickle.loads(blob)
    assert other.names == ["Atan"] and other.path.is_file()
    (y,) = oo.testing.run_op(other, "Atan", inputs=[ATAN_INPUT])
    np.testing.assert_array_equal(y, np.arctan(ATAN_INPUT.astype(np.float64)).astype(np.float32))


def test_a_compile_ops_library_is_restored_only_through_the_verified_cache(tmp_path, atan_source):
    # The library is built and pickled in one process, its cache entry damaged
    # after that (never loaded here: changing a loaded library's file could
    # crash this process), and the pickle restored in another process.
    cache = tmp_path / "cache"
    made = run_child(f"""
        import pickle, opaque_ops as oo
        lib = oo.compile_ops({str(atan_source)!r}, ops={{"Atan": "AtanOpRegistrationExternal"}},
                             cache_dir={str(cache)!r})
        print(str(lib.path))
        print(pickle.dumps(lib).hex())
    """)
    assert made.returncode == 0, crashed(made)
    path, blob = made.stdout.split()
    with open(path, "ab") as f:
        f.write(b"not what was built")
    restored = run_child(f"""
        import pickle
        from opaque_ops._digest import of_file
        lib = pickle.loads(bytes.fromhex({blob!r}))
        print(lib.names, str(lib.path).startswith({str(cache)!r}),
              of_file(lib.path) == lib.path.name[:-3].rsplit("-", 1)[-1])
    """)
    assert restored.returncode == 0, crashed(restored)
    # The damaged entry failed the digest check: the library was built again, not loaded as it was.
    assert restored.stdout.split() == ["['Atan']", "True", "True"]
    assert not Path(path).read_bytes().endswith(b"not what was built")


def test_a_bundled_kernel_the_receiver_cannot_build_comes_from_the_senders_cache_entry_only_if_it_checks(tmp_path):
    # The receiver has no compiler ($CC names a missing program) and its own
    # empty cache: restoring a bundled kernel falls back to the sender's file.
    # That file is a compile cache entry (KEY-COMPILER-DIGEST.so), so it is
    # loaded only through the cache's checks (owner, mode, digest): once as
    # built, and refused once damaged.
    made = run_child(
        """
        import pickle, opaque_ops as oo
        lib = oo.kernels.atan()
        print(str(lib.path), bool(lib.prebuilt))
        print(pickle.dumps(lib).hex())
        """,
        env={"OPAQUE_OPS_CACHE_DIR": str(tmp_path / "sender")},
    )
    assert made.returncode == 0, crashed(made)
    path, prebuilt, blob = made.stdout.split()
    # (A checkout has no prebuilt kernels: this one was compiled into the sender's cache.)
    assert prebuilt == "False" and Path(path).parent == tmp_path / "sender", path
    restore = """
        import pickle
        from opaque_ops.errors import OpaqueOpsError
        try:
            lib = pickle.loads(bytes.fromhex(BLOB))
        except OpaqueOpsError as exc:
            print("refused", type(exc).__name__)
        else:
            print("loaded", lib.names, str(lib.path) == PATH)
    """.replace("BLOB", repr(blob)).replace("PATH", repr(path))
    receiver = {"OPAQUE_OPS_CACHE_DIR": str(tmp_path / "receiver"), "CC": str(tmp_path / "no-such-cc")}
    as_built = run_child(restore, env=receiver)
    assert as_built.returncode == 0, crashed(as_built)
    assert as_built.stdout.split() == ["loaded", "['Atan']", "True"]
    with open(path, "ab") as f:
        f.write(b"not what was built")  # still loadable by dlopen: only the digest tells
    damaged = run_child(restore, env=receiver)
    assert damaged.returncode == 0, crashed(damaged)
    assert damaged.stdout.split() == ["refused", "CompileError"]


def test_load_ops_library_travels_by_path_with_a_clear_error_where_it_is_missing(tmp_path):
    built = tmp_path / "atan_prebuilt.so"
    shutil.copy(oo.kernels.atan().path, built)
    blob = pickle.dumps(oo.load_ops(built))
    assert pickle.loads(blob).names == ["Atan"]
    built.unlink()
    with pytest.raises(oo.OpLibraryError, match="does not exist in this process's file system"):
        pickle.loads(blob)


def test_signature_runner_travels_with_its_interpreter():
    it = oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops())
    runner = pickle.loads(pickle.dumps(it.get_signature_runner("run")))
    _close(runner(x=X)["y"], pickled_ops.reference(X))


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_multiprocessing_pool_workers_get_working_interpreters(method):
    it = oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops())
    it.allocate_tensors()
    batches = [X, X[:2] * 7, X[::-1].copy(), np.linspace(-9, 9, 11, dtype=np.float32)]
    with mp.get_context(method).Pool(2, initializer=pickled_ops.init_worker, initargs=(it,)) as pool:
        results = pool.map(pickled_ops.run_in_worker, batches)
    for x, (y, pid) in zip(batches, results):
        assert pid != os.getpid()
        _close(y, pickled_ops.reference(x))


def test_process_pool_executor_real_model_bit_identical_to_in_process():
    # MediaPipe's selfie model (custom op Convolution2DTransposeBias, bundled
    # kernels travel by name); each task receives the interpreter itself.
    model = package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")
    it = oo.Interpreter(model_path=str(model), custom_ops=[oo.kernels.mediapipe()], num_threads=1)
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    frames = [rng.random((1, 256, 256, 3), dtype=np.float32) for _ in range(3)]
    here = [pickled_ops.run(it, f) for f in frames]
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        there = list(ex.map(pickled_ops.run_passed, [it] * len(frames), frames))
    for a, (b, pid) in zip(here, there):
        assert pid != os.getpid()
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_worker_sees_the_arguments_and_state():
    it = oo.Interpreter(model_content=pickled_ops.triple_atan_model(), custom_ops=_ops(), use_xnnpack=False)
    it.resize_tensor_input(0, [4])
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        unallocated = ex.submit(pickled_ops.describe, it).result()
        it.allocate_tensors()
        allocated = ex.submit(pickled_ops.describe, it).result()
    assert unallocated == {"shape": [4], "state": "NotAllocatedError", "xnnpack": False, "ops": ["Atan", "PyTriple"]}
    assert allocated == dict(unallocated, state="allocated")


def test_delegate_travels_as_plugin_path_and_options(tmp_path):
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    plugin = tmp_path / "add_delegate.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(plugin), str(ADD_DELEGATE_PLUGIN_C)], check=True)
    d = oo.load_delegate(str(plugin), {"extra": 100})
    copy = pickle.loads(pickle.dumps(d))
    assert copy is not d and copy.library == d.library and copy._options == {"extra": 100}
