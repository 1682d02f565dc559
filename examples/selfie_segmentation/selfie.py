"""What the selfie examples share: the model file, pre- and post-processing, image files.

Imported by ``run.py`` (one photo) and ``batch.py`` (a folder, on several
processes); ``batch.py`` also ships it to Dask workers.  Needs Pillow only
to read PNG/JPEG photos: ``.npy`` arrays (H x W x 3 uint8) and the synthetic
person need nothing beyond numpy.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import zlib
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".npy"}


def model_path(landscape: bool = False) -> str:
    """The model file inside the installed mediapipe 0.10.14 wheel (located, never imported)."""
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "needs the model files from `pip install --no-deps mediapipe==0.10.14`, or a model file given with --model"
        )
    name = "selfie_segmentation_landscape.tflite" if landscape else "selfie_segmentation.tflite"
    return os.path.join(list(spec.submodule_search_locations)[0], "modules", "selfie_segmentation", name)


def load_rgb(path) -> np.ndarray:
    """A photo as H x W x 3 uint8 (``.npy`` as saved by numpy, anything else through Pillow)."""
    path = Path(path)
    if path.suffix.lower() == ".npy":
        a = np.load(path, allow_pickle=False)
        if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8:
            raise ValueError(f"{path}: expected an H x W x 3 uint8 array, got {a.shape} {a.dtype}")
        return a
    try:
        from PIL import Image
    except ImportError:
        raise SystemExit("reading PNG/JPEG photos needs Pillow (pip install pillow)") from None
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def resize_bilinear(a: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of a 2-D or H x W x C array (pixel centres aligned, edges clamped), as float32.

    It samples without antialiasing when it shrinks, as MediaPipe's CPU
    image-to-tensor step (OpenCV's linear warp) does.
    """
    src_h, src_w = a.shape[:2]
    if (src_h, src_w) == (h, w):
        return a.astype(np.float32)

    def axis(n_out, n_in):
        pos = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (pos - lo).astype(np.float32)

    y0, y1, fy = axis(h, src_h)
    x0, x1, fx = axis(w, src_w)
    a = a.astype(np.float32)
    if a.ndim == 3:
        fy, fx = fy[:, None, None], fx[None, :, None]
    else:
        fy, fx = fy[:, None], fx[None, :]
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def preprocess(rgb: np.ndarray, h: int, w: int) -> np.ndarray:
    """As MediaPipe's CPU graph: RGB stretched to the model size (no letterbox), float32 img/255."""
    return (resize_bilinear(rgb, h, w) * np.float32(1 / 255))[None]


def segment(interpreter, rgb: np.ndarray) -> np.ndarray:
    """The person-probability mask of one photo, at the model's resolution (float32 in [0, 1])."""
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    h, w = int(inp["shape"][1]), int(inp["shape"][2])
    interpreter.set_tensor(inp["index"], preprocess(rgb, h, w))
    interpreter.invoke()
    return interpreter.get_tensor(out["index"])[0, :, :, 0]


def to_uint8(mask: np.ndarray) -> np.ndarray:
    return np.round(np.clip(mask, 0, 1) * 255).astype(np.uint8)


def write_png(path, gray: np.ndarray) -> None:
    """Write a 2-D uint8 array as a grayscale PNG (no dependencies)."""
    h, w = gray.shape
    raw = b"".join(b"\x00" + gray[y].tobytes() for y in range(h))  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def synthetic_person(h: int, w: int) -> np.ndarray:
    """A head and shoulders on a flat background, as uint8 RGB."""
    yy, xx = np.mgrid[0:h, 0:w]
    im = np.empty((h, w, 3), np.uint8)
    im[:] = (89, 140, 204)
    im[((yy - 0.3 * h) / (0.13 * h)) ** 2 + ((xx - 0.5 * w) / (0.1 * w)) ** 2 <= 1] = (222, 171, 140)
    im[((yy - 0.8 * h) / (0.35 * h)) ** 2 + ((xx - 0.5 * w) / (0.25 * w)) ** 2 <= 1] = (51, 51, 64)
    return im


def segment_file(interpreter, path, out_dir, photo_size: bool = True) -> dict:
    """Segment one photo file and write ``OUT_DIR/<name>_mask.png``; returns a summary row."""
    path = Path(path)
    rgb = load_rgb(path)
    mask = segment(interpreter, rgb)
    if photo_size:
        mask = resize_bilinear(mask, rgb.shape[0], rgb.shape[1])
    out = Path(out_dir) / f"{path.stem}_mask.png"
    write_png(out, to_uint8(mask))
    return {
        "image": path.name,
        "width": rgb.shape[1],
        "height": rgb.shape[0],
        "person": round(float((mask > 0.5).mean()), 4),
        "mask": str(out),
    }
