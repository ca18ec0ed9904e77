"""The fault campaign (``make chaos``): the whole pipeline as services on three brokers, faults at
seeded random times, every output row and dead letter judged against what the campaign produced.

Modules, one job each: :mod:`~bench.chaos.params` (the knobs and why), :mod:`~bench.chaos.plan` (a
seed's faults, pure), :mod:`~bench.chaos.ledger` (every record produced, where the broker put it),
:mod:`~bench.chaos.feed` (the input, the skewed producer, junk, flush),
:mod:`~bench.chaos.deployment` (the services), :mod:`~bench.chaos.faults` (injecting, ending,
supervising), :mod:`~bench.chaos.run` (one seed), :mod:`~bench.chaos.readback` (the topics read
back), :mod:`~bench.chaos.judge` (records lost, rows wrong, false exact, late, coverage: pure),
:mod:`~bench.chaos.recovery` (lag back under target, pure), :mod:`~bench.chaos.report` (verdicts and
summary), :mod:`~bench.chaos.plot`, :mod:`~bench.chaos.main`. What it does and how to read the
report: docs/chaos.md.
"""
