"""A small client for the Kafka Connect REST API, and the FileStreamSource loader.

Why not a library: we need four calls (root, PUT config, GET status, DELETE), and urllib keeps the
dependency list short. The connector config lives in ``ballast/devstack/conf/connect/file-source.json``
(package data) so users see exactly what Ballast submits.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

from ballast.paths import STACK_CONF_DIR
from ballast.waiting import WaitTimeout, wait_until

FILE_SOURCE_TEMPLATE = STACK_CONF_DIR / "connect" / "file-source.json"


class ConnectError(RuntimeError):
    """The Connect worker refused a request or did not come up; carries the REST error body."""


class ConnectUnreachable(ConnectError):
    """Nothing answered at the Connect REST URL."""


def _request(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise ConnectError(f"{method} {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectUnreachable(f"no Kafka Connect at {url} ({reason})") from None
    return json.loads(raw) if raw else None


def wait_for_connect(
    url: str,
    timeout: float = 180.0,
    log: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Poll the worker's root resource until it answers (the worker joined its group)."""
    last = ["no answer"]
    started = time.monotonic()
    next_report = [started]

    def ready() -> dict[str, Any] | None:
        now = time.monotonic()
        if progress is not None and now >= next_report[0]:
            elapsed = f" ({now - started:.0f} s)" if now > started + 1 else ""
            progress(f"waiting for Kafka Connect at {url}…{elapsed}")
            next_report[0] = now + 5.0
        try:
            info = _request("GET", url + "/", timeout=3)
            _request("GET", url + "/connectors", timeout=3)  # answers only once the herder is ready
            return info
        except ConnectError as exc:
            last[0] = str(exc)
            return None

    try:
        return wait_until(ready, timeout, f"Kafka Connect at {url}", interval=1.0, describe=lambda: last[0])
    except WaitTimeout as exc:
        hint = f"; see {log}" if log else ""
        raise ConnectError(f"{exc}{hint}") from None


def file_source_config(file: str | Path, topic: str, name: str | None = None) -> tuple[str, dict[str, str]]:
    """Fill ballast/devstack/conf/connect/file-source.json for one file and topic; returns (name, config)."""
    rendered = Template(FILE_SOURCE_TEMPLATE.read_text()).substitute(
        file=str(Path(file).resolve()), topic=topic
    )
    spec = json.loads(rendered)
    return name or spec["name"], spec["config"]


def put_connector(url: str, name: str, config: dict[str, str]) -> dict[str, Any]:
    """Create or update a connector (PUT is idempotent in Connect's REST API)."""
    return _request("PUT", f"{url}/connectors/{name}/config", config)


def connector_status(url: str, name: str) -> dict[str, Any]:
    return _request("GET", f"{url}/connectors/{name}/status")


def list_connectors(url: str) -> list[str]:
    return list(_request("GET", f"{url}/connectors", timeout=5))


def delete_connector(url: str, name: str) -> None:
    _request("DELETE", f"{url}/connectors/{name}")


def wait_running(url: str, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the connector and all its tasks are RUNNING; a FAILED task raises with its trace."""
    last: list[dict[str, Any]] = [{}]

    def running() -> dict[str, Any] | None:
        try:
            status = connector_status(url, name)
        except ConnectUnreachable:
            raise
        except ConnectError:  # 404 until the herder has the new connector
            return None
        last[0] = status
        states = [status["connector"]["state"]] + [t["state"] for t in status.get("tasks", [])]
        if "FAILED" in states:
            raise ConnectError(f"connector {name} failed: {json.dumps(status)[:2000]}")
        return status if status.get("tasks") and all(s == "RUNNING" for s in states) else None

    try:
        return wait_until(
            running, timeout, f"connector {name} running", interval=0.5, describe=lambda: str(last[0])
        )
    except WaitTimeout as exc:
        raise ConnectError(str(exc)) from None


def count_lines(file: str | Path, start: int = 0) -> int:
    """Records FileStreamSource makes of ``file`` from byte ``start``: one per line ending in a newline."""
    with open(file, "rb") as f:
        f.seek(start)
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def source_position(url: str, name: str, file: str | Path) -> int:
    """The byte position in ``file`` that connector ``name`` has committed (0: none, or no connector).

    Connect keeps a FileStreamSource's position under the connector's name, so submitting the same
    name again resumes there instead of re-reading the file.
    """
    try:
        offsets = _request("GET", f"{url}/connectors/{name}/offsets", timeout=5)
    except ConnectUnreachable:
        raise
    except ConnectError:  # 404: no such connector
        return 0
    path = str(Path(file).resolve())
    for entry in offsets.get("offsets", []):
        if entry.get("partition", {}).get("filename") == path:
            return int(entry.get("offset", {}).get("position", 0))
    return 0


def load_file(url: str, file: str | Path, topic: str, name: str | None = None) -> str:
    """Submit a FileStreamSource connector that streams ``file`` line by line into ``topic``."""
    if not Path(file).is_file():
        raise ConnectError(f"{file}: no such file")
    connector, config = file_source_config(file, topic, name)
    put_connector(url, connector, config)
    wait_running(url, connector)
    return connector
