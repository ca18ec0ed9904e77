"""A service says "ready" to whoever started it: a small file, named by an environment variable.

Why a file (systemd's ``sd_notify(READY=1)``, without systemd): a supervisor must know when a
router has folded the control log and joined its group, or when the reduce's query is running,
before it sends traffic or plans; "the process exists" is not that, and parsing log lines ties the
supervisor to their wording. A service calls :func:`announce_ready` once it is ready; when it was
started by :mod:`ballast.devstack.services`, :data:`READY_FILE_ENV` names the file to write, and
otherwise nothing happens.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

READY_FILE_ENV = "BALLAST_READY_FILE"


def announce_ready(what: str, **details: Any) -> None:
    """Write ``{"pid", "time", "what", **details}`` to the ready file, if one was asked for."""
    target = os.environ.get(READY_FILE_ENV)
    if not target:
        return
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "time": time.time(), "what": what, **details}))
    tmp.replace(path)  # atomic: a reader never sees half a file


def read_ready(path: str | Path) -> dict[str, Any] | None:
    """What a service announced, or None before it did."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
