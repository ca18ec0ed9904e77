"""``python -m services.router [flags]`` = ``ballast router run [flags]`` (used by the kill -9 test)."""

from __future__ import annotations

import sys

from ballast.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["router", "run", *sys.argv[1:]]))
