"""How the ``ballast`` commands talk to people, and how a sub-command is declared.

Why one home: results go to stdout (so they pipe), progress to stderr, tables print as plain
aligned columns (a name is never cut or wrapped, whatever the terminal width), and a value that
makes no sense is a :class:`UsageError`: one line, exit code 2 (:mod:`ballast.cli` maps errors to
exit codes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class UsageError(ValueError):
    """A command-line value makes no sense (a missing file, ``KEY=WORKER`` without a worker)."""


class EnvironmentProblem(RuntimeError):
    """Something outside the command is missing or not answering (a service not running): one
    line, exit 1. Services raise subclasses of it for their own such cases."""


def say(message: str) -> None:
    """A progress line: stderr, so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Plain aligned columns: nothing is ever cut or wrapped, and the output greps and pipes well."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]
    for row in (headers, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def add_command(
    sub: argparse._SubParsersAction, name: str, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """A one-shot sub-command (``one_shot``: librdkafka's retried warnings stay quiet, see ballast.cli)."""
    parser = sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".")
    parser.set_defaults(one_shot=True)
    return parser
