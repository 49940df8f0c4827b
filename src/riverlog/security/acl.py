"""ACLs as Kafka models them, and the pure authorization decision.

An ACL binds a resource pattern (type, name, LITERAL or PREFIXED; the literal name `*` is the
wildcard) to an entry (principal, host, operation, ALLOW or DENY). `authorize` is Kafka's
AclAuthorizer decision for one (principal, host, operation, resource):

1. a super user is allowed everything;
2. the ACLs that apply are those of the literal name, of the wildcard, and of every prefix
   of the name; with none at all, the answer is `allow_if_no_acl`
   (`allow.everyone.if.no.acl.found`);
3. a matching DENY wins; else a matching ALLOW allows; else denied. An entry matches when its
   principal is the principal or `User:*`, its host the host or `*`, and its operation the
   operation, `All`, or one that implies it (Read, Write, Delete and Alter imply Describe;
   AlterConfigs implies DescribeConfigs).

Ids and names are Kafka's (wire ids for the protocol, names for ZooKeeper JSON and tools).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

# Wire ids (org.apache.kafka.common.resource.ResourceType etc.)
RESOURCE_TYPES = {
    0: "Unknown",
    1: "Any",
    2: "Topic",
    3: "Group",
    4: "Cluster",
    5: "TransactionalId",
    6: "DelegationToken",
    7: "User",
}
PATTERN_TYPES = {0: "UNKNOWN", 1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {
    0: "Unknown",
    1: "Any",
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    9: "ClusterAction",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
    13: "CreateTokens",
    14: "DescribeTokens",
}
PERMISSIONS = {0: "Unknown", 1: "Any", 2: "Deny", 3: "Allow"}

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = "Topic", "Group", "Cluster", "TransactionalId"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
ALLOW, DENY = "Allow", "Deny"
ALL_OPERATION = "All"
WILDCARD = "*"
PRINCIPAL_WILDCARD = "User:*"
CLUSTER_NAME = "kafka-cluster"

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
)
CLUSTER_ACTION, IDEMPOTENT_WRITE = "ClusterAction", "IdempotentWrite"
DESCRIBE_CONFIGS, ALTER_CONFIGS = "DescribeConfigs", "AlterConfigs"

_IMPLIED_BY = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}

# The operations each resource type supports (Kafka's authorized-operations sets).
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (
        CREATE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
        ALTER,
        DESCRIBE,
    ),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
}
OPERATION_IDS = {name: key for key, name in OPERATIONS.items()}
RESOURCE_TYPE_IDS = {name: key for key, name in RESOURCE_TYPES.items()}
PATTERN_TYPE_IDS = {name: key for key, name in PATTERN_TYPES.items()}
PERMISSION_IDS = {name: key for key, name in PERMISSIONS.items()}


@dataclass(frozen=True, slots=True)
class Pattern:
    resource_type: str
    name: str
    pattern_type: str = LITERAL


@dataclass(frozen=True, slots=True)
class Entry:
    principal: str
    host: str
    operation: str
    permission: str


Acls = Mapping[Pattern, Collection[Entry]]


def _matches(entry: Entry, principal: str, host: str, operation: str, permission: str) -> bool:
    if entry.permission != permission:
        return False
    if entry.principal != principal and entry.principal != PRINCIPAL_WILDCARD:
        return False
    if entry.host != host and entry.host != WILDCARD:
        return False
    if entry.operation == operation or entry.operation == "All":
        return True
    return permission == ALLOW and entry.operation in _IMPLIED_BY.get(operation, ())


def applicable(
    acls: Acls, resource_type: str, name: str, prefixed: Iterable[Pattern] = ()
) -> list[Entry]:
    """The entries of the literal name, the wildcard, and every prefixed pattern of `name`
    (`prefixed`: the prefixed patterns of this type, to test; all of `acls` when empty)."""
    found: list[Entry] = []
    for key in (Pattern(resource_type, name), Pattern(resource_type, WILDCARD)):
        found.extend(acls.get(key, ()))
    for pattern in prefixed:
        if pattern.resource_type == resource_type and name.startswith(pattern.name):
            found.extend(acls.get(pattern, ()))
    return found


def decide(
    entries: Collection[Entry], principal: str, host: str, operation: str, *, allow_if_no_acl: bool
) -> bool:
    if not entries:
        return allow_if_no_acl
    if any(_matches(e, principal, host, operation, DENY) for e in entries):
        return False
    return any(_matches(e, principal, host, operation, ALLOW) for e in entries)


def authorize(
    principal: str,
    host: str,
    operation: str,
    resource: tuple[str, str],
    acls: Acls,
    *,
    super_users: Collection[str] = (),
    allow_if_no_acl: bool = False,
    prefixed: Iterable[Pattern] | None = None,
) -> bool:
    """Whether `principal` connected from `host` may do `operation` on `resource` (type,
    name). `prefixed` lists the PREFIXED patterns to consider (default: every one)."""
    if principal in super_users:
        return True
    if prefixed is None:
        prefixed = [p for p in acls if p.pattern_type == PREFIXED]
    entries = applicable(acls, resource[0], resource[1], prefixed)
    return decide(entries, principal, host, operation, allow_if_no_acl=allow_if_no_acl)


def authorize_by_resource_type(
    principal: str,
    host: str,
    operation: str,
    resource_type: str,
    acls: Acls,
    *,
    super_users: Collection[str] = (),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether `principal` may do `operation` on at least one resource of `resource_type`
    (KIP-679, Kafka's `authorizeByResourceType`): an idempotent producer's InitProducerId
    needs Write on some topic or IdempotentWrite on the cluster. Allowed by a wildcard or
    prefixed ALLOW, or a literal one, unless a wildcard DENY, a DENY on that very name or a
    DENY prefix of it covers it; with `allow.everyone.if.no.acl.found`, allowed unless a
    wildcard DENY. Only the operation itself or All counts (no implied operations)."""
    if principal in super_users:
        return True

    def names(permission: str, pattern_type: str) -> set[str]:
        return {
            pattern.name
            for pattern, entries in acls.items()
            if pattern.resource_type == resource_type
            and pattern.pattern_type == pattern_type
            and any(
                e.permission == permission
                and e.principal in (principal, PRINCIPAL_WILDCARD)
                and e.host in (host, WILDCARD)
                and e.operation in (operation, "All")
                for e in entries
            )
        }

    deny_literals = names(DENY, LITERAL)
    if WILDCARD in deny_literals:
        return False
    if allow_if_no_acl:
        return True
    deny_prefixes = names(DENY, PREFIXED)

    def denied(name: str) -> bool:
        return any(name.startswith(prefix) for prefix in deny_prefixes)

    if any(not denied(prefix) for prefix in names(ALLOW, PREFIXED)):
        return True
    return any(
        name == WILDCARD or (name not in deny_literals and not denied(name))
        for name in names(ALLOW, LITERAL)
    )


