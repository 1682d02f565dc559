"""The opaque-ops command, run as `python -m opaque_ops` in subprocesses."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from opaque_ops.model import ModelBuilder
from tests.helpers.atan import ATAN_INPUT
from tests.helpers.child_process import run_cli as cli
from tests.helpers.child_process import run_python
from tests.helpers.locations import ROOT, package_file


@pytest.fixture(scope="module")
def selfie() -> Path:
    path = package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")
    if not path.is_file():
        pytest.skip("mediapipe 0.10.14 models are not installed")
    return path


@pytest.fixture(scope="module")
def atan_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("atan") / "atan.tflite"
    made = run_python(ROOT / "examples" / "atan" / "make_model.py", out)
    assert made.returncode == 0, made.stderr
    return out


def test_inspect_selfie_without_ops(selfie):
    r = cli("inspect", selfie)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "input_1  [1, 256, 256, 3]  float32" in out
    assert "[1, 256, 256, 1]  float32" in out
    assert "Convolution2DTransposeBias v1  x1  MISSING" in out
    # The raw-struct options, decoded as MediaPipe's kernel reads them (three int32: padding,
    # stride_w, stride_h; mediapipe/util/tflite/operations/transpose_conv_bias.cc): SAME (1), stride 2x2.
    assert "raw 12 bytes (int32 [1, 2, 2])" in out
    assert "CONV_2D" in out and "DEQUANTIZE" in out
    assert "0 of 1 custom ops resolved" in out


@pytest.mark.parametrize("name", ["convolution2d_transpose_bias", "mediapipe", "all"])
def test_inspect_selfie_with_bundled_kernel(selfie, name):
    # Kernel files and bundles: the names of opaque_ops.kernels.
    r = cli("inspect", selfie, "--ops", f"kernels:{name}")
    assert r.returncode == 0, r.stderr
    assert "Convolution2DTransposeBias v1  x1  resolved" in r.stdout
    assert "1 of 1 custom ops resolved" in r.stdout


def test_run_selfie_with_the_mediapipe_bundle_matches_python(selfie, tmp_path):
    import opaque_ops as oo

    img = np.random.default_rng(7).random((1, 256, 256, 3), dtype=np.float32)
    np.save(tmp_path / "img.npy", img)
    r = cli(
        "run",
        selfie,
        "--ops",
        "kernels:mediapipe",
        "--input",
        f"0={tmp_path / 'img.npy'}",
        "--output-dir",
        tmp_path / "out",
    )
    assert r.returncode == 0, r.stderr
    [saved] = list((tmp_path / "out").glob("*.npy"))
    it = oo.Interpreter(model_path=str(selfie), custom_ops=[oo.kernels.mediapipe()])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], img)
    it.invoke()
    np.testing.assert_array_equal(np.load(saved), it.get_tensor(it.get_output_details()[0]["index"]))


def test_missing_op_message_speaks_command_line(selfie, tmp_path):
    np.save(tmp_path / "img.npy", np.zeros((1, 256, 256, 3), np.float32))
    r = cli("run", selfie, "--input", f"0={tmp_path / 'img.npy'}")
    assert r.returncode == 1
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("opaque-ops: error:")][0]
    assert "Convolution2DTransposeBias v1" in line
    assert "--ops kernels:convolution2d_transpose_bias" in line and "--ops kernels:mediapipe" in line
    assert "custom_ops=" not in line


def test_inspect_with_c_source_and_version_mismatch(selfie, tmp_path):
    src = tmp_path / "ctb.c"
    src.write_text(
        '#include "opaque_ops.h"\n'
        "static TfLiteStatus Inv(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) { return kTfLiteError; }\n"
        'OPAQUE_OP("Convolution2DTransposeBias", 1, .invoke = Inv);\n'
    )
    r = cli("inspect", selfie, "--ops", src)
    assert r.returncode == 0, r.stderr
    assert "Convolution2DTransposeBias v1  x1  resolved" in r.stdout
    src2 = tmp_path / "ctb2.c"
    src2.write_text(src.read_text().replace('Bias", 1', 'Bias", 2'))
    r = cli("inspect", selfie, "--ops", src2)
    assert "Convolution2DTransposeBias v1  x1  MISSING (libraries have it as v2)" in r.stdout


def test_inspect_shows_flex_options_and_signatures(tmp_path):
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4, 4, 1], np.float32)
    y = b.add_tensor("y", [1, 2, 2, 4], np.float32)
    b.add_custom_op("ExtractImagePatches", [x], [y], options={"padding": "VALID", "ksizes": [1, 2, 2, 1]})
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("serving_default", {"images": x}, {"patches": y})
    path = tmp_path / "eip.tflite"
    path.write_bytes(b.build())
    r = cli("inspect", path)
    assert r.returncode == 0, r.stderr
    assert "ksizes=[1, 2, 2, 1]" in r.stdout and "padding='VALID'" in r.stdout
    assert "serving_default: inputs ['images'] -> outputs ['patches']" in r.stdout


def _run_atan_to(atan_model, tmp_path, out_dir):
    """``opaque-ops run`` on the Atan model with ATAN_INPUT, writing to ``out_dir``."""
    np.save(tmp_path / "x.npy", ATAN_INPUT)
    return cli(
        "run", atan_model, "--ops", "kernels:atan", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out_dir
    )


def test_run_writes_outputs(atan_model, tmp_path):
    r = _run_atan_to(atan_model, tmp_path, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "y: shape (5,) float32" in r.stdout
    y = np.load(tmp_path / "out" / "y.npy")
    expected = np.arctan((ATAN_INPUT + np.float32(0.99999905)).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_max_ulp(y, expected, maxulp=1)


def test_run_resizes_to_the_input(atan_model, tmp_path):
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    np.save(tmp_path / "x9.npy", x)
    r = cli("run", atan_model, "--ops", "kernels:atan", "--input", f"x={tmp_path / 'x9.npy'}", "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "y.npy").shape == (9,)


def test_a_missing_op_after_a_resize_gets_the_missing_op_advice_not_the_resize(atan_model, tmp_path):
    np.save(tmp_path / "x7.npy", np.ones(7, np.float32))
    r = cli("run", atan_model, "--input", f"x={tmp_path / 'x7.npy'}")
    assert r.returncode == 1 and "--ops kernels:atan" in r.stderr, r.stderr
    assert "resized" not in r.stderr and "custom_ops=" not in r.stderr, r.stderr


def test_output_dir_under_a_file_is_refused_before_the_run(atan_model, tmp_path):
    (tmp_path / "afile").write_text("")
    r = _run_atan_to(atan_model, tmp_path, tmp_path / "afile" / "sub")
    assert r.returncode == 1 and "cannot create --output-dir" in r.stderr and "y: shape" not in r.stdout, r.stderr


def test_a_refused_resize_says_that_run_resized_the_input(tmp_path):
    # The user passed an array of the wrong shape and never resized
    # anything: the model's refusal says run did, from which shape.
    model = tmp_path / "pool.tflite"
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8, 8, 1], np.float32)
    y = b.add_tensor("y", [1, 4, 4, 1], np.float32)
    pool = {"padding": "VALID", "filter_width": 2, "filter_height": 2, "stride_w": 2, "stride_h": 2}
    b.add_op("AVERAGE_POOL_2D", [x], [y], options=pool)
    b.set_inputs([x])
    b.set_outputs([y])
    model.write_bytes(b.build())
    np.save(tmp_path / "small.npy", np.ones((1, 1, 1, 1), np.float32))
    r = cli("run", model, "--input", f"x={tmp_path / 'small.npy'}")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "run resized input 'x' from [1, 8, 8, 1] to [1, 1, 1, 1]" in r.stderr, r.stderr


def test_bench_format(atan_model):
    r = cli("bench", atan_model, "--ops", "kernels:atan", "--runs", "20", "--warmup", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "runs: 20  warmup: 2  threads: 1" in r.stdout
    import re

    assert re.search(r"invoke: median [\d.]+ (us|ms)  p90 [\d.]+ (us|ms)  min [\d.]+ (us|ms)", r.stdout)
    # Not a TTY and a fast model: no progress line.
    assert "runs\r" not in r.stderr and "[###" not in r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["run", "nowhere.tflite"], "model file nowhere.tflite does not exist"),
        (["inspect", "nowhere.tflite"], "model file nowhere.tflite does not exist"),
        (["run", "ATAN", "--input", "x=FLOAT"], "the model needs custom ops that no library provides: Atan v1"),
        (["run", "ATAN", "--ops", "kernels:atan"], "no --input for x"),
        (["run", "ATAN", "--ops", "kernels:atan", "--input", "z=a.npy"], "the model has no input 'z'"),
        (["run", "ATAN", "--ops", "kernels:atan", "--input", "x"], "--input takes NAME=FILE.npy"),
        (["run", "ATAN", "--ops", "kernels:atan", "--input", "x=missing.npy"], "cannot read missing.npy"),
        (["run", "ATAN", "--ops", "kernels:atan", "--input", "x=INT"], "expected dtype float32, received int64"),
        # An .npz archive was a traceback (AttributeError: 'NpzFile' object has no attribute 'shape').
        (["run", "ATAN", "--ops", "kernels:atan", "--input", "x=NPZ"], "is an .npz archive (arrays: x, w)"),
        # numpy's own message suggests allow_pickle=True, which would run code from the file.
        (
            ["run", "ATAN", "--ops", "kernels:atan", "--input", "x=PICKLED"],
            "objects.npy cannot be loaded as an array (it holds Python objects)",
        ),
        (
            ["run", "ATAN", "--ops", "kernels:atan", "--input", "x=GARBAGE"],
            "garbage.tflite is not a .npy file (it does not start with numpy's magic",
        ),
        (
            ["run", "ATAN", "--ops", "kernels:atan", "--input", "x=HUGE"],
            "huge.npy: the array it declares does not fit in memory",
        ),
        (
            ["run", "ATAN", "--ops", "kernels:atan", "--input", "x=FLOAT", "--output-dir", "GARBAGE"],
            "exists and is not a directory",
        ),
        (
            ["inspect", "ATAN", "--ops", "kernels:nonesuch"],
            "no bundled kernel or kernel package 'nonesuch'; available: atan",
        ),
        (["run", "ATAN", "--input", "x=FLOAT"], "with --ops: a .so (from opaque-ops build), a .c source"),
        (["inspect", "ATAN", "--ops", "libnothing.so"], "kernel library libnothing.so does not exist"),
        (["inspect", "ATAN", "--ops", "nothing.c"], "C source nothing.c does not exist"),
        (["inspect", "GARBAGE"], "opaque-ops: error:"),
        (["bench", "ATAN", "--ops", "kernels:atan", "--runs", "0"], "--runs must be at least 1"),
    ],
)
def test_errors_are_one_line(atan_model, tmp_path, args, message):
    (tmp_path / "garbage.tflite").write_bytes(b"\x00not a model at all" * 10)
    np.save(tmp_path / "int.npy", np.arange(5))
    np.save(tmp_path / "float.npy", ATAN_INPUT)
    np.savez(tmp_path / "pair.npz", x=ATAN_INPUT, w=ATAN_INPUT)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files = {
        "INT": "int.npy",
        "FLOAT": "float.npy",
        "NPZ": "pair.npz",
        "PICKLED": "objects.npy",
        "GARBAGE": "garbage.tflite",
        "HUGE": "huge.npy",
        "ATAN": None,
    }
    # A header that declares 10**15 float32 values (numpy allocates before it reads).
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000000,), }"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    (tmp_path / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    subst = {"ATAN": str(atan_model), "GARBAGE": str(tmp_path / "garbage.tflite")}
    args = [
        re.sub(r"=(INT|FLOAT|NPZ|PICKLED|GARBAGE|HUGE)$", lambda m: "=" + str(tmp_path / files[m.group(1)]), a)
        for a in args
    ]
    r = cli(*[subst.get(a, a) for a in args], cwd=tmp_path)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("INFO:")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("opaque-ops: error: ")
    assert message in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("command", ["inspect", "run", "bench", "doctor", "scaffold", "ops-source"])
@pytest.mark.parametrize("what", ["a directory", "a FIFO"])
def test_a_path_that_is_not_a_file_is_named_for_what_it_is(tmp_path, atan_model, command, what):
    """Every command that reads a model or a C source says what the path is, not that it is missing.

    A review found ``inspect DIR`` and ``inspect /dev/null`` answering "does
    not exist".  (A FIFO: reading one would wait for a writer.)
    """
    odd = tmp_path / "odd.tflite"
    if what == "a directory":
        odd.mkdir()
    else:
        os.mkfifo(odd)
    if command == "ops-source":
        args, noun = ["inspect", str(atan_model), "--ops", str(odd.rename(tmp_path / "odd.c"))], "C source"
        odd = tmp_path / "odd.c"
    elif command == "scaffold":
        args, noun = ["scaffold", str(odd), "-o", str(tmp_path / "pkg"), "--name", "pkg"], "model file"
    else:
        args, noun = [command, str(odd)], "model file"
    r = cli(*args, cwd=tmp_path, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("INFO:")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    want = "is a directory" if what == "a directory" else "is not a regular file"
    assert lines[0].startswith(f"opaque-ops: error: {noun} {odd} {want}"), lines[0]


def test_usage_errors_exit_2():
    r = cli()
    assert r.returncode == 2 and "opaque-ops" in r.stderr
    r = cli("frobnicate")
    assert r.returncode == 2


def test_build_delegates():
    r = cli("build", "--help")
    assert r.returncode == 0
    assert "--target" in r.stdout


def test_inspect_check_gives_a_missing_ops_advice_in_command_line_terms(atan_model):
    # The isolated check repeated the API's "Pass a library ... in custom_ops=[...]".
    r = cli("inspect", atan_model, "--check")
    assert r.returncode == 1, r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("check:")]
    assert "REFUSED CLEANLY" in line and "Give a library that provides them with --ops" in line, line
    assert "--ops kernels:atan" in line and "custom_ops=" not in line, line


def test_build_usage_errors_name_opaque_ops_build():
    r = cli("build", "x.c", "--target", "riscv")
    assert r.returncode == 2 and "opaque-ops build: error: argument --target" in r.stderr, r.stderr
    assert "build.py" not in r.stderr
