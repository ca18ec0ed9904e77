"""What a local stack folder records: ``stack.json``, one entry per process it started.

Why a module of records only: every part of the devstack (brokers, Connect, Spark, Ballast's
services) reads and writes the same file, and the commands that only need an address
(:mod:`ballast.cli.connection`) read it too; none of them should have to import the code that
starts the others to do so. Nothing here starts or signals a process.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "stack.json"
LOOPBACK = "127.0.0.1"


class StackError(RuntimeError):
    """The local stack could not be started, reached or stopped; the message says which log to read."""


@dataclass
class NodeState:
    node_id: int
    port: int
    controller_port: int
    data_dir: str
    config: str
    log: str
    pid: int | None = None
    internal_port: int = 0  # a secured stack's broker-to-broker (mTLS) listener; 0: none
    host: str = LOOPBACK  # the address it binds and advertises (a namespace's own, on another "host")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def internal_bootstrap(self) -> str:
        return f"{self.host}:{self.internal_port}"


@dataclass
class ConnectState:
    rest_port: int
    config: str
    log: str
    pid: int | None = None
    host: str = LOOPBACK  # the brokers' host: its REST API binds and advertises that address only

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"


SPARK_HOST = LOOPBACK  # the local stack's Spark, unless started on a host of its own


@dataclass
class SparkMasterState:
    port: int
    ui_port: int
    log: str
    pid: int | None = None
    host: str = SPARK_HOST  # the address it binds and advertises

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{self.host}:{self.ui_port}"


@dataclass
class SparkWorkerState:
    worker_id: int
    port: int
    ui_port: int
    work_dir: str
    log: str
    pid: int | None = None
    host: str = SPARK_HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{self.host}:{self.ui_port}"


@dataclass
class SparkState:
    """The master and workers one state folder started."""

    master: SparkMasterState
    workers: list[SparkWorkerState] = field(default_factory=list)
    cores: int = 1
    memory: str = "1g"
    properties: str = ""
    namespace: str = ""  # the network namespace its daemons run in ("": this machine's own network)

    @property
    def master_url(self) -> str:
        return self.master.url

    @property
    def host(self) -> str:
        """The address every daemon binds and advertises (one host runs the whole cluster)."""
        return self.master.host

    def processes(self) -> list[tuple[str, int | None, str]]:
        """(name, pid, log) of every daemon, master first."""
        return [("master", self.master.pid, self.master.log)] + [
            (f"worker {w.worker_id}", w.pid, w.log) for w in self.workers
        ]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SparkState:
        raw = dict(raw)
        master = SparkMasterState(**raw.pop("master"))
        workers = [SparkWorkerState(**w) for w in raw.pop("workers")]
        return cls(master=master, workers=workers, **raw)


@dataclass
class ServiceState:
    """One of Ballast's own services (a router, the reduce, …) started by :mod:`ballast.devstack.services`.

    ``argv`` is the command as started, secrets excepted (they went through the environment);
    ``log`` holds what it says (stderr), ``out`` what it answers (stdout: a router's totals at
    exit); ``ready_file`` is written by the service once it is ready to work
    (:mod:`ballast.readiness`).
    """

    name: str
    kind: str
    argv: list[str]
    log: str
    out: str
    ready_file: str
    pid: int | None = None
    started_at: float = 0.0
    exit_code: int | None = None  # when the supervisor saw it end


SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass
class SecurityState:
    """Where a secured stack keeps its material (recorded in ``stack.json``; no secret in it)."""

    folder: str
    ca: str  # PEM certificate of the CA: every client's truststore
    broker_cert: str
    broker_key: str
    broker_keystore: str  # key and certificate chain in one PEM file, as Kafka's PEM keystore reads it
    users: list[str] = field(default_factory=list)
    mechanism: str = SCRAM_MECHANISM

    def password_file(self, user: str) -> str:
        if user not in self.users:
            raise KeyError(f"no user {user!r} in this stack (users: {', '.join(self.users)})")
        return str(Path(self.folder) / f"{user}.password")

    def password(self, user: str) -> str:
        return Path(self.password_file(user)).read_text().strip()

    def internal_conf(self, bootstrap: str) -> dict[str, Any]:
        """librdkafka properties of the brokers' own identity on the ``INTERNAL`` (mTLS) listener."""
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": self.ca,
            "ssl.certificate.location": self.broker_cert,
            "ssl.key.location": self.broker_key,
        }


@dataclass
class StackState:
    state_dir: str
    cluster_id: str
    nodes: list[NodeState] = field(default_factory=list)
    connect: ConnectState | None = None
    spark: SparkState | None = None
    services: list[ServiceState] = field(default_factory=list)
    security: SecurityState | None = None  # a secured stack's CA, certificate and users
    namespace: str = ""  # the network namespace its brokers run in ("": this machine's own network)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def internal_bootstrap(self) -> str:
        """The brokers' own (mTLS) listeners of a secured stack."""
        return ",".join(n.internal_bootstrap for n in self.nodes)

    @property
    def replication(self) -> int:
        return 3 if len(self.nodes) >= 3 else 1

    def node(self, node_id: int) -> NodeState:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in stack at {self.state_dir}")

    def service(self, name: str) -> ServiceState | None:
        return next((s for s in self.services if s.name == name), None)

    def save(self) -> None:
        path = Path(self.state_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: str | Path) -> StackState:
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            raise StackError(
                f"no stack recorded in {state_dir} (nothing to do; start one with `ballast stack up`)"
            )
        raw = json.loads(path.read_text())
        nodes = [NodeState(**n) for n in raw.pop("nodes")]
        connect = raw.pop("connect")
        spark = raw.pop("spark", None)  # absent in folders written before Spark was part of the stack
        services = [ServiceState(**s) for s in raw.pop("services", [])]
        security = raw.pop("security", None)
        return cls(
            security=SecurityState(**security) if security else None,
            nodes=nodes,
            connect=ConnectState(**connect) if connect else None,
            spark=SparkState.from_dict(spark) if spark else None,
            services=services,
            **raw,
        )

    @classmethod
    def load_or_new(cls, state_dir: str | Path) -> StackState:
        """The recorded stack, or an empty record for a folder that has none yet."""
        try:
            return cls.load(state_dir)
        except StackError:
            return cls(state_dir=str(Path(state_dir).resolve()), cluster_id="")
