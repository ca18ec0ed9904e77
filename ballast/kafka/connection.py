"""How a command or service finds Kafka: ``--bootstrap``, else the local stack in ``--state-dir``.

Why here and not in every command: "flag, else environment, else the recorded local stack, else
127.0.0.1:9092" and "check that a broker answers before doing anything" must mean the same in
every command and service, so a missing broker is one line within seconds everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ballast.devstack.stack import StackError, StackState, pid_alive
from ballast.kafka.admin import BrokerUnreachable, require_broker
from ballast.kafka.config import KafkaConfig
from ballast.paths import DEFAULT_STATE_DIR
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class ConnectionSettings(Settings):
    """How a command finds Kafka: a bootstrap list, else the local stack recorded in ``state_dir``."""

    bootstrap: str = setting(
        "",
        "bootstrap servers (none: the local stack's in --state-dir, else 127.0.0.1:9092)",
        env="BALLAST_BOOTSTRAP_SERVERS",
    )
    state_dir: Path = setting(DEFAULT_STATE_DIR, "local stack folder: state, data and logs")

    def bootstrap_servers(self) -> str:
        """Flag or env, then the recorded local stack, then 127.0.0.1:9092."""
        if self.bootstrap:
            return self.bootstrap
        try:
            # a folder that so far runs only Spark records no brokers, hence no bootstrap
            return StackState.load(self.state_dir).bootstrap or "127.0.0.1:9092"
        except StackError:
            return "127.0.0.1:9092"

    def kafka_config(self, client_id: str = "ballast") -> KafkaConfig:
        return KafkaConfig(bootstrap_servers=self.bootstrap_servers(), client_id=client_id)

    def checked_kafka_config(self, client_id: str = "ballast", timeout: float = 5.0) -> KafkaConfig:
        """:meth:`kafka_config` once a broker answered; else :class:`BrokerUnreachable` in ``timeout`` s.

        Commands call this first, so a missing broker is one line within seconds instead of a
        client retrying (and logging) for tens of seconds. When the address came from a recorded
        local stack, the message says how to start that stack again.
        """
        cfg = self.kafka_config(client_id)
        try:
            require_broker(cfg, timeout=timeout)
        except BrokerUnreachable as exc:
            if self.bootstrap:
                raise
            try:
                stack = StackState.load(self.state_dir)
            except StackError:
                raise exc from None
            if any(pid_alive(n.pid, stack.state_dir) for n in stack.nodes):
                raise
            raise BrokerUnreachable(
                f"no broker at {cfg.bootstrap_servers}: the stack recorded in {self.state_dir} is not "
                f"running — start it with `ballast stack up --state-dir {self.state_dir}` or pass --bootstrap"
            ) from exc
        return cfg
