"""Per-key stateful processors for the Spark job: pure numpy, no Spark or Kafka here.

The worker engine calls them (see :mod:`spark_jobs.processors.interface` for the contract); the
package keeps them free of Spark so they can be tested, timed and reasoned about on their own.
"""

from __future__ import annotations

from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.interface import KeyRecords, NotMergeableError, Processor, WindowResult
from spark_jobs.processors.last_values import LastValues, LastValuesState
from spark_jobs.processors.spec import from_spec, parse_duration
from spark_jobs.processors.window_stats import WindowStats
from spark_jobs.processors.windows import WindowSpec

__all__ = [
    "KeyRecords",
    "LastValues",
    "LastValuesState",
    "NotMergeableError",
    "Processor",
    "WindowAggregate",
    "WindowResult",
    "WindowSpec",
    "WindowStats",
    "from_spec",
    "parse_duration",
]
