"""``python -m kubeturn``: the ``kubeturn`` command."""

import sys

from kubeturn.cli import main

if __name__ == "__main__":
    sys.exit(main())
