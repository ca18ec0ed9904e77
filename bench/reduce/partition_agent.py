"""The partition stage's producer agent: one process per host holding each partition's
transactional producer, so a partition changing Python worker costs no ``init_transactions``.

Why: Spark gives a batch's task to whichever Python worker is idle, so with a producer per worker
3-5 of 8 tasks a batch found their partition's producer in another worker and opened a new one;
``init_transactions`` (120-300 ms under load) was most of the exactly-once stage's cost over the
at-least-once one (docs/reduce.md, "Prototype"). The agent outlives Python workers and queries, so
a partition's producer is opened once per host, and fences the previous host's when a partition
moves (Kafka's own fence, unchanged).

The fence inside the host is the agent's: every ``open`` of a partition starts a new *generation*,
and a ``commit`` carries the generation it opened; a commit of an older one (a zombie attempt of a
task Spark already retried) is refused. A task sends its whole batch (changelog records, closed
windows) in its one ``commit`` message, so the transaction begins and ends inside the agent: a
Python worker killed mid-task leaves no transaction open. The agent killed mid-commit leaves one
open, and the next agent's ``init_transactions`` aborts it.

The wire: :mod:`multiprocessing.connection` over a Unix socket in a folder only this user can
read, with an authentication key beside it (:mod:`bench.reduce.partition_agent_client` starts the
agent on first use and speaks to it). The agent exits after ``--idle`` seconds without a session,
or when its socket file is removed.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from typing import Any

log = logging.getLogger("bench.reduce.partition_agent")

FLUSH_S = 60.0
IDLE_S = 120.0
BACKLOG = 64  # connections waiting to be accepted: every task of a batch may dial at once


class Fenced(RuntimeError):
    """A commit from a generation that is no longer the partition's newest."""


@dataclass
class Partition:
    """One transactional id's producer and fence in this agent."""

    producer: Any = None
    token: str = ""  # names the producer instance: a state file it committed carries it
    generation: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ProducerAgent:
    """Transactional producers by ``transactional.id``; pure of sockets so a test drives it."""

    def __init__(self, producer_factory: Any = None) -> None:
        self._partitions: dict[str, Partition] = {}
        self._guard = threading.Lock()
        self._factory = producer_factory or _confluent_producer

    def _partition(self, txid: str) -> Partition:
        with self._guard:
            return self._partitions.setdefault(txid, Partition())

    def open(self, config: dict[str, Any]) -> tuple[str, int, float]:
        """A new generation for ``config``'s transactional id: (producer token, generation, ms spent
        opening a producer, 0 when the agent held one)."""
        part = self._partition(config["transactional.id"])
        with part.lock:
            part.generation += 1
            init_ms = 0.0
            if part.producer is None:
                t0 = time.perf_counter()
                producer = self._factory(config)
                producer.init_transactions(FLUSH_S)
                part.producer, part.token = producer, uuid.uuid4().hex
                init_ms = (time.perf_counter() - t0) * 1000
            return part.token, part.generation, init_ms

    def commit(self, txid: str, generation: int, writes: list[tuple[str, int | None, list]]) -> int:
        """Write ``writes`` (topic, partition or None for the producer's choice, [(key, value)]) in
        one transaction of ``txid``'s producer; the last offset written to the first write's topic.
        A failure drops the producer: the next ``open`` makes a new one, which fences and aborts."""
        part = self._partition(txid)
        with part.lock:
            if generation != part.generation or part.producer is None:
                raise Fenced(f"{txid}: generation {generation} is not the newest ({part.generation})")
            failed: list[str] = []
            last = [-1]
            first_topic = writes[0][0] if writes else ""

            def on_delivery(err: Any, msg: Any) -> None:
                if err is not None:
                    failed.append(str(err))
                elif msg.topic() == first_topic:
                    last[0] = max(last[0], msg.offset())

            producer = part.producer
            try:
                producer.begin_transaction()
                n = 0
                for topic, partition, records in writes:
                    for key, value in records:
                        if partition is None:
                            producer.produce(topic, value, key, on_delivery=on_delivery)
                        else:
                            producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
                        n += 1
                        if n % 10_000 == 0:
                            producer.poll(0)
                producer.commit_transaction(FLUSH_S)
            except Exception:
                part.producer, part.token = None, ""
                raise
            if failed:
                raise RuntimeError(f"{txid}: committed, but {failed[:3]}")
            return last[0]

    def close(self) -> None:
        with self._guard:
            parts = list(self._partitions.values())
        for part in parts:
            if part.producer is not None:
                part.producer.flush(5)


