"""A steady input load from a process of its own (``python -m bench.control.load``).

Why a process: the benchmark's follower stamps the moment a marker arrives; a producer thread in
the same interpreter would hold the GIL while it encodes records and delay those stamps. Why
steady: at a few thousand records/s every router has a transaction open nearly all the time, so a
control event finds one to commit first, which is the usual case in production.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.workload import key_name
from bench.control.params import KEYS, ROOT

TICK_S = 0.01  # records are produced in 10 ms ticks


class SteadyLoad:
    """Starts the load process; :meth:`stop` ends it and returns how many records it produced."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.control.load", bootstrap, topic, str(rate)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the load process exited {self.process.returncode}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        return int(out.strip().splitlines()[-1]) if out.strip() else 0


def run(bootstrap: str, topic: str, rate: float) -> int:
    """Produce ``rate`` records/s until SIGTERM; the number produced."""
    from ballast.kafka.clients import make_producer
    from ballast.kafka.configuration import KafkaConfig

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    producer = make_producer(KafkaConfig.plaintext(bootstrap, "bench-control-load"))
    names = [key_name(i).encode() for i in range(KEYS)]
    rng = random.Random(1)
    payload = bytes(100)
    sent = 0
    start = time.monotonic()
    while not stop:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            key = names[rng.randrange(KEYS)]
            value = INPUT_HEADER + encode_input_body(key, 1.0, payload, int(time.time() * 1000))
            try:
                producer.produce(topic, value, key)
            except BufferError:
                producer.poll(0.05)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(TICK_S)
    producer.flush(30)
    return sent


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="steady input load until SIGTERM")
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("rate", type=float)
    args = ap.parse_args()
    print(run(args.bootstrap, args.topic, args.rate), flush=True)
