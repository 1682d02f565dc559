"""`opaque-ops bench --xnnpack auto|on|off`: XNNPACK switched as asked, and the output says what ran."""

from __future__ import annotations

import pytest

from tests.helpers.child_process import run_cli as cli
from tests.helpers.locations import package_file


@pytest.fixture(scope="module")
def selfie():
    return package_file("mediapipe", "modules", "selfie_segmentation", "selfie_segmentation.tflite")


@pytest.mark.parametrize("choice, used", [("auto", "used"), ("on", "used"), ("off", "not used")])
def test_xnnpack_choice_is_applied_and_reported(selfie, choice, used):
    r = cli(
        "bench",
        selfie,
        "--ops",
        "kernels:convolution2d_transpose_bias",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--xnnpack",
        choice,
    )
    assert r.returncode == 0, r.stderr
    assert f"xnnpack: {used} (--xnnpack {choice}: " in r.stdout
    assert "registered kernels (they run their ops' nodes): Convolution2DTransposeBias v1" in r.stdout
    assert "custom ops run by the runtime itself" not in r.stdout
    assert "cpu: " in r.stdout and "CPUs)" in r.stdout


def test_without_a_kernel_only_xnnpack_on_runs_the_model(selfie):
    # XNNPACK's own Convolution2DTransposeBias runs the node only with --xnnpack on:
    # the run succeeding there and failing with XNNPACK off shows the switch is real.
    r = cli("bench", selfie, "--runs", "2", "--warmup", "0", "--threads", "1", "--xnnpack", "on")
    assert r.returncode == 0, r.stderr
    assert "xnnpack: used" in r.stdout
    assert (
        "custom ops run by the runtime itself (XNNPACK or TFLite's builtin custom ops): Convolution2DTransposeBias v1"
    ) in r.stdout
    r = cli("bench", selfie, "--runs", "2", "--warmup", "0", "--xnnpack", "off")
    assert r.returncode == 1 and "Convolution2DTransposeBias" in r.stderr


def test_bad_choice_is_a_usage_error(selfie):
    r = cli("bench", selfie, "--xnnpack", "maybe")
    assert r.returncode == 2 and "invalid choice: 'maybe'" in r.stderr


def test_a_model_with_string_inputs_is_benched(tmp_path):
    # bench makes random words for a string input; GATHER reads them with
    # TFLite's own string reader, so the run succeeding shows they were written
    # in TFLite's layout.
    from tests.helpers.string_models import gather_model

    path = tmp_path / "gather_strings.tflite"
    path.write_bytes(gather_model())
    r = cli("bench", str(path), "--runs", "3", "--warmup", "1", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "xnnpack:" in r.stdout
