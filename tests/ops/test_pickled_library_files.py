"""An unpickled op library never loads a file other than the one pickled (issue 17, item 4).

A ``compile_ops`` library pickles as its cache entry's path (and its source);
a ``load_ops`` library as its path and the SHA-256 of the bytes it loaded.
Between pickling and unpickling the file is truncated (an interrupted copy:
SIGBUS in ``dlopen`` if loaded), damaged at the same size (SIGTRAP or wrong
code), or swapped for another valid library with an op of the same name (which
would silently compute something else).  The receiving process must either
compile again and compute the right numbers (``compile_ops``: the cache's
digest check) or refuse cleanly (``load_ops``).  Each case builds and pickles
in one child process, changes the file, and unpickles in another: a changed
file is never loaded by the process that loaded the original.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN
from tests.helpers.child_process import crashed, run_child

# A valid library with an op of the same name that computes something else (y = x).
IMPOSTOR = r"""
#include "opaque_ops.h"
static TfLiteStatus Prepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(ctx, node, 0);
  int n = TfLiteOpaqueTensorNumDims(in);
  TfLiteIntArray* shape = TfLiteIntArrayCreate(n);
  for (int i = 0; i < n; ++i) shape->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(ctx, TfLiteOpaqueNodeGetOutput(ctx, node, 0), shape);
}
static TfLiteStatus Invoke(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  const float* x = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetInput(ctx, node, 0));
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(ctx, node, 0));
  size_t n = TfLiteOpaqueTensorByteSize(TfLiteOpaqueNodeGetInput(ctx, node, 0)) / sizeof(float);
  for (size_t i = 0; i < n; ++i) y[i] = x[i];
  return kTfLiteOk;
}
OPAQUE_OP("Atan", 1, .prepare = Prepare, .invoke = Invoke);
"""

MAKE = r"""
import pickle, sys
import opaque_ops as oo
kind, source, cache, impostor_cache, impostor_source = sys.argv[1:]
if kind == "compile":
    lib = oo.compile_ops(source, cache_dir=cache)
else:
    built = oo.compile_ops(source, cache_dir=cache).path
    import shutil, pathlib
    path = pathlib.Path(cache) / "my_ops.so"
    shutil.copy(built, path)
    lib = oo.load_ops(path)
impostor = oo.compile_ops(impostor_source, cache_dir=impostor_cache)
print(str(lib.path))
print(str(impostor.path))
print(pickle.dumps(lib).hex())
"""

RESTORE = r"""
import pickle, sys
import numpy as np
import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT
try:
    lib = pickle.loads(bytes.fromhex(open(sys.argv[1]).read()))
    (y,) = oo.testing.run_op(lib, "Atan", inputs=[ATAN_INPUT])
except oo.OpaqueOpsError as exc:
    print("REFUSED", type(exc).__name__, str(exc).replace(chr(10), " "))
else:
    print("RESULT", y.tobytes().hex())
"""


def _damage(path: str, impostor: str, how: str) -> None:
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "same_size":
        mid = len(data) // 2
        data = data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 4096]) + data[mid + 4096 :]
    elif how == "swapped":
        data = open(impostor, "rb").read()
    with open(path, "wb") as f:
        f.write(data)


def _make(kind: str, tmp_path, source: str) -> tuple[str, str, str]:
    src, impostor_src = tmp_path / "ops.c", tmp_path / "impostor.c"
    src.write_text(source)
    impostor_src.write_text(IMPOSTOR)
    made = run_child(MAKE, kind, src, tmp_path / "cache", tmp_path / "impostor", impostor_src)
    assert made.returncode == 0, crashed(made)
    path, impostor, blob = made.stdout.split()
    return path, impostor, blob


def _restore(blob: str, tmp_path):
    pickled = tmp_path / "pickled.hex"
    pickled.write_text(blob)
    restored = run_child(RESTORE, pickled)
    assert restored.returncode == 0, crashed(restored)
    return restored.stdout.strip()


def _atan() -> np.ndarray:
    return np.arctan(ATAN_INPUT.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("how", ["truncated", "same_size", "swapped"])
def test_compile_ops_library_with_a_changed_cache_entry_is_compiled_again(tmp_path, how):
    path, impostor, blob = _make("compile", tmp_path, MACRO_ATAN + f"/* {how} */")
    _damage(path, impostor, how)
    out = _restore(blob, tmp_path)
    assert out.startswith("RESULT "), out
    y = np.frombuffer(bytes.fromhex(out.split()[1]), np.float32)
    # The right numbers (not the impostor's y = x): the entry was rebuilt from the source.
    np.testing.assert_array_max_ulp(y, _atan(), maxulp=2)
    assert open(path, "rb").read() != open(impostor, "rb").read()


@pytest.mark.parametrize("how", ["truncated", "same_size", "swapped"])
def test_load_ops_library_with_a_changed_file_is_refused(tmp_path, how):
    path, impostor, blob = _make("load", tmp_path, MACRO_ATAN + f"/* load {how} */")
    _damage(path, impostor, how)
    out = _restore(blob, tmp_path)
    assert out.startswith("REFUSED OpLibraryError"), out
    assert path in out and "changed since" in out, out


def test_unchanged_files_restore_and_compute(tmp_path):
    for kind in ("compile", "load"):
        (tmp_path / kind).mkdir()
        _path, _impostor, blob = _make(kind, tmp_path / kind, MACRO_ATAN + "/* unchanged */")
        out = _restore(blob, tmp_path / kind)
        assert out.startswith("RESULT "), out
        np.testing.assert_array_max_ulp(np.frombuffer(bytes.fromhex(out.split()[1]), np.float32), _atan(), maxulp=2)


def test_impostor_really_differs(tmp_path):
    """The swapped-in library is loadable and computes y = x (so the test above would see it)."""
    _path, impostor, _blob = _make("compile", tmp_path, MACRO_ATAN + "/* impostor check */")
    copy = tmp_path / "impostor_copy.so"
    shutil.copy(impostor, copy)
    p = run_child(
        """
        import sys, opaque_ops as oo
        from tests.helpers.atan import ATAN_INPUT
        (y,) = oo.testing.run_op(oo.load_ops(sys.argv[1]), "Atan", inputs=[ATAN_INPUT])
        print(bool((y == ATAN_INPUT).all()))
        """,
        copy,
    )
    assert p.returncode == 0 and p.stdout.strip() == "True", crashed(p)
