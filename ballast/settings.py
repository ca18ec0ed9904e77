"""The one configuration mechanism: every knob is a typed dataclass field with a flag and an env var.

Why one mechanism: before it, settings were read five ways (environment at import time, argparse
defaults from ``os.environ``, a generated flag table, ``from_env`` constructors, ad-hoc resolvers),
and the same variable had different defaults in two commands. Here a setting is declared *once*,
as a field of a frozen :class:`Settings` dataclass, with its type, default and help; its flag
(``--name-with-dashes``) and environment variable (``<ENV_PREFIX><NAME>``) are derived from the
field, so they cannot drift apart, and ``--help`` lists every setting with its default and env var.

Precedence is the usual one: flag, then environment, then default. A value that does not convert
to the field's type is a :class:`SettingsError` (a user error: one line, exit code 2).

Groups shared by several commands (the Kafka connection, the topic layout, the local stack) live
here; a service declares its own group next to its code (``services/router/config.py``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self, get_type_hints

from ballast.paths import DEFAULT_STATE_DIR


class SettingsError(ValueError):
    """A setting's value is invalid (wrong type, out of range); the message names flag and env var."""


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    env: str | None = None,
    choices: tuple[Any, ...] | None = None,
    off_flag: str | None = None,
    minimum: float | None = None,
) -> Any:
    """Declare one setting (a dataclass field).

    ``off_flag`` adds a flag that sets a bool to False; ``minimum`` rejects smaller numbers with a
    :class:`SettingsError` that names the flag or environment variable the value came from.
    """
    meta = {
        "help": help,
        "flag": flag,
        "env": env,
        "choices": choices,
        "off_flag": off_flag,
        "minimum": minimum,
    }
    if isinstance(default, list | dict | set):
        raise TypeError("settings defaults must be immutable (use a tuple)")
    return field(default=default, metadata={"setting": meta})


def parse_bool(raw: Any) -> bool:
    """``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case)."""
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _convert(kind: Any, raw: Any) -> Any:
    if kind is bool:
        return parse_bool(raw)
    if kind in (int, float):
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {raw!r}")
        try:
            return kind(raw)
        except (TypeError, ValueError):
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"expected {what}, got {raw!r}") from None
    if kind is Path:
        return Path(raw)
    if getattr(kind, "__origin__", None) is tuple:
        items = [x.strip() for x in raw.split(",")] if isinstance(raw, str) else list(raw)
        item_kind = kind.__args__[0] if kind.__args__ else str
        return tuple(_convert(item_kind, x) for x in items if x != "")
    return str(raw)


