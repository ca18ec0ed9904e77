"""``python -m spark_jobs.reduce run ...`` (and the file spark-submit runs on a cluster)."""

import sys

from spark_jobs.reduce.cli import main

if __name__ == "__main__":
    sys.exit(main())
