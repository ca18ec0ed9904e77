"""``make bench-migration``: the controller's three pacing modes, moving the same keys on the Spark reduce.

What it measures: what a paced migration costs the stream while it runs, and how long it takes,
for each of the controller's pacing modes (``all-at-once``, ``fluid``, ``batched`` with B = 8;
:mod:`services.controller.pacing`, docs/controller.md), each on a fresh deployment and the same
input.

The setup, per mode (:mod:`bench.migration.run`):

* a broker of the benchmark's own (one for all modes), a deployment per mode (topic prefix
  ``bench-mig-<mode>``), one router, the controller and the reduce job as processes
  (:class:`ballast.harness.pipeline.Pipeline`): ``ballast router run``, ``ballast controller run
  --pacing <mode> --step-keys 8 --no-rebalance --no-forecast``, ``ballast reduce run --processor
  aggregate:size=10s --local-cores 8`` (8 workers, Spark ``local[8]``);
* the input (:mod:`bench.migration.stream`): Zipf(1.0) over 10,000 keys, 1,000 events/s, event
  time advancing about as fast as the wall clock, the same sequence in every run;
* a table left by an earlier hot set (``--stale-pins`` keys, 22) asked for as one routing update
  before any input: the stale keys build their state at their pinned workers from the start;
* ``steady_s`` of input, then a ``REBALANCE`` request: the controller plans from its last
  interval; its plan hands the stale keys back to their hash homes and pins the current hot keys,
  a migration of some 30 keys with state, paced by the mode; ``tail_s`` more input after DONE;
* then a flush event closes every window and the results are checked.

Figures (:mod:`bench.migration.figures`), from the job's ``ReduceProgress`` (Spark's
``triggerExecution`` per micro-batch), the workers' ``WorkerStats`` (chunks installed, keys
pending) and the control log (START, steps, DONE, with their times of issue):
the steady-state batch p50 before START, the peak batch during [START, DONE] and its ratio to it,
the migration's time, steps and epochs, the state bytes installed, and whether every window
equals the single-process reference (:func:`bench.reduce.backlog.reference`, checked with
:mod:`bench.reduce.check`).

Writes bench/results/migration.json and migration.png (``--out``), prints a progress line at
every step and a summary table. ``--quick`` moves fewer keys with shorter phases
(migration-quick.json). Every parameter is a flag (``-h``).

Modules: ``params``, ``stream`` (input, stale table, feeder), ``run`` (one mode), ``story`` (the
log's account of a migration), ``figures``, ``plot``, ``main``.
"""