@dataclass(frozen=True)
class Settings:
    """Base of every settings group: derive flags and env vars from the fields, read them back."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_"

    @classmethod
    def _settings(cls) -> list[tuple[Field[Any], dict[str, Any], Any]]:
        hints = get_type_hints(cls)
        return [(f, f.metadata["setting"], hints[f.name]) for f in fields(cls) if "setting" in f.metadata]

    @classmethod
    def env_name(cls, name: str) -> str:
        for f, meta, _ in cls._settings():
            if f.name == name:
                return meta["env"] or f"{cls.ENV_PREFIX}{name.upper()}"
        raise KeyError(name)

    @classmethod
    def flag_name(cls, name: str) -> str:
        for f, meta, _ in cls._settings():
            if f.name == name:
                return meta["flag"] or "--" + name.replace("_", "-")
        raise KeyError(name)

    @classmethod
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser | argparse._ArgumentGroup,
        only: tuple[str, ...] | None = None,
    ) -> None:
        """One flag per setting (default ``None``: "not given", so the environment can apply).

        ``only`` limits the flags to some settings of the group (``stack status`` needs the state
        folder but no bootstrap); the others still come from the environment or their default.
        """
        for f, meta, kind in cls._settings():
            if only is not None and f.name not in only:
                continue
            env = cls.env_name(f.name)
            flag = cls.flag_name(f.name)
            default = f.default if f.default is not MISSING else None
            shown = ",".join(default) if isinstance(default, tuple) else default
            if shown == "" or shown is None:
                shown = "none"
            help_text = f"{meta['help']} (default: {shown}; env {env})".replace("%", "%%")
            if kind is bool:
                parser.add_argument(
                    flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction, help=help_text
                )
                if meta["off_flag"]:
                    parser.add_argument(
                        meta["off_flag"],
                        dest=f.name,
                        action="store_false",
                        default=None,
                        help=f"same as --no-{flag[2:]}",
                    )
                continue
            # argparse compares choices with the raw string; the value is converted in from_args
            choices = tuple(str(c) for c in meta["choices"]) if meta["choices"] else None
            metavar = f.name.upper() if not choices else None
            parser.add_argument(
                flag, dest=f.name, default=None, choices=choices, metavar=metavar, help=help_text
            )

    @classmethod
    def from_args(
        cls, args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Flag, else environment, else default; ``given`` (keyword values) wins over both."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f, meta, kind in cls._settings():
            if f.name in given:
                values[f.name] = given.pop(f.name)
                continue
            raw = getattr(args, f.name, None) if args is not None else None
            source = cls.flag_name(f.name)
            if raw is None and cls.env_name(f.name) in env:
                raw = env[cls.env_name(f.name)]
                source = cls.env_name(f.name)
            if raw is None:
                continue
            try:
                values[f.name] = _convert(kind, raw)
            except (TypeError, ValueError) as exc:
                raise SettingsError(f"{source}: {exc}") from None
            if meta["choices"] and values[f.name] not in meta["choices"]:
                allowed = ", ".join(str(c) for c in meta["choices"])
                raise SettingsError(f"{source}: {values[f.name]!r} is not one of {allowed}")
            if meta["minimum"] is not None and values[f.name] < meta["minimum"]:
                raise SettingsError(f"{source}: must be >= {meta['minimum']:g}, got {raw!r}")
        if given:
            raise TypeError(f"{cls.__name__} has no settings {sorted(given)}")
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise SettingsError(str(exc)) from None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f, _, _ in self._settings()}


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


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
        from ballast.devstack.stack import StackError, StackState

        try:
            return StackState.load(self.state_dir).bootstrap
        except StackError:
            return "127.0.0.1:9092"

    def kafka_config(self, client_id: str = "ballast"):  # -> KafkaConfig
        from ballast.kafka.config import KafkaConfig

        return KafkaConfig(bootstrap_servers=self.bootstrap_servers(), client_id=client_id)

    def checked_kafka_config(self, client_id: str = "ballast", timeout: float = 5.0):  # -> KafkaConfig
        """:meth:`kafka_config` once a broker answered; else :class:`BrokerUnreachable` in ``timeout`` s.

        Commands call this first, so a missing broker is one line within seconds instead of a
        client retrying (and logging) for tens of seconds. When the address came from a recorded
        local stack, the message says how to start that stack again.
        """
        from ballast.devstack.stack import StackError, StackState, pid_alive
        from ballast.kafka.admin import BrokerUnreachable, require_broker

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


@dataclass(frozen=True)
class StackSettings(Settings):
    """How the local stack starts its JVMs (``ballast stack up``)."""

    java: str = setting("java", "the java executable that runs brokers and Connect")
    broker_heap: str = setting("768m", "heap of each broker JVM (-Xmx)")
    connect_heap: str = setting("512m", "heap of the Kafka Connect JVM (-Xmx)")


@dataclass(frozen=True)
class LayoutSettings(Settings):
    """The topic layout of one deployment (see :class:`ballast.kafka.topics.TopicLayout`)."""

    prefix: str = setting(
        "ballast", "topic name prefix (keeps deployments apart)", env="BALLAST_TOPIC_PREFIX"
    )
    workers: int = setting(
        8, "logical workers N_max = routed topic partitions (fixed once Spark has state)", minimum=1
    )
    input_partitions: int = setting(4, "partitions of the input topic", minimum=1)
    active_workers: int = setting(
        0, "active workers at epoch 0, before any control event (0: all routed partitions)", minimum=0
    )

    def __post_init__(self) -> None:
        _positive("workers", self.workers)
        _positive("input_partitions", self.input_partitions)
        if self.active_workers < 0:
            raise ValueError(f"active_workers must be >= 0, got {self.active_workers}")

    def layout(self):  # -> TopicLayout (import kept local: settings must not pull in Kafka)
        from ballast.kafka.topics import TopicLayout

        return TopicLayout(prefix=self.prefix, workers=self.workers, input_partitions=self.input_partitions)
