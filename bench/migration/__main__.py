"""``python -m bench.migration`` (``make bench-migration``)."""

import sys

from bench.migration.main import main

if __name__ == "__main__":
    sys.exit(main())
