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
) -> Any:
    """Declare one setting (a dataclass field). ``off_flag`` adds a flag that sets a bool to False."""
    meta = {"help": help, "flag": flag, "env": env, "choices": choices, "off_flag": off_flag}
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
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    if kind is Path:
        return Path(raw)
    if getattr(kind, "__origin__", None) is tuple:
        return tuple(x.strip() for x in raw.split(",") if x.strip()) if isinstance(raw, str) else tuple(raw)
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
    def add_arguments(cls, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """One flag per setting (default ``None``: "not given", so the environment can apply)."""
        for f, meta, kind in cls._settings():
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
            metavar = f.name.upper() if not meta["choices"] else None
            parser.add_argument(
                flag, dest=f.name, default=None, choices=meta["choices"], metavar=metavar, help=help_text
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
                raise SettingsError(f"{source}: {values[f.name]!r} is not one of {meta['choices']}")
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
    workers: int = setting(8, "logical workers N_max = routed topic partitions (fixed once Spark has state)")
    input_partitions: int = setting(4, "partitions of the input topic")
    active_workers: int = setting(
        0, "active workers at epoch 0, before any control event (0: all routed partitions)"
    )

    def __post_init__(self) -> None:
        _positive("workers", self.workers)
        _positive("input_partitions", self.input_partitions)
        if self.active_workers < 0:
            raise ValueError(f"active_workers must be >= 0, got {self.active_workers}")

    def layout(self):  # -> TopicLayout (import kept local: settings must not pull in Kafka)
        from ballast.kafka.topics import TopicLayout

        return TopicLayout(prefix=self.prefix, workers=self.workers, input_partitions=self.input_partitions)
