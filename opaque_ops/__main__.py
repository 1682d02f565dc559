"""``python -m opaque_ops``: the same as the ``opaque-ops`` command."""

import sys

from .cli import main

sys.exit(main())
