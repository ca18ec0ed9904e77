"""The metrics topic, typed: what routers, reduce workers and the reduce's driver publish, and one
reader of it (:mod:`ballast.metrics.reader`) for services, tests, the demo and benchmarks."""