def _confluent_producer(config: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    return Producer(config)


class Server:
    """Serves :class:`ProducerAgent` on a listener: one thread per session, exit when idle."""

    def __init__(self, listener: Listener, agent: ProducerAgent, idle_s: float) -> None:
        self.listener, self.agent, self.idle_s = listener, agent, idle_s
        self.sessions = 0
        self.last_active = time.monotonic()
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def serve(self) -> None:
        """Accept sessions until :meth:`stop` (from a thread: the caller waits on ``stopping``)."""
        threading.Thread(target=self._watch_idle, daemon=True).start()
        while not self.stopping.is_set():
            try:
                conn = self.listener.accept()
            except OSError:
                break  # the listener closed
            except Exception as exc:  # a client that failed the handshake, or stop()'s wake-up call
                if not self.stopping.is_set():
                    log.warning("refused a connection: %s", exc)
                continue
            with self._lock:
                self.sessions += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def stop(self) -> None:
        """Why the wake-up call: closing a socket does not return a thread blocked in its accept."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        try:
            with socket.socket(socket.AF_UNIX) as wake:
                wake.connect(self.listener.address)
        except OSError:
            pass  # the socket file is gone: the accepting thread stays, the process exits anyway
        self.listener.close()

    def _watch_idle(self) -> None:
        address = self.listener.address
        while not self.stopping.wait(1.0):
            with self._lock:
                idle = self.sessions == 0 and time.monotonic() - self.last_active > self.idle_s
            if idle:
                log.info("no session for %.0f s: exiting", self.idle_s)
                self.stop()
            elif not os.path.exists(address):  # its folder was removed: no client can find it again
                log.info("%s is gone: exiting", address)
                self.stop()

    def _session(self, conn: Connection) -> None:
        try:
            while True:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    return
                reply = self._answer(request)
                conn.send(reply)
                if request[0] == "stop":
                    self.stop()
                    return
        finally:
            conn.close()
            with self._lock:
                self.sessions -= 1
                self.last_active = time.monotonic()

    def _answer(self, request: tuple) -> tuple:
        kind = request[0]
        try:
            if kind == "open":
                return ("ok", *self.agent.open(request[1]))
            if kind == "commit":
                return ("ok", self.agent.commit(*request[1:]))
            if kind == "ping":
                return ("ok", os.getpid())
            if kind == "stop":
                return ("ok",)
            return ("error", "ValueError", f"unknown request {kind!r}")
        except Exception as exc:  # the task raises it: Spark retries the task
            return ("error", type(exc).__name__, str(exc))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.reduce.partition_agent", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--socket", required=True, help="the Unix socket to listen on")
    ap.add_argument("--key-file", required=True, help="the connection's authentication key")
    ap.add_argument(
        "--idle", type=float, default=IDLE_S, help=f"seconds without a session before exiting ({IDLE_S:.0f})"
    )
    ap.add_argument(
        "--owner",
        default="",
        help="the folder of the run that started it, only so that its command line names the run "
        "(a tool following a run's processes by its folder finds the agent)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with open(args.key_file, "rb") as f:
        key = f.read()
    if os.path.exists(args.socket):
        os.unlink(args.socket)  # a dead agent's: the client only starts one under its lock
    listener = Listener(args.socket, "AF_UNIX", BACKLOG, authkey=key)
    log.info("serving on %s (pid %d)", args.socket, os.getpid())
    agent = ProducerAgent()
    server = Server(listener, agent, args.idle)
    threading.Thread(target=server.serve, daemon=True).start()
    server.stopping.wait()  # idle, stopped, or its socket removed; closing the listener removed the socket
    agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
