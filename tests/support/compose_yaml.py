"""A reader for the YAML that deploy/docker-compose.yml is written in, and nothing more.

Why not PyYAML: it is not among the pinned requirements, and the test environment is shared with
other checkouts, so adding a package to it is not this test's call. The compose file keeps to a
small subset: block mappings, block sequences of scalars, plain and quoted scalars, flow sequences
of scalars (``["router", "run"]``) and comments. Anything else (anchors, aliases, merge keys, block
scalars, flow mappings, tags, a sequence of mappings, tabs) is a :class:`ComposeYamlError` naming the
line, so a construct this reader does not know fails the test instead of being read wrong.

Every scalar is read as the string it is written as (``KAFKA_NODE_ID: 1`` gives ``"1"``, ``init:
true`` gives ``"true"``): Compose passes environment values as strings, and the checks compare
text. A key with nothing under it is ``None``, as in YAML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class ComposeYamlError(ValueError):
    """The text leaves the subset this reader knows; the message names the line."""


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def _strip_comment(text: str) -> str:
    """``text`` without a ``#`` comment (one at the start or after a space, outside quotes)."""
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote == '"' and c == "\\":
            i += 2
            continue
        if quote:
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
        i += 1
    return text.rstrip()


def _lines(source: str) -> list[_Line]:
    lines = []
    for number, raw in enumerate(source.splitlines(), start=1):
        text = _strip_comment(raw)
        if not text.strip():
            continue
        body = text.lstrip(" ")
        if body.startswith("\t") or "\t" in text[: len(text) - len(body)]:
            raise ComposeYamlError(f"line {number}: a tab in the indentation")
        if body in ("---", "..."):
            raise ComposeYamlError(f"line {number}: several documents")
        lines.append(_Line(number, len(text) - len(body), body))
    return lines


def _split_flow(inner: str, number: int) -> list[str]:
    """The items of a flow sequence's inside, split at commas outside quotes."""
    items, current, quote = [], [], ""
    i = 0
    while i < len(inner):
        c = inner[i]
        if quote == '"' and c == "\\":
            current += inner[i : i + 2]
            i += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == ",":
            items.append("".join(current))
            current = []
            i += 1
            continue
        current.append(c)
        i += 1
    if quote:
        raise ComposeYamlError(f"line {number}: unterminated quote in a flow sequence")
    items.append("".join(current))
    if items and not items[-1].strip():
        items.pop()  # a trailing comma
    return [item.strip() for item in items]


def _scalar(text: str, number: int) -> str:
    text = text.strip()
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise ComposeYamlError(f"line {number}: unterminated double-quoted scalar")
        try:
            return json.loads(text)  # YAML's double-quoted escapes that a compose file uses are JSON's
        except json.JSONDecodeError as exc:
            raise ComposeYamlError(f"line {number}: double-quoted scalar: {exc}") from None
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'"):
            raise ComposeYamlError(f"line {number}: unterminated single-quoted scalar")
        return text[1:-1].replace("''", "'")
    if not text or text[0] in "&*!|>{}[]%@`,?":
        raise ComposeYamlError(f"line {number}: {text!r} is outside the subset this reader knows")
    return text


def _value(text: str, number: int) -> Any:
    """An inline value: a flow sequence of scalars, or a scalar."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise ComposeYamlError(f"line {number}: a flow sequence must end on its line")
        inner = text[1:-1]
        return [_scalar(item, number) for item in _split_flow(inner, number)] if inner.strip() else []
    return _scalar(text, number)


def _key_value(line: _Line) -> tuple[str, str]:
    text = line.text
    if text.endswith(":"):
        key, rest = text[:-1], ""
    else:
        at = text.find(": ")
        if at < 0:
            raise ComposeYamlError(f"line {line.number}: expected `key: value`, got {text!r}")
        key, rest = text[:at], text[at + 2 :].strip()
    if not key or key[0] in "\"'?&*!" or key == "<<":
        raise ComposeYamlError(f"line {line.number}: key {key!r} is outside the subset this reader knows")
    return key, rest


def _block(lines: list[_Line], i: int, indent: int) -> tuple[Any, int]:
    """The mapping or sequence whose lines start at ``lines[i]`` with ``indent``; and the next line."""
    if lines[i].text == "-" or lines[i].text.startswith("- "):
        items: list[Any] = []
        while i < len(lines) and lines[i].indent == indent:
            line = lines[i]
            if not line.text.startswith("- "):
                raise ComposeYamlError(f"line {line.number}: a mapping key among sequence items")
            item = line.text[2:].strip()
            if item.endswith(":") or (": " in item and not item.startswith(("'", '"', "["))):
                raise ComposeYamlError(f"line {line.number}: a sequence of mappings")
            items.append(_value(item, line.number))
            i += 1
        if i < len(lines) and lines[i].indent > indent:
            raise ComposeYamlError(f"line {lines[i].number}: unexpected indentation")
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent:
        line = lines[i]
        if line.text.startswith("- "):
            raise ComposeYamlError(f"line {line.number}: a sequence item among mapping keys")
        key, rest = _key_value(line)
        if key in mapping:
            raise ComposeYamlError(f"line {line.number}: duplicate key {key!r}")
        i += 1
        if rest:
            mapping[key] = _value(rest, line.number)
        elif i < len(lines) and lines[i].indent > indent:
            mapping[key], i = _block(lines, i, lines[i].indent)
        else:
            mapping[key] = None
        if i < len(lines) and lines[i].indent > indent:
            raise ComposeYamlError(f"line {lines[i].number}: unexpected indentation")
    return mapping, i


def load(source: str) -> Any:
    """The document in ``source`` (a mapping, for a compose file)."""
    lines = _lines(source)
    if not lines:
        return None
    if lines[0].indent:
        raise ComposeYamlError(f"line {lines[0].number}: the document must start at column 1")
    document, i = _block(lines, 0, 0)
    if i < len(lines):
        raise ComposeYamlError(f"line {lines[i].number}: unexpected indentation")
    return document
