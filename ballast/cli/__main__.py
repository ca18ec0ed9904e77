"""``python -m ballast.cli …`` = ``ballast …`` (how the supervisor and tests run the command)."""

import sys

from ballast.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
