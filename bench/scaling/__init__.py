"""``make bench-scaling``: DS2, Flink's busy-time rule and fixed-at-max on the same steps of input.

What it measures (issue 31, docs/scaling.md): how each scaling policy follows input that steps
1× → 2× → 4× → 1× of one instance's capacity, each step held ``step_s``.

The setup, per policy a fresh deployment on a broker of the benchmark's own
(:mod:`bench.scaling.run`): one router, the controller (``--scaling on --scaling-policy ds2`` or
``busy-time``; for ``fixed-max`` scaling off and the reduce on all 8 workers from the start), the
shedder applied, and the Spark reduce (``local[8]``, 8 routed partitions, a 20 s trigger and 4 ms
of *sleep* per row: it stands for blocking I/O, so more workers add capacity on 2 cores).

Per policy (:mod:`bench.scaling.figures`): decisions per step and time to the final count,
counts revisited within a step, instance-seconds, seconds with the lag over the target, and the
shed windows judged against the truth (:mod:`ballast.harness.judge`). The verdicts: DS2 within 3
decisions of each step, never revisiting a count, fewer instance-seconds than fixed-at-max and no
more than the busy-time rule, no more time over the lag target than the busy-time rule.

Writes bench/results/scaling.json and scaling.png (``--out``); ``--quick`` is a smoke run with
shorter steps. Every parameter is a flag (``-h``).
"""
