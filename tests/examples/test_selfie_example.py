"""examples/selfie_segmentation: run.py (one photo) and batch.py (a folder, on Dask or a process pool).

Run as a user runs them, in subprocesses.  The model comes from the
mediapipe 0.10.14 wheel (never imported).  The independent references:
the interpreter driven directly in this process, and Pillow's bilinear
resize for the photo-size mask.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.child_process import crashed, run_cli, run_python
from tests.helpers.locations import ROOT, example_module

HERE = ROOT / "examples" / "selfie_segmentation"
selfie = example_module("selfie_segmentation", "selfie")

PIL = pytest.importorskip("PIL.Image", reason="Pillow is a test dependency: pip install -e '.[test]'")


def _run(script, *args, env=None, cwd=ROOT, timeout=300):
    return run_python(HERE / script, *args, base_env=env, cwd=cwd, timeout=timeout)


def _png(path) -> np.ndarray:
    with PIL.open(path) as im:
        assert im.mode == "L"
        return np.asarray(im)


def _photo(h, w, seed) -> np.ndarray:
    """The synthetic person with seeded noise: a photo of its own size."""
    noise = np.random.default_rng(seed).integers(-20, 21, (h, w, 3))
    return np.clip(selfie.synthetic_person(h, w).astype(int) + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def interpreter():
    it = oo.Interpreter(model_path=selfie.model_path(), custom_ops=[oo.kernels.mediapipe()])
    it.allocate_tensors()
    return it


def _listing(*dirs):
    return {d: sorted(os.listdir(d)) for d in dirs}


def test_plain_run_writes_to_the_temporary_directory_not_the_repo(tmp_path):
    before = _listing(ROOT, HERE)
    p = _run("run.py", "--runs", "2", env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert p.returncode == 0, crashed(p)
    assert _listing(ROOT, HERE) == before
    out = tmp_path / "synthetic_mask.png"
    assert p.stdout.strip().endswith(f"256x256 mask -> {out}")
    mask = _png(out)
    assert mask.shape == (256, 256) and mask.max() > 200 and mask.min() < 30


def test_mask_at_the_photos_size_matches_pillows_resize_of_the_models_mask(tmp_path, interpreter):
    # Larger than the model's 256x256 both ways: upscaling, where bilinear
    # has one definition (Pillow antialiases when it shrinks; the example samples).
    photo = _photo(400, 320, seed=1)
    np.save(tmp_path / "portrait.npy", photo)
    p = _run("run.py", tmp_path / "portrait.npy", "--out", tmp_path / "m.png", "--runs", "1")
    assert p.returncode == 0, crashed(p)
    assert "320x400 mask" in p.stdout
    got = _png(tmp_path / "m.png")
    assert got.shape == (400, 320)
    # Independent: the model's mask from this process, scaled by Pillow.
    small = selfie.segment(interpreter, photo)
    big = np.asarray(PIL.fromarray(small, mode="F").resize((320, 400), PIL.BILINEAR))
    expected = np.round(np.clip(big, 0, 1) * 255)
    assert np.abs(got.astype(int) - expected).max() <= 1
    p = _run("run.py", tmp_path / "portrait.npy", "--out", tmp_path / "small.png", "--model-size", "--runs", "1")
    assert p.returncode == 0, crashed(p)
    np.testing.assert_array_equal(_png(tmp_path / "small.png"), selfie.to_uint8(small))


def test_a_model_file_given_with_model_needs_no_mediapipe(tmp_path):
    # A user with the .tflite file and no mediapipe wheel: the child cannot
    # find mediapipe (a None in sys.modules is what find_spec reports as
    # not installed) and runs the model given with --model.
    model = tmp_path / "selfie.tflite"
    shutil.copy(selfie.model_path(), model)
    photo = tmp_path / "p.npy"
    np.save(photo, _photo(256, 256, seed=3))
    code = (
        "import runpy, sys, importlib.util; sys.modules['mediapipe'] = None; "
        "assert importlib.util.find_spec('mediapipe') is None; "
        f"sys.path.insert(0, {str(HERE)!r}); sys.argv = ['run.py', *sys.argv[1:]]; "
        f"runpy.run_path({str(HERE / 'run.py')!r}, run_name='__main__')"
    )
    args = [str(photo), "--out", str(tmp_path / "m.png"), "--model-size", "--runs", "1"]
    missing = run_python("-c", code, *args, timeout=300)
    assert missing.returncode != 0 and "or a model file given with --model" in missing.stderr, crashed(missing)
    p = run_python("-c", code, *args, "--model", str(model), timeout=300)
    assert p.returncode == 0, crashed(p)
    it = oo.Interpreter(model_path=str(model), custom_ops=[oo.kernels.mediapipe()])
    it.allocate_tensors()
    np.testing.assert_array_equal(_png(tmp_path / "m.png"), selfie.to_uint8(selfie.segment(it, np.load(photo))))


def test_prebuilt_library_without_a_compiler(tmp_path):
    lib = tmp_path / "ctb.so"
    built = run_cli("build", "--kernels", "convolution2d_transpose_bias", "-o", lib, timeout=300)
    assert built.returncode == 0, crashed(built)
    photo = tmp_path / "photo.npy"
    np.save(photo, _photo(180, 240, seed=2))
    p = _run("run.py", photo, "--out", tmp_path / "default.png", "--runs", "1")
    assert p.returncode == 0, crashed(p)
    # No compiler on PATH (only this Python's directory) and an empty compile
    # cache: anything that tried to compile would fail.
    bare = dict(os.environ, PATH=os.path.dirname(sys.executable), OPAQUE_OPS_CACHE_DIR=str(tmp_path / "empty"))
    p = _run("run.py", photo, "--out", tmp_path / "prebuilt.png", "--ops", lib, "--runs", "1", env=bare)
    assert p.returncode == 0, crashed(p)
    assert "the prebuilt kernel ctb.so" in p.stdout
    assert (tmp_path / "prebuilt.png").read_bytes() == (tmp_path / "default.png").read_bytes()
    p = _run("run.py", "--ops", lib, "--xnnpack-op")
    assert p.returncode == 2 and "cannot be combined with --ops" in p.stderr


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    d = tmp_path_factory.mktemp("photos")
    for i, (h, w) in enumerate([(300, 200), (240, 320), (256, 256), (150, 260)]):
        im = _photo(h, w, seed=10 + i)
        if i % 2:
            PIL.fromarray(im).save(d / f"photo{i}.png")
        else:
            np.save(d / f"photo{i}.npy", im)
    (d / "notes.txt").write_text("not a photo")
    return d


@pytest.fixture(scope="module")
def serial(photos, tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    p = _run("batch.py", photos, out, "--engine", "serial")
    assert p.returncode == 0, crashed(p)
    return out


def test_batch_serial_masks_are_the_single_photo_masks(photos, serial, interpreter):
    rows = json.loads((serial / "summary.json").read_text())
    assert [r["image"] for r in rows] == ["photo0.npy", "photo1.png", "photo2.npy", "photo3.png"]
    for r in rows:
        rgb = selfie.load_rgb(photos / r["image"])
        mask = _png(serial / f"{Path(r['image']).stem}_mask.png")
        assert mask.shape == rgb.shape[:2] == (r["height"], r["width"])
        expected = selfie.to_uint8(selfie.resize_bilinear(selfie.segment(interpreter, rgb), *rgb.shape[:2]))
        np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize("engine", ["processes", "dask"])
def test_batch_on_worker_processes_gives_the_same_masks(engine, photos, serial, tmp_path):
    if engine == "dask":
        pytest.importorskip("distributed", reason="distributed is a test dependency: pip install -e '.[test]'")
    p = _run("batch.py", photos, tmp_path, "--engine", engine, "--workers", "2", timeout=600)
    assert p.returncode == 0, crashed(p)
    assert "4 photos in" in p.stdout and f"engine {engine}, 2 worker(s)" in p.stdout
    assert "4/4" in p.stderr  # the progress bar
    got = json.loads((tmp_path / "summary.json").read_text())
    want = json.loads((serial / "summary.json").read_text())
    strip = [{k: v for k, v in r.items() if k != "mask"} for r in want]
    assert [{k: v for k, v in r.items() if k != "mask"} for r in got] == strip
    for r in want:
        name = Path(r["mask"]).name
        assert (tmp_path / name).read_bytes() == (serial / name).read_bytes()
