#!/usr/bin/env python3
"""Build a standalone opaque_ops kernel library; see ``python build.py --help``.

A thin wrapper around :func:`opaque_ops.build.main` (also ``opaque-ops build``).
"""

import sys

from opaque_ops.build.standalone import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
