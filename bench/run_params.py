"""A benchmark's command line from its parameters dataclass: one flag per field, ``--quick``, ``--out``.

Why one home: the reduce, migration and shedding benchmarks each wrote the same parser, and only
one of them knew that ``type=bool`` reads ``--flag False`` as true. Here every field of the
dataclass is a flag (booleans as ``--x/--no-x``), ``--quick`` applies the benchmark's smoke-run
values, explicit flags win over both, and a quick run writes ``<name>-quick.json`` unless
``--out`` says otherwise, so a smoke run never overwrites the committed results.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

P = TypeVar("P")


def parse_run(
    argv: list[str] | None,
    prog: str,
    doc: str | None,
    params: type[P],
    quick: Mapping[str, Any],
    quick_help: str,
    out: Path,
) -> tuple[P, Path]:
    """(the parameters, the JSON to write) of ``python -m <prog> [flags]``; ``out``: the default."""
    ap = argparse.ArgumentParser(prog=f"python -m {prog}", description=(doc or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    defaults = asdict(params())  # type: ignore[call-overload]
    for name, default in defaults.items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(default, bool):
            ap.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=f"default {default}"
            )
        else:
            ap.add_argument(flag, type=type(default), default=None, help=f"default {default}")
    ap.add_argument("--out", default=str(out))
    args = ap.parse_args(argv)
    values = defaults | (dict(quick) if args.quick else {})
    values |= {k: v for k, v in vars(args).items() if k in values and v is not None}
    path = Path(args.out)
    if args.quick and args.out == ap.get_default("out"):
        path = path.with_name(f"{path.stem}-quick{path.suffix}")
    return params(**values), path
