"""``python -m bench.controller`` (``make bench-controller``)."""

import sys

from bench.controller.main import main

if __name__ == "__main__":
    sys.exit(main())
