"""The objects of the lifecycle matrix and how each one runs (imported by the case's child process).

A *subject* is one public object in a working configuration: an interpreter
(in-process or isolated), a signature runner, an interpreter built on a
compiled, loaded or bundled op library, on a ``python_op`` or on a delegate,
and ``tensor()`` views.  :func:`make` builds one from the files of a case's
own directory (so a case may change, damage or remove them), and
:meth:`Subject.run` runs it on an input and returns the output as a copy.

The python ops here are module-level so that a pickle or the isolated worker
can import them.  Their input also carries commands for the worker-death
events: a first element of :data:`EXIT` ends the process, :data:`SPIN` spins
holding the GIL, :data:`SLEEP` sleeps, :data:`HOG` allocates past any small cap.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import opaque_ops as oo
from tests.helpers.atan import MACRO_ATAN, make_model

X = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
# Model inputs; the op sees them after the model's ADD of about 1.0, so it compares round(value) - 1.
EXIT, SPIN, SLEEP, HOG = np.float32(-7001), np.float32(-7002), np.float32(-7003), np.float32(-7004)
DELEGATE_C = np.array([1, 2, 3, 4], np.float32)
DELEGATE_X = np.array([0.5, -1, 2, 10], np.float32)

# Subjects whose object is an op library (the thing pickled or closed is the library).
LIBRARY_KINDS = ("compiled", "loaded", "bundled")
INTERPRETER_KINDS = ("interp", "isolated", "signature", "view", "pyop", "isolated_pyop", "delegate")
KINDS = INTERPRETER_KINDS + LIBRARY_KINDS
ISOLATED_KINDS = ("isolated", "isolated_pyop")


def py_atan(inputs, outputs):
    """Atan in numpy, with the worker-death commands."""
    x = inputs[0]
    if x.size:
        head = np.float32(round(float(x.flat[0])) - 1)
        if head == EXIT:
            os._exit(3)
        if head == SPIN:
            while True:
                pass
        if head == SLEEP:
            time.sleep(30)
        if head == HOG:
            hog = np.ones(1 << 28, np.float64)  # 2 GiB
            outputs[0][...] = hog[: x.size]
            return
    outputs[0][...] = np.arctan(x.astype(np.float64)).astype(np.float32)


KEPT: list = []


def py_atan_keeping(inputs, outputs):
    """The plausible mistake of issue 17 item 10: an op that keeps its output array."""
    py_atan(inputs, outputs)
    KEPT.append(outputs[0])


def delegate_model() -> bytes:
    """z = (x + c) * c, dynamic length: one ADD (the delegate's) and one MUL (not)."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    c = b.add_constant("c", DELEGATE_C)
    y = b.add_tensor("y", [4], np.float32)
    z = b.add_tensor("z", [4], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.add_op("MUL", [y, c], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    return b.build()


def prepare_dir(workdir: Path, shared: dict) -> dict:
    """Copy or write every file a subject reads into the case's own directory."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = {
        "model": workdir / "atan.tflite",
        "other_model": workdir / "atan_other.tflite",
        "delegate_model": workdir / "add_mul.tflite",
        "source": workdir / "atan.c",
        "library": workdir / "atan.so",
        "other_library": workdir / "atan_other.so",
        "plugin": workdir / "add_delegate.so",
        "cache": workdir / "cache",
    }
    files["model"].write_bytes(make_model.build())
    files["other_model"].write_bytes(make_model.build(offset=3.0))
    files["delegate_model"].write_bytes(delegate_model())
    files["source"].write_text(MACRO_ATAN)
    shutil.copy(shared["library"], files["library"])
    shutil.copy(shared["other_library"], files["other_library"])
    shutil.copy(shared["plugin"], files["plugin"])
    shutil.copytree(shared["cache"], files["cache"])
    return files


@dataclass
class Subject:
    """One object under test and the interpreter (if any) that runs it."""

    kind: str
    files: dict
    obj: object = None  # the public object of this kind (pickled, closed...)
    it: object = None  # the interpreter that runs it
    runner: object = None
    libs: list = field(default_factory=list)

    @property
    def isolated(self) -> bool:
        return self.kind in ISOLATED_KINDS

    def default_input(self) -> np.ndarray:
        return DELEGATE_X if self.kind == "delegate" else X

    def run(self, x: np.ndarray | None = None, it=None, **invoke_kw) -> np.ndarray:
        """Resize to ``x`` if needed, set, invoke, get: a copy of the output."""
        x = self.default_input() if x is None else x
        it = it or self.it
        if self.kind == "signature" and it is self.it:
            return np.array(self.runner(x=x)["y"], copy=True)
        d = it.get_input_details()[0]
        if tuple(d["shape"]) != x.shape:
            it.resize_tensor_input(d["index"], x.shape)
            it.allocate_tensors()
        it.set_tensor(d["index"], x)
        it.invoke(**invoke_kw)
        out = it.get_output_details()[0]["index"]
        if self.kind == "view":
            return np.array(it.tensor(out)(), copy=True)
        return np.array(it.get_tensor(out), copy=True)

    def close(self) -> None:
        if self.it is not None:
            self.it.close()


def make_library(kind: str, files: dict):
    if kind == "compiled":
        return oo.compile_ops(files["source"], cache_dir=files["cache"])
    if kind == "loaded":
        return oo.load_ops(files["library"])
    if kind == "bundled":
        return oo.kernels.atan()
    raise ValueError(kind)


def interpreter_for(kind: str, files: dict, ops, **kw):
    """An allocated interpreter of ``kind`` on the case's model file."""
    if kind == "delegate":
        it = oo.Interpreter(model_path=str(files["delegate_model"]), experimental_delegates=[ops], **kw)
    else:
        it = oo.Interpreter(model_path=str(files["model"]), custom_ops=[ops], isolate=kind in ISOLATED_KINDS, **kw)
    it.allocate_tensors()
    return it


def make(kind: str, files: dict, *, keep_arrays: bool = False, **kw) -> Subject:
    """A working subject of ``kind``: its object, and an allocated interpreter that runs it."""
    s = Subject(kind, files)
    if kind in LIBRARY_KINDS:
        s.obj = make_library(kind, files)
        s.it = interpreter_for(kind, files, s.obj, **kw)
    elif kind in ("pyop", "isolated_pyop"):
        s.obj = oo.python_op("Atan", invoke=py_atan_keeping if keep_arrays else py_atan)
        s.it = interpreter_for(kind, files, s.obj, **kw)
    elif kind == "delegate":
        s.obj = oo.load_delegate(str(files["plugin"]), {"extra": "0.25"})
        s.it = interpreter_for(kind, files, s.obj, **kw)
    else:
        s.it = interpreter_for(kind, files, oo.kernels.atan(), **kw)
        s.obj = s.it
        if kind == "signature":
            s.runner = s.obj = s.it.get_signature_runner()
    return s


def reference(kind: str, files: dict, x: np.ndarray | None = None) -> np.ndarray:
    """The in-process reference run of ``kind`` on ``x``: a fresh subject, run once, closed."""
    ref_kind = {"isolated": "interp", "isolated_pyop": "pyop", "view": "interp", "signature": "interp"}.get(kind, kind)
    s = make(ref_kind, files)
    try:
        return s.run(x)
    finally:
        s.close()
