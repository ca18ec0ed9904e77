"""``python -m bench.control`` (``make bench-control``)."""

import sys

from bench.control.main import main

if __name__ == "__main__":
    sys.exit(main())
