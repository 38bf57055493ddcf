"""``python -m kubeturn``: the ``kubeturn`` command."""

import sys

from kubeturn.cli import main

sys.exit(main())
