"""``make bench-control`` (``python -m bench.control``): how long a control event takes to reach the workers.

The latency measured is the one the reduce feels: from the moment a control event is accepted
(the broker's append time of its record on the control topic, LogAppendTime, stamped when
``ControlLogWriter.send`` appends it) to the moment its epoch's marker is visible to a
``read_committed`` consumer in every routed partition for every input partition (the last
partition's marker, received by the benchmark's own follower, which polls continuously). That is
what a worker waits for before it may act on the epoch (the frontier rule, docs/router.md).

Why this shape:

* A broker of its own (free ports, a temporary folder), one fresh deployment per case
  (``create_deployment``: topics and genesis; the control and routed topics stamp LogAppendTime,
  so the broker's clock times both ends), and the routers as ``ballast router run`` processes
  through the harness (``Pipeline``), with their default settings, as a user runs them.
* Cases: 1 and 4 routers (4 input partitions, 8 routed partitions), each with a steady input
  load (a few thousand records/s from a process of its own, so the routers are inside a
  transaction nearly all the time) and idle (no input: the routers wait in consume()).
* Events are ``ROUTING_UPDATE`` s pinning one key each. Each is sent only once the previous one is
  visible, after a random pause (default 20–80 ms), so events never queue behind each other and
  arrive at random moments of the routers' loop and transaction. The first few are a warm-up.
* The split: ``control`` = append → the event visible to a read_committed reader (the writer's
  own commit, plus the follower's fetch); ``router`` = visible → the broker's append time of the
  epoch's last marker (the router noticed it, committed its open transaction and wrote the
  markers); ``commit`` = that append → the markers visible (the markers' transaction committed,
  plus the follower's fetch). The three add up to the total per event; their percentiles are
  taken separately.

Writes bench/results/control.json (every sample too) and control.png, and prints a table.
"""
