"""``python -m bench.chaos`` (``make chaos``)."""

import sys

from bench.chaos.main import main

if __name__ == "__main__":
    sys.exit(main())
