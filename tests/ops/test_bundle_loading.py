"""A bundle of kernel files loads only the files whose ops a model uses (opaque_ops.ops.library.OpBundle).

``kernels.mediapipe()`` names six kernel files; selfie segmentation uses one
op of one of them (Convolution2DTransposeBias) and face detection none.  What
is loaded is read from the process's own memory map, not from the bundle.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops import kernels
from opaque_ops.ops.library import DeferredKernel, OpBundle
from tests.helpers.child_process import crashed, run_child
from tests.helpers.locations import package_file

FACE = package_file("mediapipe", "modules", "face_detection", "face_detection_short_range.tflite")
SELFIE = package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")

_MAPPED = """
import json, sys
import opaque_ops as oo
from opaque_ops import kernels

def mapped():
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if len(line.split()) >= 6}

bundle = kernels.mediapipe()
it = oo.Interpreter(model_path=sys.argv[1], custom_ops=[bundle])
it.allocate_tensors()
it.invoke()
after_model = mapped()
everything = bundle.libraries  # loads the rest
after_all = mapped()
paths = {lib.path.name: str(lib.path) for lib in everything}
files = dict(zip(kernels.expand("mediapipe"), everything))
print(json.dumps({
    "after_model": sorted(n for n, lib in files.items() if str(lib.path) in after_model),
    "after_all": sorted(n for n, lib in files.items() if str(lib.path) in after_all),
}))
"""


@pytest.mark.parametrize(
    ("model", "loaded"), [(SELFIE, ["convolution2d_transpose_bias"]), (FACE, [])], ids=["selfie", "face"]
)
def test_an_interpreter_loads_only_the_kernel_files_its_model_uses(model, loaded):
    p = run_child(_MAPPED, model)
    assert p.returncode == 0, crashed(p)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["after_model"] == loaded
    assert seen["after_all"] == sorted(kernels.expand("mediapipe"))


def test_a_bundle_names_its_ops_without_loading_and_they_are_what_the_loaded_files_register():
    lazy = kernels.bundle("mediapipe")
    assert all(isinstance(e, DeferredKernel) for e in lazy._entries)
    declared = lazy.ops
    assert all(isinstance(e, DeferredKernel) for e in lazy._entries)  # .ops loaded nothing
    loaded = OpBundle([kernels.kernel(n) for n in kernels.expand("mediapipe")])
    assert declared == loaded.ops
    assert sorted((o.name, o.version) for o in lazy.operators()) == loaded.ops


def test_selfie_on_a_lazy_bundle_is_bit_identical_to_every_file_loaded():
    rng = np.random.default_rng(7)
    image = rng.random((1, 256, 256, 3), dtype=np.float32)
    outs = []
    for bundle in (kernels.mediapipe(), OpBundle(kernels.mediapipe().libraries)):
        it = oo.Interpreter(model_path=str(SELFIE), custom_ops=[bundle], num_threads=1)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], image)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert outs[0].dtype == np.float32 and outs[0].size > 0
    np.testing.assert_array_equal(outs[0], outs[1])


def test_two_providers_of_one_op_are_refused_even_where_the_model_does_not_use_it():
    # Face detection uses no custom op; the duplicate is still an error, decided on what each declares.
    with pytest.raises(oo.OpaqueOpsError, match="MaxUnpooling2D v1 is provided by both"):
        oo.Interpreter(model_path=str(FACE), custom_ops=[kernels.mediapipe(), kernels.kernel("max_unpooling")])


def test_a_pickled_bundle_keeps_unloaded_files_unloaded_and_runs():
    bundle = kernels.bundle("mediapipe")
    it = oo.Interpreter(model_path=str(SELFIE), custom_ops=[bundle])  # loads one file of six
    kinds = [type(e).__name__ for e in bundle._entries]
    assert kinds.count("OpLibrary") == 1 and kinds.count("DeferredKernel") == 5
    copy = pickle.loads(pickle.dumps(bundle))
    assert [type(e).__name__ for e in copy._entries] == kinds
    assert copy.ops == bundle.ops and copy.name == bundle.name
    again = pickle.loads(pickle.dumps(it))
    image = np.full((1, 256, 256, 3), 0.5, np.float32)
    got = []
    for x in (it, again):
        x.allocate_tensors()
        x.set_tensor(x.get_input_details()[0]["index"], image)
        x.invoke()
        got.append(x.get_tensor(x.get_output_details()[0]["index"]))
    np.testing.assert_array_equal(got[0], got[1])


def test_a_name_that_is_no_kernel_file_declares_nothing_and_fails_to_load_with_the_list():
    d = DeferredKernel("no_such_kernel")
    assert d.ops == []
    with pytest.raises(ValueError, match="no bundled kernel 'no_such_kernel'; available: .*max_unpooling"):
        d.load()


_CROSSINGS = """
import hashlib, os, sys, threading
import numpy as np
import opaque_ops as oo
from opaque_ops import kernels

image = np.random.default_rng(3).random((1, 256, 256, 3), dtype=np.float32)

def run(bundle):
    it = oo.Interpreter(model_path=sys.argv[1], custom_ops=[bundle], num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], image)
    it.invoke()
    return hashlib.sha256(it.get_tensor(it.get_output_details()[0]["index"]).tobytes()).hexdigest()

# A fork before any file is loaded: the child loads it.
bundle = kernels.mediapipe()
pid = os.fork()
if pid == 0:
    try:
        print("FORKED", run(bundle), flush=True)
    finally:
        os._exit(0)
os.waitpid(pid, 0)
# Four threads load the same file of one bundle at once.
shared = kernels.mediapipe()
barrier = threading.Barrier(4)
out = []
def worker():
    barrier.wait()
    out.append(run(shared))
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("THREADS", *out)
print("AFTER", run(kernels.bundle("mediapipe")), len({id(lib) for lib in shared.libraries}))
"""


def test_a_lazy_bundle_under_fork_and_threads_gives_the_same_bytes():
    p = run_child(_CROSSINGS, SELFIE, timeout=300)
    assert p.returncode == 0, crashed(p)
    lines = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines() if line.split()}
    [forked] = lines["FORKED"]
    threads = lines["THREADS"]
    after, libraries = lines["AFTER"]
    assert len(threads) == 4 and set(threads) == {forked} == {after}
    assert libraries == "6"
