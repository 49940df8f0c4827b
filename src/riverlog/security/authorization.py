"""Which operation on which resource each API needs, checked around its handler.

`wrap(request_cls, handler)` returns the handler guarded by the API's rule; an API without
a rule must be one whose handler authorizes itself (`api_rules.HANDLER_CHECKED`: SASL, the
ACL and SCRAM-credential writes, client quotas), else `wrap` refuses it (fail closed: a new
API cannot be served unguarded by accident). Rules are Kafka's (KafkaApis):

- whole-request rules: one resource per request (the cluster for inter-broker and admin
  APIs, the group for JoinGroup/SyncGroup/Heartbeat/LeaveGroup, the transactional id); a
  denied request is answered with the API's response carrying Kafka's error and the handler
  never runs (no side effect);
- per-entry rules: the request's topics (or groups, config resources, coordinator keys) are
  split into allowed and denied; the handler sees only the allowed ones and the denied ones
  are answered with TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED entries merged into its
  response — so a denied entry has no side effect and the rest of the request still works;
- hiding rules: Metadata for all topics and ListGroups leave out what the principal may
  not Describe; OffsetFetch for all topics likewise.

The principal and host come from the connection (`network.Connection.principal`,
`client_host`); the connection keeps its `Subject` (`Connection.subject`) while its principal
stays the same (SASL re-authentication may change it). Each check is one `Authorizer.allowed`
call per resource, asked once per resource per request.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from riverlog.protocol.api import ApiMessage
from riverlog.security.api_rules import HANDLER_CHECKED, RULES
from riverlog.security.authorizer import Authorizer
from riverlog.security.rules import Answer, NoTopics, Rule, Subject, Topics

if TYPE_CHECKING:
    from riverlog.server.dispatch import Handler, RequestContext, Response


def subject_of(
    ctx: RequestContext, authorizer: Authorizer, topics: Topics | None = None
) -> Subject | None:
    conn = ctx.connection
    if conn is None:
        return None  # not from the network: the broker itself
    return Subject(conn.principal, conn.client_host, authorizer, topics or NoTopics())


def wrap(api_key: int, handler: Handler, authorizer: Authorizer, topics: Topics) -> Handler:
    """`handler` guarded by the API's rule (unchanged for the APIs that check in their
    handlers); ValueError for an API with neither."""
    rule = RULES.get(api_key)
    if rule is None:
        if api_key in HANDLER_CHECKED:
            return handler
        raise ValueError(f"API key {api_key} has no authorization rule (security/api_rules.py)")

    @functools.wraps(handler)
    def guarded(ctx: RequestContext) -> Response | Awaitable[Response]:
        conn = ctx.connection
        if conn is None:
            return handler(ctx)  # not from the network: the broker itself
        subject = conn.subject
        if subject is None or subject.principal != conn.principal:
            subject = conn.subject = Subject(conn.principal, conn.client_host, authorizer, topics)
        request = ctx.request.body
        if rule.check is not None:
            denied = rule.check(subject, request)
            if denied is not None:
                return denied
        merge = None
        if rule.split is not None:
            try:
                merge = rule.split(subject, request, ctx.version)
            except Answer as answer:
                return answer.response
        result = handler(ctx)
        if merge is None and rule.after is None:
            return result
        if result is None or isinstance(result, ApiMessage):
            return _finish(result, merge, rule, subject, request)
        return _finish_later(result, merge, rule, subject, request)

    return guarded


def _finish(
    result: Response,
    merge: Callable[[Any], None] | None,
    rule: Rule,
    subject: Subject,
    request: Any,
) -> Response:
    if result is not None:
        if merge is not None:
            merge(result)
        if rule.after is not None:
            rule.after(subject, request, result)
    return result


async def _finish_later(
    result: Awaitable[Response],
    merge: Callable[[Any], None] | None,
    rule: Rule,
    subject: Subject,
    request: Any,
) -> Response:
    return _finish(await result, merge, rule, subject, request)
