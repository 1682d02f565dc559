"""Lifetimes: no memory growth over create/close cycles, and objects that outlive, or die before, each other.

The long version (10k create/close cycles) is tools/leak_check.py, here behind ``-m slow``.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT
from tests.helpers.atan import reference as atan_ref
from tools import leak_check


@pytest.mark.parametrize("kind", ["c", "python"])
def test_no_memory_growth_over_1500_cycles(kind):
    # 10k cycles may grow < 2 MB (200 bytes/cycle); 1500 cycles get that share.
    res = leak_check.measure(kind, cycles=1500, warmup=200)
    assert res["growth_mb"] < 0.3, res


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["builtin", "c", "python"])
def test_no_memory_growth_over_10k_cycles(kind):
    res = leak_check.measure(kind, cycles=10000, warmup=500)
    assert res["growth_mb"] < 2.0, res


def _atan_interp(atan_model_bytes, lib):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[lib])
    it.allocate_tensors()
    return it


def test_signature_runner_outlives_its_interpreter(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    runner = it.get_signature_runner()
    r_it = weakref.ref(it)
    del it
    gc.collect()
    # The runner keeps the interpreter alive and still works.
    np.testing.assert_allclose(runner(x=ATAN_INPUT)["y"], atan_ref(ATAN_INPUT), rtol=1e-6)
    del runner
    gc.collect()
    assert r_it() is None


def test_signature_runner_after_close_raises(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    runner = it.get_signature_runner()
    it.close()
    with pytest.raises(oo.ClosedError):
        runner(x=ATAN_INPUT)
    with pytest.raises(oo.ClosedError):
        runner.allocate_tensors()
    with pytest.raises(oo.ClosedError):
        it.get_signature_runner()
    del runner
    gc.collect()


def test_tensor_accessor_after_close(atan_model_bytes, guide_atan):
    it = _atan_interp(atan_model_bytes, guide_atan)
    it.set_tensor(0, ATAN_INPUT)
    it.invoke()
    out = it.tensor(it.get_output_details()[0]["index"])
    it.close()
    # The accessor made before close() still reads valid memory.
    np.testing.assert_allclose(out(), atan_ref(ATAN_INPUT), rtol=1e-6)
    with pytest.raises(oo.ClosedError):
        it.tensor(0)
    with pytest.raises(oo.ClosedError):
        it.set_tensor(0, ATAN_INPUT)
    with pytest.raises(oo.ClosedError):
        it.get_tensor(0)
    with pytest.raises(oo.ClosedError):
        it.allocate_tensors()
    it.cancel()  # a no-op on a closed interpreter
    del it, out
    gc.collect()


def test_op_library_deleted_before_interpreter(atan_model_bytes, atan_source):
    lib = oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"})
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[lib])
    r_lib = weakref.ref(lib)
    del lib
    gc.collect()
    it.allocate_tensors()
    it.set_tensor(0, ATAN_INPUT)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), atan_ref(ATAN_INPUT), rtol=1e-6)
    del it
    gc.collect()
    assert r_lib() is None  # the interpreter held the library, and let it go


def test_many_interpreters_collected_in_one_gc_cycle(atan_model_bytes, guide_atan):
    # Interpreters, runners and views in reference cycles, freed together by
    # the cyclic collector in whatever order it picks.
    refs = []
    for _ in range(30):
        it = _atan_interp(atan_model_bytes, guide_atan)
        it.runner = it.get_signature_runner()
        it.runner.back = it
        it.view = it.tensor(0)
        refs.append(weakref.ref(it))
    del it
    gc.collect()
    assert all(r() is None for r in refs)
