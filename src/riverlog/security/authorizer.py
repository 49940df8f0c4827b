"""The configured authorizer: `authorizer.class.name`, `super.users`,
`allow.everyone.if.no.acl.found`, over the ACL cache (`acl_store.AclCache`).

Accepted class names: Kafka's `kafka.security.authorizer.AclAuthorizer` and
`kafka.security.auth.SimpleAclAuthorizer`, and riverlog's `riverlog.security.AclAuthorizer`
— all the same ACL authorizer. Any other name stops start-up (fail closed); an empty name
means no authorizer (every request allowed, ACL APIs answer SECURITY_DISABLED, as Kafka's).
"""

from __future__ import annotations

from collections.abc import Mapping

from riverlog.metadata.store import MetadataStore
from riverlog.security import acl
from riverlog.security.acl_store import AclCache
from riverlog.server.config import ConfigError

MAX_DECISIONS = 100_000
"""Remembered decisions before the memo starts over (bounds memory under many clients)."""

CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "riverlog.security.AclAuthorizer",
)


def configured(props: Mapping[str, str]) -> bool:
    """Whether an authorizer is configured; ConfigError for a class riverlog does not have."""
    name = props.get("authorizer.class.name", "").strip()
    if name and name not in CLASS_NAMES:
        raise ConfigError(
            f"authorizer.class.name: {name} is not available in riverlog "
            f"(use one of {', '.join(CLASS_NAMES)})"
        )
    return bool(name)


class Authorizer:
    def __init__(self, props: Mapping[str, str], store: MetadataStore) -> None:
        self.super_users = frozenset(
            u.strip() for u in props.get("super.users", "").split(";") if u.strip()
        )
        for user in self.super_users:
            if ":" not in user:
                raise ConfigError(f"super.users: {user!r} is not a principal (User:<name>)")
        flag = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
        if flag not in ("true", "false"):
            raise ConfigError(
                f"allow.everyone.if.no.acl.found: expected true or false, got {flag!r}"
            )
        self.allow_if_no_acl = flag == "true"
        self.cache = AclCache(store)
        self._decisions: dict[tuple[str, str, str, str, str], bool] = {}
        self._decided_on = -1  # the cache version the decisions were made on

    def start(self) -> None:
        self.cache.start()

    def allowed(
        self, principal: str, host: str, operation: str, resource_type: str, name: str
    ) -> bool:
        """`acl.authorize` over the cache; decisions are remembered until the ACLs change
        (a request's check is then one dictionary lookup)."""
        if principal in self.super_users:
            return True
        if self._decided_on != self.cache.version or len(self._decisions) > MAX_DECISIONS:
            self._decisions.clear()
            self._decided_on = self.cache.version
        key = (principal, host, operation, resource_type, name)
        decided = self._decisions.get(key)
        if decided is None:
            entries = acl.applicable(self.cache.acls, resource_type, name, self.cache.prefixed)
            decided = acl.decide(
                entries, principal, host, operation, allow_if_no_acl=self.allow_if_no_acl
            )
            self._decisions[key] = decided
        return decided

    def allowed_on_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """`acl.authorize_by_resource_type` over the cache (rare: not remembered)."""
        return acl.authorize_by_resource_type(
            principal,
            host,
            operation,
            resource_type,
            self.cache.acls,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    def operations(self, principal: str, host: str, resource_type: str, name: str) -> int:
        """Kafka's authorized-operations bit field for one resource."""
        bits = 0
        for operation in acl.SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.allowed(principal, host, operation, resource_type, name):
                bits |= 1 << acl.OPERATION_IDS[operation]
        return bits
