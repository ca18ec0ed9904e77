"""``python -m bench.reduce`` (``make bench-reduce``)."""

import sys

from bench.reduce.main import main

if __name__ == "__main__":
    sys.exit(main())
