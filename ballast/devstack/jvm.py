"""How the local stack runs a JVM (brokers, Connect): which java, what heap, which log config.

Why apart from the brokers: the Kafka broker, its storage tool and the Connect worker start the
same way (our log4j2 config, G1, a classpath from the Maven jar cache, a log file, a session of
their own so they outlive ``ballast stack up`` and ignore its Ctrl-C). The settings are a
:class:`StackSettings` passed in by the caller; nothing is read from the environment here.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ballast.devstack.processes import in_namespace
from ballast.devstack.state import StackError
from ballast.paths import STACK_CONF_DIR
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class StackSettings(Settings):
    """How the local stack starts its JVMs (``ballast stack up``)."""

    java: str = setting("java", "the java executable that runs brokers, Connect and Spark")
    broker_heap: str = setting("768m", "heap of each broker JVM (-Xmx)")
    connect_heap: str = setting("512m", "heap of the Kafka Connect JVM (-Xmx)")


def launch_java(
    main: str, args: list[str], cp: str, heap: str, log: Path, java: str = "java", namespace: str = ""
) -> subprocess.Popen[bytes]:
    """Start ``main`` in its own session, output appended to ``log``; in network ``namespace`` (a
    host of :mod:`ballast.devstack.hosts`) when given."""
    cmd = [
        java,
        f"-Xmx{heap}",
        "-Xms128m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={STACK_CONF_DIR / 'log4j2.properties'}",
        "-cp",
        cp,
        main,
        *args,
    ]
    cmd = in_namespace(namespace, cmd)
    with open(log, "ab") as out:
        # A new session: the stack outlives `ballast stack up` and ignores the caller's Ctrl-C.
        try:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise StackError(
                f"cannot run java ({java!r}: {exc.strerror}); install a JDK 17+ or set --java / BALLAST_JAVA"
            ) from None
