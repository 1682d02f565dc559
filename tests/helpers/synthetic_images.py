"""A synthetic photo of a person, for the selfie segmentation models (kernels, XNNPACK, aarch64 and bench)."""

from __future__ import annotations

import numpy as np


def synthetic_person(h, w):
    """A head (skin colour) and shoulders (dark clothes) on a flat blue-grey background.

    Returns the float32 image in [0, 1] and the foreground mask.
    """
    yy, xx = np.mgrid[0:h, 0:w]
    im = np.empty((h, w, 3), np.float32)
    im[:] = (0.35, 0.55, 0.80)
    head = ((yy - 0.30 * h) / (0.13 * h)) ** 2 + ((xx - 0.5 * w) / (0.10 * w)) ** 2 <= 1
    body = ((yy - 0.80 * h) / (0.35 * h)) ** 2 + ((xx - 0.5 * w) / (0.25 * w)) ** 2 <= 1
    im[head] = (0.87, 0.67, 0.55)
    im[body] = (0.20, 0.20, 0.25)
    # MediaPipe's input: 8-bit RGB scaled by 1/255.
    im = np.round(im * 255).astype(np.uint8).astype(np.float32) * np.float32(1 / 255)
    return im, head | body
