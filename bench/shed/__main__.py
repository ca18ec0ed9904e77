"""``python -m bench.shed`` (``make bench-shed``)."""

import sys

from bench.shed.main import main

if __name__ == "__main__":
    sys.exit(main())
