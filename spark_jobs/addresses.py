"""The one address a Spark driver binds and advertises: what its executors connect back to.

Why its own module: ``reduce submit`` (:mod:`spark_jobs.submit`, before spark-submit starts the
driver's JVM) and ``reduce run --master`` (:mod:`spark_jobs.session`, which starts it in-process)
must choose it the same way. A driver on a host with several addresses that advertises the wrong
one, or 127.0.0.1, starts fine and then waits forever for executors that cannot reach it.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from ballast.cli.console import EnvironmentProblem, UsageError

LOOPBACK = "127.0.0.1"
GIVE = "(--driver-host; with `reduce run --master`, spark.driver.host in --spark-conf)"


class DriverAddressError(EnvironmentProblem):
    """This host has no route to the master (or cannot resolve it): the driver's address must be given."""


def master_address(master: str) -> tuple[str, int]:
    """(host, port) of a ``spark://`` master URL; of its first master when it lists several (HA)."""
    first = master.split(",", 1)[0]
    parts = urlsplit(first)
    if parts.scheme != "spark" or not parts.hostname:
        raise UsageError(f"not a Spark standalone master URL: {master!r} (spark://HOST:PORT)")
    return parts.hostname, parts.port or 7077


def driver_address(master: str) -> str:
    """The address of this host that the master (and so, presumably, its workers) can reach: the
    source address of the route to the master's host, 127.0.0.1 when that host is on loopback.

    A UDP socket's ``connect`` only chooses the route (no packet is sent), and ``getsockname`` then
    says which of this host's addresses the kernel would send from. A master that is not
    ``spark://`` (``local[2]``) runs the executors in the driver: loopback.
    """
    if not master.startswith("spark://"):
        return LOOPBACK
    host, port = master_address(master)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise DriverAddressError(
            f"cannot resolve the Spark master's host {host!r} ({exc.strerror}); give the driver's "
            f"address {GIVE}"
        ) from None
    family, _, _, _, where = found[0]
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(where)
            address = str(probe.getsockname()[0])
    except OSError as exc:
        raise DriverAddressError(
            f"no route from this host to the Spark master at {host} ({exc.strerror}); give the "
            f"driver's address {GIVE}"
        ) from None
    return LOOPBACK if ipaddress.ip_address(address).is_loopback else address
