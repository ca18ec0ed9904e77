"""``make bench-controller``: the controller's plan-for-the-next-interval loop on the simulator.

At each interval the planner (Mixed, as in ``ballast controller plan``) is given interval t
("plan on the last interval"), the forecast of t+1 (``ballast.planner.forecast``), or, as a
bound nobody can reach, t+1 itself; its plan is judged by the realized max/mean of t+1. Hash-only
placement never plans. Four drifting workloads: the paper's hot-set swaps on interval boundaries,
the same swaps at random instants inside intervals, the same swaps fading over up to an interval,
and heavy-tailed bursts that rise and decay at irregular times. Two triggers: plan after every
imbalanced interval (the paper's), and the controller's defaults (``ballast.planner.trigger``).

Per workload, trigger and policy: mean and p95 realized max/mean, state moved per interval (% of
state held, and keys), rebalances, and how far what the planner was given was from t+1. Seeds
11-15, 200 intervals each (the forecast was chosen on seeds 1 to 6); ``--seeds 11-40`` takes more.
The forecast against the last interval is judged seed by seed: the paired difference, its 95 %
interval, and a verdict (ahead, level, behind; :mod:`bench.controller.paired`). The forecasts
tried and not kept (:mod:`bench.controller.variants`) run beside it under the every-interval
trigger, and on the paper's swaps so does a second bound: the exact mean of t+1 given t, drawn
from the swaps' own generator (:mod:`bench.controller.expected`). ``--no-variants`` skips both.
Writes bench/results/controller.json and controller.png and prints the tables; ``--quick`` is a
one-seed, 40-interval smoke run written to controller-quick.json. About 2.5 to 4 minutes on the
shared 2-core box; no wall-clock time enters the figures.
"""
