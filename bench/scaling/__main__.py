"""``python -m bench.scaling`` (``make bench-scaling``)."""

import sys

from bench.scaling.main import main

if __name__ == "__main__":
    sys.exit(main())
