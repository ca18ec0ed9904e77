"""Every consumer group and transactional id of a deployment, named from its topic prefix.

Why one module: these names are what a cluster's ACLs grant, and what keeps two deployments on one
cluster apart. Each starts with the deployment's prefix ``P`` (``--prefix``, default ``ballast``),
like its topics, so a second deployment never joins the first one's groups or fences its producers
(two routers named ``r1`` in two deployments used to share a ``transactional.id``), and a service's
grant can be a resource-name prefix. The table of them all is in README.md ("Kafka identities of a
deployment"). The control log's writers' transactional id
(:func:`ballast.control.writer.writer_transactional_id`) is derived from the control topic, so it
carries the prefix too.

Consumers that only ``assign()`` partitions and never commit (readers of the control log, of the
metrics, of watermarks) take a :func:`scratch_group` instead.
"""

from __future__ import annotations

import uuid

SCRATCH_PREFIX = "ballast-scratch."


def router_group(prefix: str) -> str:
    """The routers' consumer group (the shedder measures their committed offsets)."""
    return f"{prefix}.routers"


def router_transactional_id(group: str, router_id: str, id_prefix: str = "") -> str:
    """A router's ``transactional.id``: ``<group>.<router_id>``, behind ``id_prefix`` when given.

    Stable across restarts of one instance (``init_transactions`` fences its zombie); the group,
    which carries the deployment's prefix, keeps namesakes of two deployments apart.
    """
    return f"{id_prefix}.{group}.{router_id}" if id_prefix else f"{group}.{router_id}"


def shedder_id(prefix: str) -> str:
    """The shedder's default id: its faust app id and consumer group, and its request ids' stem."""
    return f"{prefix}.shedder"


def controller_group(prefix: str) -> str:
    """The group whose committed offset says which control requests the controller consumed."""
    return f"{prefix}.controller"


def reduce_group_prefix(prefix: str) -> str:
    """Spark's Kafka source ``groupIdPrefix``: its consumers' groups are ``<this>-<uuid>-...``."""
    return f"{prefix}.reduce"


def scratch_group(purpose: str) -> str:
    """A fresh ``group.id`` for a consumer that only assigns partitions and never commits.

    Why a group at all: librdkafka requires a ``group.id`` and looks up the group's coordinator
    even for such a consumer, which a cluster with ACLs authorizes against the group's name. One
    well-known prefix (``ballast-scratch.``) lets every principal be granted exactly that prefix.
    Nothing is stored under these groups, so deployments sharing the prefix harm nobody; the
    random tail keeps two readers from ever looking like one group.
    """
    if not purpose or any(c in purpose for c in " /"):
        raise ValueError(f"purpose must be a non-empty token, got {purpose!r}")
    return f"{SCRATCH_PREFIX}{purpose}.{uuid.uuid4().hex[:10]}"
