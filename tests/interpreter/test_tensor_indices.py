"""Tensor indices and dtypes are validated the same on every path, cached or not, in-process or isolated.

Found by a review's attack: ``set_tensor(1.0, ...)`` and ``set_tensor(True,
...)`` raised ``TypeError`` until one call with the int 1 had cached the
tensor's view, and were then accepted and wrote tensor 1 (``1.0 == True ==
1`` find the same dict entry); an index past a C int raised cffi's
``OverflowError``; a big-endian array was refused as "expected dtype
float32, received float32".
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.interpreter_models import doubling_model


@pytest.fixture(params=[False, True], ids=["in-process", "isolated"])
def it(request):
    with oo.Interpreter(model_content=doubling_model([3]), isolate=request.param) as it:
        it.allocate_tensors()
        yield it


X = np.arange(3, dtype=np.float32)


@pytest.mark.parametrize("cached", [False, True], ids=["first call", "after the view is cached"])
@pytest.mark.parametrize("index", [0.0, False, 1.0, True, "0", None], ids=repr)
def test_an_index_that_is_not_an_int_is_refused(it, cached, index):
    if cached:  # the calls with the int index cache the tensors' views
        it.set_tensor(0, X)
        it.invoke()
        it.get_tensor(1)
    with pytest.raises(TypeError, match="tensor index must be an int"):
        it.set_tensor(index, X)
    with pytest.raises(TypeError, match="tensor index must be an int"):
        it.get_tensor(index)
    with pytest.raises(TypeError, match="tensor index must be an int"):
        it.tensor(index)


def test_numpy_integers_are_indices(it):
    it.set_tensor(np.int64(0), X)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(np.int32(1)), X + X)
    np.testing.assert_array_equal(it.tensor(np.int64(1))(), X + X)


@pytest.mark.parametrize("index", [2**31, 2**40, -(2**31) - 1, 10**30], ids=repr)
def test_an_index_past_a_c_int_is_out_of_range(it, index):
    for call in (lambda: it.set_tensor(index, X), lambda: it.get_tensor(index)):
        with pytest.raises(oo.InvalidInputError, match="out of range"):
            call()


def test_a_big_endian_array_is_refused_saying_so(it):
    big = np.arange(3, dtype=">f4")
    for call in (lambda: it.set_tensor(0, big), lambda: it.get_signature_runner("s")(x=big)):
        with pytest.raises(oo.InvalidInputError) as info:
            call()
        msg = str(info.value)
        assert "big-endian" in msg and "np.asarray(value, dtype=np.float32)" in msg, msg
    it.set_tensor(0, np.asarray(big, dtype=np.float32))  # the fix the message gives
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(1), X + X)
