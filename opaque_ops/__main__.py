"""``python -m opaque_ops``: the same as the ``opaque-ops`` command."""

import sys

from .cli.commands import main

sys.exit(main())