# --- filters (DescribeAcls, DeleteAcls, the acls tool) ---------------------------------


@dataclass(frozen=True, slots=True)
class Filter:
    """None fields match anything; pattern_type ANY matches both, MATCH matches the
    patterns that would apply to the (literal) name."""

    resource_type: str | None = None
    name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches_pattern(self, pattern: Pattern) -> bool:
        if self.resource_type is not None and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type == "MATCH":
            if self.name is None:
                return True
            if pattern.pattern_type == LITERAL:
                return pattern.name in (self.name, WILDCARD)
            return self.name.startswith(pattern.name)
        if self.pattern_type != "ANY" and self.pattern_type != pattern.pattern_type:
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: Entry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation is None or self.operation == entry.operation)
            and (self.permission is None or self.permission == entry.permission)
        )


def select(acls: Acls, flt: Filter) -> list[tuple[Pattern, Entry]]:
    found: list[tuple[Pattern, Entry]] = []
    for pattern, entries in acls.items():
        if flt.matches_pattern(pattern):
            found.extend((pattern, e) for e in entries if flt.matches_entry(e))
    return sorted(
        found,
        key=lambda pe: (
            pe[0].resource_type,
            pe[0].pattern_type,
            pe[0].name,
            pe[1].principal,
            pe[1].operation,
        ),
    )
