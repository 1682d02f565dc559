"""The build backend: setuptools', plus numpy for a platform wheel (``OPAQUE_OPS_WHEEL_ARCH``).

A platform wheel carries the fast calls module (``c/src/fastcalls.c``), a
CPython extension built against numpy's headers, so its isolated build
environment needs numpy; the pure wheel and editable installs do not, and
do not get it.  pyproject.toml names this module with ``backend-path``.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the whole PEP 517 interface, unchanged but for the hook below


def get_requires_for_build_wheel(config_settings=None):
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    if os.environ.get("OPAQUE_OPS_WHEEL_ARCH", "").strip():
        requires = [*requires, "numpy>=1.24"]
    return requires
