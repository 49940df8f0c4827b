"""CreateAcls, DescribeAcls, DeleteAcls; DescribeUserScramCredentials and
AlterUserScramCredentials.

ACL APIs answer SECURITY_DISABLED when no authorizer is configured (Kafka's answer). Creating
and deleting need Alter on the cluster, describing Describe (checked here per entry for
Create/Delete, as Kafka answers per entry; DescribeAcls by the authorization table). Bad
bindings (unknown type, ANY/MATCH pattern in a creation, a principal without a type) answer
INVALID_REQUEST for that entry. SCRAM upsertions carry the salted password (the client
salts, Kafka's protocol); the broker derives the stored and server keys (RFC 5802) and keeps
them as Kafka does (`security.scram_credentials`).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.security import acl, scram_credentials
from riverlog.security import principal as principals
from riverlog.security.authorization import subject_of
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

DISABLED = error_codes.SECURITY_DISABLED
DISABLED_MESSAGE = "No Authorizer is configured on the broker"


def _may_alter_cluster(broker: Broker, ctx: RequestContext) -> bool:
    if broker.authorizer is None:
        return True
    subject = subject_of(ctx, broker.authorizer)
    return subject is None or subject.on_cluster(acl.ALTER)


def _binding(c: m.CreateAclsRequest.AclCreation) -> tuple[acl.Pattern, acl.Entry]:
    kind = acl.RESOURCE_TYPES.get(c.resource_type)
    pattern = acl.PATTERN_TYPES.get(c.resource_pattern_type, "LITERAL")
    operation = acl.OPERATIONS.get(c.operation)
    permission = acl.PERMISSIONS.get(c.permission_type)
    if kind not in (
        acl.TOPIC,
        acl.GROUP,
        acl.CLUSTER,
        acl.TRANSACTIONAL_ID,
        "DelegationToken",
        "User",
    ):
        raise ValueError(f"Invalid resource type {c.resource_type}")
    if pattern not in (acl.LITERAL, acl.PREFIXED):
        raise ValueError(f"Invalid pattern type {pattern}")
    if operation in (None, "Unknown", "Any") or permission not in (acl.ALLOW, acl.DENY):
        raise ValueError("Invalid operation or permission type")
    if kind == acl.CLUSTER and c.resource_name != acl.CLUSTER_NAME:
        raise ValueError("The only valid name for the CLUSTER resource is kafka-cluster")
    if not c.resource_name:
        raise ValueError("Resource name must not be empty")
    principals.parse(c.principal)
    assert operation is not None and permission is not None
    return acl.Pattern(kind, c.resource_name, pattern), acl.Entry(
        c.principal, c.host, operation, permission
    )


def handle_create_acls(broker: Broker, ctx: RequestContext) -> m.CreateAclsResponse:
    request = ctx.request.body
    assert isinstance(request, m.CreateAclsRequest)
    Result = m.CreateAclsResponse.AclCreationResult
    if broker.authorizer is None:
        return m.CreateAclsResponse(
            results=[
                Result(error_code=DISABLED.code, error_message=DISABLED_MESSAGE)
                for _ in request.creations
            ]
        )
    if not _may_alter_cluster(broker, ctx):
        denied = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
        return m.CreateAclsResponse(results=[Result(error_code=denied) for _ in request.creations])
    results = []
    for creation in request.creations:
        try:
            pattern, entry = _binding(creation)
        except ValueError as e:
            results.append(
                Result(error_code=error_codes.INVALID_REQUEST.code, error_message=str(e))
            )
            continue
        broker.authorizer.cache.add(pattern, [entry])
        results.append(Result(error_code=0, error_message=None))
    return m.CreateAclsResponse(results=results)


def _filter(f: m.DescribeAclsRequest | m.DeleteAclsRequest.DeleteAclsFilter) -> acl.Filter:
    kind = acl.RESOURCE_TYPES.get(f.resource_type_filter, "Unknown")
    operation = acl.OPERATIONS.get(f.operation, "Unknown")
    permission = acl.PERMISSIONS.get(f.permission_type, "Unknown")
    pattern = acl.PATTERN_TYPES.get(f.pattern_type_filter, "LITERAL")
    if "Unknown" in (kind, operation, permission) or pattern == "UNKNOWN":
        raise ValueError("Invalid filter: unknown resource type, operation or permission")
    return acl.Filter(
        resource_type=None if kind == "Any" else kind,
        name=f.resource_name_filter,
        pattern_type=pattern,
        principal=f.principal_filter,
        host=f.host_filter,
        operation=None if operation == "Any" else operation,
        permission=None if permission == "Any" else permission,
    )


def _wire(pattern: acl.Pattern) -> tuple[int, int]:
    return acl.RESOURCE_TYPE_IDS[pattern.resource_type], acl.PATTERN_TYPE_IDS[pattern.pattern_type]


def handle_describe_acls(broker: Broker, ctx: RequestContext) -> m.DescribeAclsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DescribeAclsRequest)
    if broker.authorizer is None:
        return m.DescribeAclsResponse(error_code=DISABLED.code, error_message=DISABLED_MESSAGE)
    try:
        flt = _filter(request)
    except ValueError as e:
        return m.DescribeAclsResponse(
            error_code=error_codes.INVALID_REQUEST.code, error_message=str(e)
        )
    grouped: dict[acl.Pattern, list[acl.Entry]] = {}
    for pattern, entry in acl.select(broker.authorizer.cache.acls, flt):
        grouped.setdefault(pattern, []).append(entry)
    resources = []
    for pattern, entries in grouped.items():
        kind, pattern_type = _wire(pattern)
        resources.append(
            m.DescribeAclsResponse.DescribeAclsResource(
                resource_type=kind,
                resource_name=pattern.name,
                pattern_type=pattern_type,
                acls=[
                    m.DescribeAclsResponse.AclDescription(
                        principal=e.principal,
                        host=e.host,
                        operation=acl.OPERATION_IDS[e.operation],
                        permission_type=acl.PERMISSION_IDS[e.permission],
                    )
                    for e in entries
                ],
            )
        )
    return m.DescribeAclsResponse(error_code=0, error_message=None, resources=resources)


def handle_delete_acls(broker: Broker, ctx: RequestContext) -> m.DeleteAclsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DeleteAclsRequest)
    Result = m.DeleteAclsResponse.DeleteAclsFilterResult
    if broker.authorizer is None:
        return m.DeleteAclsResponse(
            filter_results=[
                Result(error_code=DISABLED.code, error_message=DISABLED_MESSAGE)
                for _ in request.filters
            ]
        )
    if not _may_alter_cluster(broker, ctx):
        denied = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
        return m.DeleteAclsResponse(
            filter_results=[Result(error_code=denied) for _ in request.filters]
        )
    results = []
    for f in request.filters:
        try:
            flt = _filter(f)
        except ValueError as e:
            results.append(
                Result(error_code=error_codes.INVALID_REQUEST.code, error_message=str(e))
            )
            continue
        removed = broker.authorizer.cache.remove(flt)
        matching = []
        for pattern, entry in removed:
            kind, pattern_type = _wire(pattern)
            matching.append(
                m.DeleteAclsResponse.DeleteAclsMatchingAcl(
                    error_code=0,
                    error_message=None,
                    resource_type=kind,
                    resource_name=pattern.name,
                    pattern_type=pattern_type,
                    principal=entry.principal,
                    host=entry.host,
                    operation=acl.OPERATION_IDS[entry.operation],
                    permission_type=acl.PERMISSION_IDS[entry.permission],
                )
            )
        results.append(Result(error_code=0, error_message=None, matching_acls=matching))
    return m.DeleteAclsResponse(filter_results=results)


# --- SCRAM credentials -------------------------------------------------------------------


def handle_describe_user_scram_credentials(
    broker: Broker, ctx: RequestContext
) -> m.DescribeUserScramCredentialsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DescribeUserScramCredentialsRequest)
    Result = m.DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    Info = m.DescribeUserScramCredentialsResponse.CredentialInfo
    wanted = (
        [u.name for u in request.users] if request.users else scram_credentials.users(broker.store)
    )
    results = []
    for user in wanted:
        config = scram_credentials.read_user(broker.store, user)
        infos = []
        for mechanism in scram_credentials.MECHANISMS:
            if mechanism in config:
                credential = scram_credentials.ScramCredential.from_text(config[mechanism])
                infos.append(
                    Info(
                        mechanism=scram_credentials.MECHANISM_TYPES[mechanism],
                        iterations=credential.iterations,
                    )
                )
        if infos:
            results.append(
                Result(user=user, error_code=0, error_message=None, credential_infos=infos)
            )
        elif request.users:
            results.append(
                Result(
                    user=user,
                    error_code=error_codes.RESOURCE_NOT_FOUND.code,
                    error_message=f"Attempt to describe a user credential that "
                    f"does not exist: {user}",
                )
            )
    return m.DescribeUserScramCredentialsResponse(error_code=0, error_message=None, results=results)


def _keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
    HMAC(SaltedPassword, "Server Key")."""
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    return digest(client_key).digest(), hmac.new(salted_password, b"Server Key", digest).digest()


