"""The ``ballast`` command's plumbing: the entry point, sub-command discovery, how a command finds
Kafka, and how commands talk to people. The sub-commands themselves live beside their concerns
(``ballast/devstack/cli.py``, ``services/router/cli.py``, …) and are found through entry points.
"""
