"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas of `user` and `client-id`
entities (a null name is the `<default>` entity) in the store (`server/quotas/store.py`).

Describe filters with Kafka's match types (0 exact name, 1 the default, 2 any) and `strict`
(no other entity parts); it needs DescribeConfigs on the cluster. Alter takes
`producer_byte_rate`, `consumer_byte_rate` and `request_percentage` only (other keys, the
`ip` entity type, duplicate types, bad values: INVALID_REQUEST for that entry, nothing of it
written), honours `validate_only`, and needs AlterConfigs on the cluster (per entry
CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.security import acl
from riverlog.security.authorization import subject_of
from riverlog.server.dispatch import RequestContext
from riverlog.server.quotas import store as quota_store
from riverlog.server.quotas.rules import (
    CLIENT_ID,
    DEFAULT,
    USER,
    Entity,
    entities_matching,
    parse_value,
)

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

MATCH_TYPES = {0: "exact", 1: "default", 2: "specified"}


def _may(broker: Broker, ctx: RequestContext, operation: str) -> bool:
    if broker.authorizer is None:
        return True
    subject = subject_of(ctx, broker.authorizer)
    return subject is None or subject.on_cluster(operation)


def handle_describe_client_quotas(
    broker: Broker, ctx: RequestContext
) -> m.DescribeClientQuotasResponse:
    request = ctx.request.body
    assert isinstance(request, m.DescribeClientQuotasRequest)
    Response = m.DescribeClientQuotasResponse
    if not _may(broker, ctx, acl.DESCRIBE_CONFIGS):
        return Response(
            error_code=error_codes.CLUSTER_AUTHORIZATION_FAILED.code,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    wanted: list[tuple[str, str, str | None]] = []
    for c in request.components:
        match = MATCH_TYPES.get(c.match_type)
        problem = None
        if c.entity_type not in (USER, CLIENT_ID):
            problem = f"Unsupported entity type: {c.entity_type}"
        elif match is None:
            problem = f"Unknown match type: {c.match_type}"
        elif match == "exact" and c.match is None:
            problem = "An exact match needs a name"
        elif c.entity_type in (w[0] for w in wanted):
            problem = f"Duplicate filter component entity type: {c.entity_type}"
        if problem:
            return Response(
                error_code=error_codes.INVALID_REQUEST.code, error_message=problem, entries=None
            )
        wanted.append((c.entity_type, match or "", c.match))
    quotas = quota_store.read_all(broker.store)
    entries = []
    for entity in entities_matching(quotas, wanted, request.strict):
        parts = []
        if entity.user is not None:
            parts.append((USER, entity.user))
        if entity.client_id is not None:
            parts.append((CLIENT_ID, entity.client_id))
        entries.append(
            Response.EntryData(
                entity=[
                    Response.EntityData(entity_type=t, entity_name=None if n == DEFAULT else n)
                    for t, n in parts
                ],
                values=[
                    Response.ValueData(key=k, value=v) for k, v in sorted(quotas[entity].items())
                ],
            )
        )
    return Response(error_code=0, error_message=None, entries=entries)


def _entity(
    parts: list[m.AlterClientQuotasRequest.EntityData],
) -> Entity:
    names: dict[str, str] = {}
    for p in parts:
        if p.entity_type not in (USER, CLIENT_ID):
            raise ValueError(f"Unsupported entity type: {p.entity_type}")
        if p.entity_type in names:
            raise ValueError(f"Duplicate entity type: {p.entity_type}")
        if p.entity_name == "":
            raise ValueError(f"Empty {p.entity_type} name")
        names[p.entity_type] = DEFAULT if p.entity_name is None else p.entity_name
    if not names:
        raise ValueError("An entity needs a user, a client-id or both")
    return Entity(names.get(USER), names.get(CLIENT_ID))


def handle_alter_client_quotas(broker: Broker, ctx: RequestContext) -> m.AlterClientQuotasResponse:
    request = ctx.request.body
    assert isinstance(request, m.AlterClientQuotasRequest)
    Entry = m.AlterClientQuotasResponse.EntryData
    allowed = _may(broker, ctx, acl.ALTER_CONFIGS)
    results = []
    for entry in request.entries:
        echo = [
            m.AlterClientQuotasResponse.EntityData(
                entity_type=p.entity_type, entity_name=p.entity_name
            )
            for p in entry.entity
        ]
        if not allowed:
            code = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
            results.append(Entry(error_code=code, error_message=None, entity=echo))
            continue
        try:
            entity = _entity(entry.entity)
            set_: dict[str, float] = {}
            remove: list[str] = []
            for op in entry.ops:
                if op.key in set_ or op.key in remove:
                    raise ValueError(f"Duplicate quota key: {op.key}")
                if op.remove:
                    parse_value(op.key, "1")  # the key must be known
                    remove.append(op.key)
                else:
                    set_[op.key] = parse_value(op.key, repr(op.value))
        except ValueError as e:
            code = error_codes.INVALID_REQUEST.code
            results.append(Entry(error_code=code, error_message=str(e), entity=echo))
            continue
        if not request.validate_only:
            quota_store.alter(broker.store, entity, set_, remove)
        results.append(Entry(error_code=0, error_message=None, entity=echo))
    return m.AlterClientQuotasResponse(entries=results)
