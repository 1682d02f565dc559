"""``opaque-ops bench --suite``: run the benchmark suite of a source checkout.

The suite (``bench/suite.py``) compares opaque_ops with ai-edge-litert, raw
C-API calls and numpy; it lives in the repository, not in the wheel, because
it needs the peers and the real-model packages installed.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def suite_path() -> Path | None:
    """Return ``bench/suite.py`` of the checkout this package runs from, or None."""
    p = Path(__file__).resolve().parents[2] / "bench" / "suite.py"
    return p if p.is_file() else None


def run_suite(argv: list[str] | None = None) -> int:
    """Run the benchmark suite with ``argv`` (e.g. ``["--quick", "--json", "out.json"]``).

    Parameters
    ----------
    argv : list of str, optional
        Arguments for ``bench/suite.py`` (``--help`` lists them).

    Returns
    -------
    int
        The process exit status: 0 on success, 2 if the suite is not available.
    """
    path = suite_path()
    if path is None:
        print(
            "opaque-ops bench --suite needs a source checkout of opaque_ops (bench/suite.py is not "
            "part of the installed package); run `python bench/suite.py` there",
            file=sys.stderr,
        )
        return 2
    old = sys.argv
    sys.argv = [str(path)] + list(argv or [])
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = old
    return 0
