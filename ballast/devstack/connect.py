"""A small client for the Kafka Connect REST API, and the FileStreamSource loader.

Why not a library: we need four calls (root, PUT config, GET status, DELETE), and urllib keeps the
dependency list short. The connector config lives in ``deploy/connect/file-source.json`` so users see
exactly what Ballast submits.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from string import Template
from typing import Any

from ballast.paths import DEPLOY_DIR

FILE_SOURCE_TEMPLATE = DEPLOY_DIR / "connect" / "file-source.json"


class ConnectError(RuntimeError):
    """The Connect worker refused a request or did not come up; carries the REST error body."""


def _request(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise ConnectError(f"{method} {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
    return json.loads(raw) if raw else None


def wait_for_connect(url: str, timeout: float = 180.0, log: str | None = None) -> dict[str, Any]:
    """Poll the worker's root resource until it answers (the worker joined its group)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            info = _request("GET", url + "/", timeout=3)
            _request("GET", url + "/connectors", timeout=3)  # answers only once the herder is ready
            return info
        except (OSError, ConnectError) as exc:
            last = str(exc)
        time.sleep(1)
    hint = f"; see {log}" if log else ""
    raise ConnectError(f"Kafka Connect at {url} not ready after {timeout:.0f}s ({last}){hint}")


def file_source_config(file: str | Path, topic: str, name: str | None = None) -> tuple[str, dict[str, str]]:
    """Fill deploy/connect/file-source.json for one file and topic; returns (name, config)."""
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


def delete_connector(url: str, name: str) -> None:
    _request("DELETE", f"{url}/connectors/{name}")


def wait_running(url: str, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the connector and all its tasks are RUNNING; a FAILED task raises with its trace."""
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status = connector_status(url, name)
        except ConnectError:
            time.sleep(0.5)
            continue
        states = [status["connector"]["state"]] + [t["state"] for t in status.get("tasks", [])]
        if "FAILED" in states:
            raise ConnectError(f"connector {name} failed: {json.dumps(status)[:2000]}")
        if status.get("tasks") and all(s == "RUNNING" for s in states):
            return status
        time.sleep(0.5)
    raise ConnectError(f"connector {name} not running after {timeout:.0f}s: {status}")


def load_file(url: str, file: str | Path, topic: str, name: str | None = None) -> str:
    """Submit a FileStreamSource connector that streams ``file`` line by line into ``topic``."""
    if not Path(file).is_file():
        raise ConnectError(f"{file}: no such file")
    connector, config = file_source_config(file, topic, name)
    put_connector(url, connector, config)
    wait_running(url, connector)
    return connector