def handle_alter_user_scram_credentials(
    broker: Broker, ctx: RequestContext
) -> m.AlterUserScramCredentialsResponse:
    request = ctx.request.body
    assert isinstance(request, m.AlterUserScramCredentialsRequest)
    Result = m.AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    by_type = {t: name for name, t in scram_credentials.MECHANISM_TYPES.items()}
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not _may_alter_cluster(broker, ctx):
        denied = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
        return m.AlterUserScramCredentialsResponse(
            results=[Result(user=u, error_code=denied) for u in dict.fromkeys(users)]
        )
    results: dict[str, m.AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult] = {}
    for d in request.deletions:
        mechanism = by_type.get(d.mechanism)
        if mechanism is None:
            results[d.name] = Result(
                user=d.name,
                error_code=error_codes.UNSUPPORTED_SASL_MECHANISM.code,
                error_message="Unknown SCRAM mechanism",
            )
        elif not scram_credentials.delete_credential(broker.store, d.name, mechanism):
            results[d.name] = Result(
                user=d.name,
                error_code=error_codes.RESOURCE_NOT_FOUND.code,
                error_message=f"Attempt to delete a user credential that does not exist: {d.name}",
            )
        else:
            results.setdefault(d.name, Result(user=d.name, error_code=0, error_message=None))
    for u in request.upsertions:
        mechanism = by_type.get(u.mechanism)
        if mechanism is None:
            results[u.name] = Result(
                user=u.name,
                error_code=error_codes.UNSUPPORTED_SASL_MECHANISM.code,
                error_message="Unknown SCRAM mechanism",
            )
            continue
        if not (
            scram_credentials.MIN_ITERATIONS <= u.iterations <= scram_credentials.MAX_ITERATIONS
        ):
            results[u.name] = Result(
                user=u.name,
                error_code=error_codes.UNACCEPTABLE_CREDENTIAL.code,
                error_message=f"Iterations {u.iterations} out of range "
                f"[{scram_credentials.MIN_ITERATIONS}, "
                f"{scram_credentials.MAX_ITERATIONS}]",
            )
            continue
        stored, server = _keys(mechanism, u.salted_password)
        credential = scram_credentials.ScramCredential(u.salt, stored, server, u.iterations)
        scram_credentials.store_credential(broker.store, u.name, mechanism, credential)
        results.setdefault(u.name, Result(user=u.name, error_code=0, error_message=None))
    return m.AlterUserScramCredentialsResponse(results=list(results.values()))
