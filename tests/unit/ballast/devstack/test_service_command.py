"""A service's command line, here or on a host of its own (ballast/devstack/services.py)."""

from __future__ import annotations

import sys

from ballast.devstack.processes import in_namespace
from ballast.devstack.services import ServiceCommand


def test_a_service_runs_here_unless_it_has_a_namespace() -> None:
    here = ServiceCommand("router-r1", "router", ("router", "run"))
    ballast = [sys.executable, "-m", "ballast.cli"]
    assert here.argv("/state") == [*ballast, "router", "run", "--state-dir", "/state"]
    there = ServiceCommand("router-r1", "router", ("router", "run"), namespace="bl-ab12-apps")
    assert there.argv("/state") == ["ip", "netns", "exec", "bl-ab12-apps", *here.argv("/state")]


def test_a_program_of_its_own_runs_in_the_namespace_too() -> None:
    command = ServiceCommand("feeder", "stub", ("-c", "pass"), program=(sys.executable,), namespace="ns1")
    assert command.argv("/state") == ["ip", "netns", "exec", "ns1", sys.executable, "-c", "pass"]


def test_in_namespace_leaves_a_command_alone_without_one() -> None:
    assert in_namespace("", ["java", "-version"]) == ["java", "-version"]
