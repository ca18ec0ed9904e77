"""What the log before a snapshot still decides, kept small enough to travel in the snapshot.

Why: a reduce worker asks, of records and state from any epoch back, which *run* of a key they
belong to (the epoch its owner last changed) and the lowest keep-probability in force since a
run began. Folding the whole log from its origin to answer made a worker's start-up grow with the
log (issue 27, defect 5). What those answers need of the log before an epoch is small:

* per key the table ever pinned, the epoch its current run began (:attr:`History.runs`);
* the hash modulus at the origin and at every change (:attr:`History.moduli`): a key the table
  never pinned is owned by ``murmur2 % n``, so its runs follow from the key itself;
* per shedding target, the lowest keep-probability in force from any epoch to now
  (:attr:`History.floors`): a step function of the first epoch, stored as its steps (the suffix
  minima of the target's keep-probabilities).

A :class:`~ballast.control.state.StateBuilder` that tracks it (the controller's, the control
writer's, the reduce's) keeps it up to date event by event; every snapshot the controller writes
carries it (``TableSnapshot.history``), and a reader that starts at such a snapshot adopts it.
Its size grows with the keys ever pinned, the ``SCALE``s and the shedding changes that set a new
low, not with the events. The log's *origin* is its first snapshot that records the routed
partitions (the genesis): there the history is empty, and a key pinned by it has run 0.

Pure: no Kafka, no state of its own beyond the three parts.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.routing.murmur2 import kafka_partition

HISTORY_RECORD = "io.ballast.History"
OPEN = -1  # a floor step still in force (its `until` is not known yet)

Floors = dict[str, list[list[Any]]]  # target -> [[until, keep], ...]: until and keep ascending


def keep_for(keep_probability: Mapping[str, float], target: str) -> float:
    """The one rule for which ``SHEDDING`` setting applies to ``target``: its own, else ``*``, else 1.0
    (routers apply it to each record of an input topic; the reduce asks it again to scale results)."""
    return float(keep_probability.get(target, keep_probability.get("*", 1.0)))


def note_keep(floors: Floors, epoch: int, keep: Mapping[str, float]) -> None:
    """Fold the settings in force from ``epoch`` into ``floors`` (a target named for the first time
    starts from ``*``'s steps: until then ``*``'s setting applied to it)."""
    star = floors.setdefault("*", [])
    for target in keep:
        if target not in floors:
            floors[target] = [list(step) for step in star]
    for target, steps in floors.items():
        value = keep_for(keep, target)
        if steps and steps[-1][1] == value:
            continue
        if steps:
            steps[-1][0] = epoch - 1  # the last epoch the previous value was in force
        while steps and steps[-1][1] >= value:
            steps.pop()  # a later value at most as high: it is the lower bound from there back
        steps.append([OPEN, value])


def lowest_since(floors: Floors, target: str, first: int) -> float:
    """The lowest keep-probability ``floors`` say was in force for ``target`` at any epoch from
    ``first`` to where they were taken (1.0: nothing was ever set)."""
    steps = floors.get(target) or floors.get("*")
    if not steps:
        return 1.0
    untils = [s[0] for s in steps[:-1]]  # ascending; the last step is still in force
    return float(steps[bisect.bisect_left(untils, first)][1])


def copy_floors(floors: Floors) -> Floors:
    return {t: [list(s) for s in steps] for t, steps in floors.items()}


@dataclass
class History:
    """Runs, moduli and keep floors as of one epoch (see the module docstring).

    Mutable: a builder advances its own copy; a :class:`~ballast.control.state.ControlState` holds
    one it never changes."""

    runs: dict[str, int] = field(default_factory=dict)  # key ever pinned -> its current run's start
    moduli: list[tuple[int, int]] = field(default_factory=list)  # (epoch, hash modulus from then)
    floors: Floors = field(default_factory=dict)

    @classmethod
    def origin(
        cls, epoch: int, num_workers: int, pinned: Iterable[bytes], keep: Mapping[str, float]
    ) -> History:
        """The history at the log's origin: its pins are owned from the start (run 0)."""
        history = cls({k.decode("utf-8"): 0 for k in pinned}, [(epoch, num_workers)], {})
        note_keep(history.floors, epoch, keep)
        return history

    def copy(self) -> History:
        return History(dict(self.runs), list(self.moduli), copy_floors(self.floors))

    # --- questions --------------------------------------------------------------------------------

    def modulus(self, epoch: int) -> int:
        """The hash modulus at ``epoch`` (the origin's before it)."""
        i = bisect.bisect_right(self.moduli, (epoch, 1 << 62)) - 1
        return self.moduli[max(i, 0)][1]

    @property
    def rehash_epochs(self) -> list[int]:
        return [e for e, _n in self.moduli[1:]]

    def default_run(self, key: bytes, epoch: int) -> int:
        """The run start at ``epoch`` of a key the table never pinned: the last modulus change up
        to ``epoch`` that moved its hash home (0: none)."""
        moduli = self.moduli
        for i in range(bisect.bisect_right(moduli, (epoch, 1 << 62)) - 1, 0, -1):
            change, n = moduli[i]
            if kafka_partition(key, n) != kafka_partition(key, moduli[i - 1][1]):
                return change
        return 0

    def sheds(self) -> bool:
        """Whether a keep-probability below 1 was ever in force (each target's first step is its
        lowest ever)."""
        return any(steps and steps[0][1] < 1.0 for steps in self.floors.values())

    # --- folding ----------------------------------------------------------------------------------

    def advance(
        self,
        epoch: int,
        owners: Mapping[bytes, tuple[int, int]],
        pinned: Container[bytes],
        num_workers: int,
        keep: Mapping[str, float] | None,
    ) -> None:
        """Fold event ``epoch``: ``owners`` maps every key whose owner it may change (the keys it
        names; on a change of the modulus, also every key in :attr:`runs`) to (owner before, owner
        after); ``pinned``: the table after it; ``keep``: the settings after it when it may have
        changed them."""
        if num_workers != self.moduli[-1][1]:
            self.moduli.append((epoch, num_workers))
        runs = self.runs
        for kb, (before, after) in owners.items():
            key = kb.decode("utf-8")
            if key in runs:
                if before != after:
                    runs[key] = epoch
            elif kb in pinned:  # pinned for the first time: a run of its own unless its owner stayed
                runs[key] = epoch if before != after else self.default_run(kb, epoch - 1)
        if keep is not None:
            note_keep(self.floors, epoch, keep)

    # --- the snapshot's field -----------------------------------------------------------------------

    def to_avro(self) -> tuple[str, dict[str, Any]]:
        """``TableSnapshot.history`` (fastavro's tuple notation, as the codec decodes it)."""
        return HISTORY_RECORD, {
            "runs": dict(self.runs),
            "moduli": [{"epoch": int(e), "num_workers": int(n)} for e, n in self.moduli],
            "keep_floors": {
                t: [{"until": int(u), "keep": float(k)} for u, k in steps] for t, steps in self.floors.items()
            },
        }

    @classmethod
    def from_avro(cls, value: Any) -> History | None:
        """The history a snapshot carries (None: it carries none)."""
        if value is None:
            return None
        body = value[1] if isinstance(value, tuple) else value
        moduli = [(int(m["epoch"]), int(m["num_workers"])) for m in body.get("moduli", [])]
        if not moduli:  # not a history a reader can start from
            return None
        floors = {
            t: [[int(s["until"]), float(s["keep"])] for s in steps]
            for t, steps in body["keep_floors"].items()
        }
        return cls({str(k): int(e) for k, e in body.get("runs", {}).items()}, moduli, floors)
