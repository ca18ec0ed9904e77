"""The one configuration mechanism: every knob is a typed dataclass field with a flag and an env var.

Why one mechanism: before it, settings were read five ways (environment at import time, argparse
defaults from ``os.environ``, a generated flag table, ``from_env`` constructors, ad-hoc resolvers),
and the same variable had different defaults in two commands. Here a setting is declared *once*,
as a field of a frozen :class:`Settings` dataclass, with its type, default and help; its flag
(``--name-with-dashes``) and environment variable (``<ENV_PREFIX><NAME>``) are derived from the
field, so they cannot drift apart, and ``--help`` lists every setting with its default and env var.

Precedence is the usual one: flag, then environment, then default. A value that does not convert
to the field's type is a :class:`SettingsError` (a user error: one line, exit code 2).

A *pairs* setting (``pairs=True``, e.g. the connection's ``-X KEY=VALUE``) is a list of entries, not
one value: its flag repeats, its variable holds one ``KEY=VALUE`` a line (blank and ``#`` lines
skipped), and the two *merge*: the variable's entries, then the flags' (a key in both: the flag's).
Why merge: a process that hands its settings to a child passes the secret entries in the variable
and the others as flags (below); "flag replaces variable" would drop one half. Entries whose key
``secret_key`` calls secret are :class:`Secret` values and are refused as flags.

A :class:`Secret` (a password) comes from the environment or a file: ``--x-file PATH`` /
``X_FILE`` name a file holding it (a mounted secret); ``--x`` itself still works and warns, since
a flag shows in ``ps``. Order: flag, its file, the variable, its file.

Each group lives beside the concern it configures: the Kafka connection in
``ballast/cli/connection.py``, the topic layout in ``ballast/kafka/topics.py``, the local stack's
JVMs in ``ballast/devstack/jvm.py``, a service's own knobs next to its code
(``services/router/config.py``). This module is the mechanism only, so it imports none of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self, get_type_hints


class SettingsError(ValueError):
    """A setting's value is invalid (wrong type, out of range); the message names flag and env var."""


def _say(line: str) -> None:
    print(f"ballast: {line}", file=sys.stderr, flush=True)


