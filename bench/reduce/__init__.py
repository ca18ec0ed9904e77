"""``make bench-reduce``: one stateful processor under three placements, on the same skewed input.

Placements (same processor, same per-record cost, same input, Spark ``local[8]`` each):

* **(a) Spark's own placement**: the query a Spark user would write (:mod:`bench.reduce.baseline`,
  in the benchmark's own SparkSession): the routed data records grouped by key
  (``groupBy(key).transformWithStateInPandas``, one group = one key, a value state and an
  event-time timer per key) running the same processor (``spark_jobs.processors.from_spec``);
  Spark's shuffle puts a key in partition ``pmod(murmur3(key), 8)``.
* **(b) Ballast, hash only**: the reduce job (``ballast reduce run --local-cores 8``, a process
  and a Spark of its own) over a routed topic whose router never gets a routing update (8
  workers, ``F(k) = murmur2(k) mod 8``).
* **(c) Ballast with routing updates**: the same job; at each phase start one planning round of
  the controller (``ballast controller plan``: router heavy hitters from the metrics topic, Mixed
  planner against the table in force) sends the changed keys as one ``ROUTING_UPDATE``; keys move
  live, state chunks and all.

Input: phases of Zipf(z = 1.0) keys over ``--keys`` keys; each phase draws a new rank -> key
permutation, so the hot set shifts at every phase start. Values are multiples of 1/4, event times
advance 1 ms every 10 events (as the reduce tests generate them). Every placement has its own
deployment (topic prefix) on one broker started here, its own router (``ballast router run``, a
process) and its own query. The job reads a routed topic the benchmark fills slice by slice while
the query runs: migrations happen inside the run, chunk by chunk, exactly as in production.

How it runs its services: like a user, as processes (:class:`ballast.harness.pipeline.Pipeline`:
``ballast router run``, ``ballast reduce run``, ``ballast controller plan``), known only through
Kafka (the routers' committed offsets, the epoch markers, the jobs' ``ReduceProgress`` and
``WorkerStats`` on the metrics topic) and the job's checkpoint folder. Until the layout rule that
benchmarks import no service, it drove a ``Router`` object in its own process and built the
reduce query in its own session; what that changed is said below, decision by decision.

Decisions:

* **Lockstep micro-batches, pipelined.** The input is released in *slices*: a slice is produced to
  the placement's input topic as *one* transaction; the router, consuming read_committed, sees it
  at once, routes it (exactly-once) and, with ``--commit-when-idle``, commits it as one
  transaction at the first poll that finds nothing more, so Spark's ``read_committed`` source sees
  it whole. (In-process, the benchmark stepped the router and committed once per slice; a router
  process cannot be stepped, and this gives the same one-transaction slices.) The next slice is
  released as soon as the checkpoint's offset log shows that the batch covering the previous
  slice was planned. So every micro-batch holds one slice (plus the state chunks the previous
  batch wrote) in every placement, the query is never idle within a phase (a stream at capacity
  with one slice of backlog), and batch durations compare the same work.
  ``maxOffsetsPerTrigger`` is not used: Spark's rate limit takes from each partition in proportion
  to its backlog, which mixes event time across partitions. A query that is *idle* when a slice
  is committed (the first slice of a phase) can list the partitions' offsets while the commit
  markers are on some of them only, and read the slice in two batches. So the router's commit is
  aimed at the middle of Spark's trigger cycle (an idle query lists offsets at whole multiples of
  the trigger interval): the router commits by itself now, a routing delay after the input's
  commit, so the *input* transaction is committed at mid-cycle minus that delay, estimated from
  the last slices (:mod:`bench.reduce.release`; the delays are logged per phase). Should it still
  happen, the first batch is reported as ``partial`` and the rest is left out of the full-slice
  figures.
* **Warm-up before the first slice.** Each query first reads the markers of its router's first
  assignment (Spark's start-up and first batch); the first slice is released only after that
  batch ran. (In-process the first slice could share the start-up batch.)
* **Phases, interleaved.** Each phase starts with a *prefix* slice (half a slice), routed under
  the old table in every placement: the load a controller has to see before it can react. In (c)
  the planning round runs on the prefix's heavy hitters while the prefix batch runs, and the
  phase's full slices are routed under the new table (released once every routed partition has
  the new epoch's marker). The round is a command now (``ballast controller plan``: a process,
  its reads of the metrics topic and the control log; 3 s here, against milliseconds in-process):
  when the prefix's batch is shorter, the router's markers of the new epoch are read in a batch
  of their own, an ``extra`` batch in which the old owners ship the moved keys' state (in-process
  they went in the first full slice's transaction, and the shipping in its batch). Placements
  take turns phase by phase (a, b, c, a, ...): the machine is shared and noisy, and taking turns
  spreads the noise over all three.
* **Per-record cost** (``--record-cost-us``): one sleep per key of ``records x cost`` at the
  stateful step (the job's ``--record-cost-us``; the same sleep in (a)'s per-key call), so the 8
  tasks of a batch sleep side by side on 2 cores. Cost and slice size make the mean worker's sleep
  per batch (14 s) large against the rest of a batch (2.5-5 s measured here, depending on the
  machine's load: ``batch_minus_busiest_p50_ms``), which no placement changes; otherwise placement
  cannot show in batch durations. The most (c) can gain over (b) is the ratio of their busiest
  workers (``busiest_worker_*``).
* **Planner input.** Routers publish a ``RouterKeyStats`` record every 0.5 s (in-process: one per
  slice, stats interval 0, in the slice's transaction; with ``--commit-when-idle`` an interval of
  0 would open a transaction at every idle poll), with ``--heavy-hitters`` keys: the planner can
  only move keys it sees, and with the router's default top 100 the untracked tail left the hot
  key's worker over the cap (in a simulation of this workload: max/mean 1.5 vs 1.16 with the top
  2000). The planning round reads the intervals that ended since the prefix was released and
  waits until they cover the prefix's records: it plans from the prefix alone, as before.
* **No-data micro-batches are off** (``spark.sql.streaming.noDataMicroBatches.enabled=false``, in
  (a)'s session and through the job's ``--spark-conf``): with them every slice is followed by a
  batch that only fires timers, doubling the fixed cost; here closed windows are emitted at the
  start of the next data batch instead.
* **Figures.** Micro-batch duration is Spark's ``triggerExecution`` (for (b) and (c) from the
  job's ``ReduceProgress``, for (a) from its query's progress); p50/p99 are over the full-slice
  batches (the same slices in every placement; with 12 batches p99 is close to the maximum);
  every batch is in the JSON. The first batch of each query is ``warmup`` and not counted.
  Records/s = data records / sum of the placement's batch durations (prefix, partial and
  chunk-only batches included). Per-worker load = data records a worker processed in a batch
  (``WorkerStats.records``; for (a) the records per Spark partition, from a row the key processor
  writes with ``TaskContext.partitionId()`` to a topic of the benchmark's own), max/mean per
  full-slice batch.
* **Keys not moved during a migration (acceptance 3)**, in (c), within each phase (the machine's
  load drifts between phases): a batch has a *migration under way* when a worker shipped or
  installed a chunk or held records for a key waiting for its chunk. Batch duration: those batches
  vs the phase's other full-slice batches. ``flow_latency_p99_ms`` (append -> start of the
  worker's step, records of keys not waiting for a chunk, max over the workers of a batch): a
  record waits in the backlog while the previous batch runs, so a batch counts as affected when it
  or its predecessor had a migration under way, against the phase's other full-slice batches.
* **Uniform throughput** (a vs b): a separate run with uniform keys (z = 0) and no record cost,
  placements taking turns per round; records/s as above. It prices Spark's per-key Python call and
  state round trips against Ballast's per-worker grouping.
* **Three Sparks.** (a) runs in the benchmark's session, (b) and (c) each in their job's process
  (in-process, one session ran all three). Only one placement works at a time; the idle queries
  ask the broker for offsets at every trigger, as before.

Modules: ``params`` (flags), ``workload`` (slices), ``release`` (a slice in, routed), ``baseline``
((a)'s query), ``queries`` ((a) or the job, from outside), ``progress`` (a batch, either source),
``placement`` (a deployment driven slice by slice), ``phases`` (lockstep), ``batches``
(classification), ``figures``, ``report``, ``plot``, ``main``.

Writes bench/results/reduce.json and reduce.png (``--out``), prints a summary table. ``--quick``
is a smoke run of about 10 minutes (written to reduce-quick.json); the defaults are the full
run, about 25 minutes on the shared 2-core machine. Every parameter is a flag (``-h``).
"""
