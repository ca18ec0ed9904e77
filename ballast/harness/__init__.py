"""Driving a deployment from outside, as the tests, the demo and the benchmarks do: services as
processes, input in, progress read back from Kafka (:mod:`ballast.harness.pipeline`)."""
