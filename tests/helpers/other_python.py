"""Another CPython of the host (pyenv's 3.13), for a platform wheel's fast calls built for it.

A platform wheel carries the fast calls module for the Python that builds it
and for each other Python it is given (``setup.py``).  The tests build the
x86_64 wheel with pyenv's 3.13 as the other one and run that wheel there, as
a user of a slim container (no compiler) would:

* :func:`find` finds the interpreter (pyenv's newest 3.13, as ``.ci/run``'s
  Python matrix does);
* :func:`site` installs numpy, cffi, flatbuffers and pymicro-wakeword for it
  (the host's versions, ``aarch64_python.requirements``) into a directory
  kept under ``~/.cache/opaque_ops/other-python/<version>``, with its own
  pip, once per set of versions;
* :func:`headers` names its ABI tag and the header directories a build of
  the module for it needs: its own ``include`` and that numpy's;
* :func:`prepared` does all three.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from opaque_ops.build import store as _cache
from tests.helpers.aarch64_python import requirements

VERSION = "3.13"


def find(version: str = VERSION) -> Path | None:
    """pyenv's newest ``version`` interpreter, or None."""
    found = sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")],
    )
    return Path(found[-1]) if found else None


def _ask(python: Path, code: str) -> dict:
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{python}: {r.stderr.strip()[-1000:]}")
    return json.loads(r.stdout)


def site(python: Path) -> Path:
    """A directory with opaque_ops' dependencies installed for ``python`` (cached)."""
    info = _ask(python, "import json, sys; print(json.dumps({'version': '%d.%d' % sys.version_info[:2]}))")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = _cache.private_dir(Path(base) / "opaque_ops" / "other-python" / info["version"], "other Python's packages")
    reqs = requirements(info["version"])
    final, stamp = root / "site", {"python": str(python), "requirements": reqs}
    if (final / "STAMP").is_file() and json.loads((final / "STAMP").read_text()) == stamp:
        return final
    tmp = root / ".site-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(tmp), *reqs]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"pip for {python} failed:\n{r.stdout}\n{r.stderr}")
    (tmp / "STAMP").write_text(json.dumps(stamp))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def headers(python: Path, deps: Path) -> tuple[str, list[str]]:
    """``python``'s ABI tag and the header directories of it and of the numpy in ``deps``."""
    info = _ask(
        python,
        "import json, sysconfig; print(json.dumps({'suffix': sysconfig.get_config_var('EXT_SUFFIX'), "
        "'include': sysconfig.get_paths()['include']}))",
    )
    tag = info["suffix"].removeprefix(".").removesuffix(".so")
    return tag, [info["include"], str(deps / "numpy" / "_core" / "include")]


class Other(NamedTuple):
    """The other Python, ready: the interpreter, its packages, its ABI tag, its header directories."""

    python: Path
    deps: Path
    tag: str
    include: list[str]


def prepared(version: str = VERSION) -> Other | None:
    """:func:`find`, :func:`site` and :func:`headers` together; None if there is no such Python."""
    python = find(version)
    if python is None:
        return None
    deps = site(python)
    return Other(python, deps, *headers(python, deps))
