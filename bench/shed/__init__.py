"""``make bench-shed``: input at 2× the pipeline's measured capacity, then 0.5×, with shedding on and off.

What it measures: whether load shedding holds the pipeline's time lag under its latency target
through an overload, lifts once the overload ends, and whether the results say truthfully how
exact they are while it sheds (docs/shedder.md, "Benchmark"; docs/results.md).

The setup:

* a broker of the benchmark's own; a calibration deployment (:mod:`bench.shed.capacity`) measures
  the capacity (a backlog drained by the reduce) and the lag the pipeline has when it keeps up;
* per case a fresh deployment (:mod:`bench.shed.case`, topic prefix ``bench-shed-<case>``): one
  router, the controller, the reduce (``aggregate`` over 10 s windows, Spark ``local[4]``, a
  per-record cost that sets the capacity) and, with shedding on, the shedder (``ballast shedder
  run``, the input topic declared with a latency target), all processes
  (:class:`ballast.harness.pipeline.Pipeline`);
* the same seeded input in both cases (:mod:`ballast.harness.feed`, event time = time of production):
  ``warm_s`` at 0.5× capacity, ``overload_s`` at 2×, ``recover_s`` at 0.5×.

Measured, by the benchmark itself against an independent truth:

* the exact time lag of the routers and of the reduce, every second, from the broker
  (:mod:`bench.shed.lag`: the append time of the record at each stage's position);
* the keep-probability in force (the control log's ``SHEDDING`` events) and when the routers
  applied it (the epoch markers);
* every output row against the truth computed from the input the benchmark produced
  (:mod:`ballast.harness.judge`): the 95 % intervals' coverage of shed windows, the relative error per
  window over time, exact rows right;
* the acceptance's verdicts (:mod:`bench.shed.verdicts`): lag back under target within 3 policy
  cycles (on) or growing without bound (off); shedding lifted within 3 cycles of the overload's
  end and every later window exact; coverage within 90–99 %.

Writes bench/results/shed.json and shed.png (``--out``), prints progress lines and a summary.
``--quick`` is a smoke run with shorter phases (shed-quick.json). Every parameter is a flag (``-h``).

Modules: ``params``, ``feed``, ``lag``, ``control``, ``capacity``, ``case``, ``judge``,
``verdicts``, ``plot``, ``main``.
"""
