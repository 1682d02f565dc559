"""This machine's architecture, as build targets, prebuilt directories and library stamps name it.

Its own small module: every start-up asks it (which prebuilt directory, which
kernel stamp), and a start-up that loads prebuilt libraries never needs the
compiler's module (:mod:`.compiler`), which is larger to import.
"""

from __future__ import annotations

import platform
import sys


def host_arch() -> str:
    """This machine's architecture, in the names build targets and stamps use.

    It is the architecture of this Python process, which is what decides
    which libraries it can load: 32-bit Raspberry Pi OS on a Pi 4 or 5 runs
    an arm64 kernel, so ``uname -m`` says "aarch64" (or "armv8l") while
    every program is 32-bit armhf, named "armv7l" as in pip's wheel tags.
    """
    m = platform.machine().lower()
    m = {"amd64": "x86_64", "arm64": "aarch64", "armv8l": "armv7l"}.get(m, m)
    if sys.maxsize <= 2**32:
        m = {"aarch64": "armv7l", "x86_64": "i686"}.get(m, m)
    return m
