"""The operations a client may perform on a resource, as Metadata, DescribeCluster and
DescribeGroups report them (`include_*_authorized_operations`, KIP-430).

One function, `authorized_operations`, answers for every handler; an authorizer (ACLs) will
replace its body, deciding per principal. While riverlog has none, every operation Kafka
defines for the resource type is allowed, and the answer is that set as Kafka encodes it: a
bitfield with bit `code` set for each `AclOperation` code. A request that did not ask gets
Kafka's "omitted" value, -2^31.

Pure: no I/O, no state.
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    """Kafka's AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(IntEnum):
    """Kafka's ResourceType codes (those that report authorized operations)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


OMITTED = -(2**31)
"""What Kafka answers when the client did not ask for authorized operations."""

_O = AclOperation
SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            _O.READ,
            _O.WRITE,
            _O.CREATE,
            _O.DESCRIBE,
            _O.DELETE,
            _O.ALTER,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            _O.CREATE,
            _O.CLUSTER_ACTION,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
            _O.IDEMPOTENT_WRITE,
            _O.ALTER,
            _O.DESCRIBE,
        }
    ),
}
"""Kafka's operations per resource type (AclEntry.supportedOperations)."""


def bitfield(operations: frozenset[AclOperation]) -> int:
    return sum(1 << op for op in operations)


def authorized_operations(resource_type: ResourceType, name: str, requested: bool) -> int:
    """The operations allowed on the resource `name`, or OMITTED when not `requested`. With
    no authorizer configured: every operation Kafka supports on that resource type."""
    if not requested:
        return OMITTED
    return bitfield(SUPPORTED[resource_type])