def _secret_file(
    cls: type[Settings], name: str, args: argparse.Namespace | None, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """A secret read from the file its ``--x-file`` flag (``args``) or ``X_FILE`` variable names:
    (the value without its trailing newline, where it came from), or (None, "") when none is named."""
    if args is not None:
        path, source = getattr(args, f"{name}_file", None), f"{cls.flag_name(name)}-file"
    else:
        path, source = env.get(f"{cls.env_name(name)}_FILE"), f"{cls.env_name(name)}_FILE"
    if not path:
        return None, ""
    try:
        return Path(path).read_text().rstrip("\r\n"), source
    except OSError as exc:
        raise SettingsError(f"{source}: cannot read {path}: {exc.strerror}") from None


class Secret(str):
    """A password or key: a ``str`` to every library that needs the value, ``'***'`` in every ``repr``.

    Why a ``str`` subclass: librdkafka, Spark's options and faust take plain strings, and a wrapper
    they cannot read would have to be unwrapped at every call site, where it is easy to forget.
    What it guards against is printing: a frozen settings group, a connection or a rendered client
    dict shows ``'***'`` (containers print their items' ``repr``). ``str(secret)`` and f-strings
    still give the value, on purpose: only renderings should ever do that. Secrets are never turned
    into flags (:meth:`Settings.to_argv` leaves them out; :meth:`Settings.secret_env` hands them to a
    child process through its environment, where ``ps`` does not show them).
    """

    def __repr__(self) -> str:
        return "'***'" if self else "''"


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    env: str | None = None,
    choices: tuple[Any, ...] | None = None,
    off_flag: str | None = None,
    minimum: float | None = None,
    pairs: bool = False,
    secret_key: Callable[[str], bool] | None = None,
    secret_elsewhere: str = "",
    aliases: tuple[str, ...] = (),
    metavar: str | None = None,
) -> Any:
    """Declare one setting (a dataclass field).

    ``off_flag`` adds a flag that sets a bool to False; ``minimum`` rejects smaller numbers with a
    :class:`SettingsError` that names the flag or environment variable the value came from.
    ``pairs`` makes a ``tuple[str, ...]`` a repeatable ``KEY=VALUE`` setting (module docstring);
    ``secret_key`` says which of its keys hold secrets, ``secret_elsewhere`` where else (besides
    the variable) a refused secret entry may go. ``aliases`` are more names of the flag, ``metavar``
    the word ``--help`` shows for its value.
    """
    meta = {
        "help": help,
        "flag": flag,
        "env": env,
        "choices": choices,
        "off_flag": off_flag,
        "minimum": minimum,
        "pairs": pairs,
        "secret_key": secret_key,
        "secret_elsewhere": secret_elsewhere,
        "aliases": aliases,
        "metavar": metavar,
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
    if kind is Secret:
        return Secret(raw)
    if getattr(kind, "__origin__", None) is tuple:
        items = [x.strip() for x in raw.split(",")] if isinstance(raw, str) else list(raw)
        item_kind = kind.__args__[0] if kind.__args__ else str
        return tuple(_convert(item_kind, x) for x in items if x != "")
    return str(raw)


def split_pair(item: str, source: str) -> tuple[str, str]:
    """``KEY=VALUE`` as (key, value); blanks around the key and before the value dropped, as a
    properties file does (the value may hold spaces and ``=``)."""
    key, sep, value = str(item).partition("=")
    if not sep:
        raise SettingsError(f"{source}: expected KEY=VALUE, got {key.strip()!r}")
    if not key.strip():
        raise SettingsError(f"{source}: expected KEY=VALUE, the key is empty")
    return key.strip(), value.lstrip()


def env_pairs(text: str, source: str) -> list[tuple[str, str]]:
    """A pairs variable's entries: one ``KEY=VALUE`` a line, blank lines and ``#`` comments skipped."""
    lines = (line.strip() for line in text.splitlines())
    return [split_pair(line, source) for line in lines if line and not line.startswith("#")]


def _pairs_value(meta: Mapping[str, Any], entries: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """Entries merged (a later key wins), sorted by key (the order they came in means nothing), the
    secret ones as :class:`Secret`."""
    merged = dict(entries)
    secret = meta["secret_key"] or (lambda _key: False)
    return tuple((Secret if secret(k) else str)(f"{k}={v}") for k, v in sorted(merged.items()))


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
    def env_names(cls) -> list[str]:
        """Every environment variable the group reads (a secret's ``_FILE`` variable too)."""
        names = []
        for f, _meta, kind in cls._settings():
            names.append(cls.env_name(f.name))
            if kind is Secret:
                names.append(f"{cls.env_name(f.name)}_FILE")
        return names

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
            if meta["pairs"]:
                text = f"{meta['help']} (repeatable; a variable holds one KEY=VALUE a line; env {env})"
                parser.add_argument(
                    flag, *meta["aliases"], dest=f.name, action="append", default=None, metavar="KEY=VALUE",
                    help=text.replace("%", "%%"),
                )  # fmt: skip
                continue
            if kind is Secret:
                shown = "none; a flag shows in `ps` (warned): prefer the environment or a file"
                parser.add_argument(
                    f"{flag}-file", dest=f"{f.name}_file", default=None, metavar="PATH",
                    help=f"file holding the {meta['help']} (env {env}_FILE)",
                )  # fmt: skip
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
            metavar = (meta["metavar"] or f.name.upper()) if not choices else None
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
            if meta["pairs"]:
                values[f.name] = cls._read_pairs(f.name, meta, args, env, given)
                continue
            if f.name in given:
                values[f.name] = given.pop(f.name)
                continue
            raw = getattr(args, f.name, None) if args is not None else None
            source = cls.flag_name(f.name)
            if raw is not None and kind is Secret:
                env_name = cls.env_name(f.name)
                _say(f"warning: {source} shows in `ps` to every user of this host; give it in "
                     f"{env_name} or a file ({source}-file, {env_name}_FILE)")  # fmt: skip
            if raw is None and kind is Secret:
                raw, source = _secret_file(cls, f.name, args, env)
            if raw is None and cls.env_name(f.name) in env:
                raw = env[cls.env_name(f.name)]
                source = cls.env_name(f.name)
            if raw is None and kind is Secret:
                raw, source = _secret_file(cls, f.name, None, env)
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

    @classmethod
    def _read_pairs(
        cls,
        name: str,
        meta: Mapping[str, Any],
        args: argparse.Namespace | None,
        env: Mapping[str, str],
        given: dict[str, Any],
    ) -> tuple[str, ...]:
        """A pairs setting: a keyword value, else the variable's entries then the flags'."""
        flag, env_name = cls.flag_name(name), cls.env_name(name)
        if name in given:
            return _pairs_value(meta, (split_pair(item, name) for item in given.pop(name)))
        entries = env_pairs(env.get(env_name, ""), env_name)
        for item in (getattr(args, name, None) if args is not None else None) or ():
            key, value = split_pair(item, flag)
            if meta["secret_key"] is not None and meta["secret_key"](key):
                elsewhere = f" or {meta['secret_elsewhere']}" if meta["secret_elsewhere"] else ""
                raise SettingsError(
                    f"{flag} {key}: a secret in a flag shows in `ps` to every user of this host; "
                    f"give it in {env_name} (one KEY=VALUE a line){elsewhere}"
                )
            entries.append((key, value))
        return _pairs_value(meta, entries)

    @classmethod
    def pairs(cls, name: str, items: Iterable[str]) -> tuple[str, ...]:
        """``items`` as the pairs setting ``name`` holds them (merged, sorted, secrets wrapped): for
        a group built in code, whose secret entries must be :class:`Secret` like parsed ones."""
        meta = next(m for f, m, _ in cls._settings() if f.name == name)
        return _pairs_value(meta, (split_pair(item, cls.flag_name(name)) for item in items))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f, _, _ in self._settings()}

    def to_argv(self) -> list[str]:
        """These values as the flags that give them back (``from_args`` of them and of
        :meth:`secret_env` is equal).

        Why: a command that starts another process with the same settings (``ballast reduce
        submit`` runs the job's driver under spark-submit; the local stack starts services)
        passes what it resolved, flags and environment alike, instead of re-parsing its own
        command line. Secrets are left out: they go through :meth:`secret_env`.
        """
        argv: list[str] = []
        for f, meta, kind in self._settings():
            value = getattr(self, f.name)
            flag = self.flag_name(f.name)
            if meta["pairs"]:
                argv += [a for item in value if not isinstance(item, Secret) for a in (flag, item)]
                continue
            if kind is Secret:
                continue
            if kind is bool:
                argv.append(flag if value else f"--no-{flag[2:]}")
            elif isinstance(value, tuple):
                argv += [flag, ",".join(str(v) for v in value)]
            else:
                argv += [flag, str(value)]
        return argv

    def secret_env(self) -> dict[str, str]:
        """The secrets that are set, as the environment variables that give them back (a pairs
        setting's secret entries, one a line, in its variable)."""
        env = {}
        for f, meta, kind in self._settings():
            value = getattr(self, f.name)
            if meta["pairs"]:
                secret = [str(item) for item in value if isinstance(item, Secret)]
                if secret:
                    env[self.env_name(f.name)] = "\n".join(secret)
            elif kind is Secret and value:
                env[self.env_name(f.name)] = str(value)
        return env
