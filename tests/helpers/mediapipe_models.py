"""MediaPipe 0.10.14's model files, on every Python the project supports.

The suite runs models that no one here wrote, among them MediaPipe's selfie
segmentation, face detection and face landmark models.  They ship inside the
``mediapipe==0.10.14`` wheel, under ``mediapipe/modules/``.  That release has no
wheel for Python 3.13, and the later releases that do (0.10.30+) ship no model
files.  So the files are taken from where they are:

- the installed ``mediapipe`` package, if it holds them (0.10.14 installed with
  ``--no-deps`` on Python 3.12 and older, as the README's test command does);
- otherwise the 0.10.14 wheel for CPython 3.12, fetched with ``pip download``
  (pip checks it against the index's hash) into a cache directory, with its
  ``.tflite`` files extracted.  Only the model files are read: nothing of
  mediapipe is imported or installed, so the wheel's Python version does not
  matter.

The directory returned is laid out like the installed package
(``modules/<name>/<file>.tflite``), so a caller does not care which it got.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.10.14"
# Present in 0.10.14 (installed or wheel); absent from the releases without models.
_PROBE = ("modules", "selfie_segmentation", "selfie_segmentation.tflite")
# The wheel's platform tag for this machine; the model files are the same in all of them.
_PLATFORMS = {
    "x86_64": "manylinux_2_17_x86_64",
    "amd64": "manylinux_2_17_x86_64",
    "aarch64": "manylinux_2_17_aarch64",
    "arm64": "manylinux_2_17_aarch64",
}
# Where the extracted files are kept between runs; the environment variable
# lets CI share one copy between its virtual environments.
CACHE_ENV = "OPAQUE_OPS_MEDIAPIPE_CACHE"


def installed_dir() -> Path | None:
    """The installed mediapipe package's directory, if it holds the 0.10.14 model files.

    Found with ``importlib.util.find_spec``, which does not import the package
    (its own dependencies are not installed).
    """
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    return root if root.joinpath(*_PROBE).is_file() else None


def cache_dir() -> Path:
    """Where the models extracted from the wheel live (``$OPAQUE_OPS_MEDIAPIPE_CACHE`` or ~/.cache)."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opaque_ops"
    )
    return Path(base) / f"mediapipe-{VERSION}"


def _from_wheel() -> Path:
    target = cache_dir()
    if target.joinpath(*_PROBE).is_file():
        return target
    machine = platform.machine().lower()
    if machine not in _PLATFORMS:
        raise RuntimeError(
            f"mediapipe {VERSION}'s models: no wheel is known for {machine!r}; "
            f"install mediapipe=={VERSION} with --no-deps on Python 3.12 or older"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed into place: a concurrent run (pytest-xdist,
    # a second venv) sees either no directory or a complete one.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".mediapipe-") as tmp:
        wheels = Path(tmp) / "wheel"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"mediapipe=={VERSION}",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--python-version",
            "3.12",
            "--platform",
            _PLATFORMS[machine],
            "--quiet",
            "--disable-pip-version-check",
            "-d",
            str(wheels),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        found = sorted(wheels.glob("mediapipe-*.whl"))
        if r.returncode != 0 or not found:
            raise RuntimeError(
                f"could not fetch the mediapipe {VERSION} wheel for its model files "
                f"({' '.join(cmd)}):\n{r.stderr.strip()}"
            )
        staged = Path(tmp) / "models"
        with zipfile.ZipFile(found[0]) as whl:
            for name in whl.namelist():
                # mediapipe/modules/<name>/<file>.tflite -> modules/<name>/<file>.tflite
                if name.startswith("mediapipe/modules/") and name.endswith(".tflite"):
                    out = staged / name[len("mediapipe/") :]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with whl.open(name) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        if not staged.joinpath(*_PROBE).is_file():
            raise RuntimeError(f"{found[0].name} holds no {'/'.join(_PROBE)}")
        try:
            staged.rename(target)
        except OSError:
            # Another process put it there first: theirs is as good as ours.
            if not target.joinpath(*_PROBE).is_file():
                raise
    return target


def mediapipe_dir() -> Path:
    """A directory laid out like the mediapipe 0.10.14 package, holding its ``.tflite`` models.

    The installed package if it has them, else the files from the wheel (see the
    module docstring).  Raises RuntimeError, with pip's message, when neither can
    be had: a test that needs the models must not silently skip.
    """
    return installed_dir() or _from_wheel()


def model_file(*parts: str) -> Path:
    """One file under the mediapipe package, e.g. ``model_file("modules", "face_detection", ...)``."""
    return mediapipe_dir().joinpath(*parts)
