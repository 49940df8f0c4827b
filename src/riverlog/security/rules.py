"""The building blocks of authorization rules (security/api_rules.py): who asks
(`Subject`), a rule (`Rule`: a whole-request check, a per-entry split, a hiding step), and
the generic whole-request and per-topic rules."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from riverlog.protocol import error_codes
from riverlog.protocol.api import ApiMessage
from riverlog.security.acl import CLUSTER, CLUSTER_NAME, GROUP, TOPIC
from riverlog.security.authorizer import Authorizer

TOPIC_DENIED = error_codes.TOPIC_AUTHORIZATION_FAILED.code
GROUP_DENIED = error_codes.GROUP_AUTHORIZATION_FAILED.code
CLUSTER_DENIED = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
TXN_DENIED = error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8
ALL_ALLOWED = 0


class Topics(Protocol):
    """The broker's topics as rules need them (the broker's TopicRegistry is one): by name,
    and by id, as Fetch v13+, Metadata and DeleteTopics v6 may name topics."""

    def get(self, name: str) -> Any: ...
    def by_id(self, topic_id: uuid.UUID) -> Any: ...


class NoTopics:
    """For checks that never look topics up (ACL and SCRAM handlers)."""

    def get(self, name: str) -> Any:
        return None

    def by_id(self, topic_id: uuid.UUID) -> Any:
        return None


class Subject:
    """Who asks, as the authorizer needs it, and the topics the broker knows."""

    __slots__ = ("authorizer", "host", "principal", "topics")

    def __init__(self, principal: str, host: str, authorizer: Authorizer, topics: Topics) -> None:
        self.principal = principal
        self.host = host
        self.authorizer = authorizer
        self.topics = topics

    def topic_exists(self, name: str) -> bool:
        return self.topics.get(name) is not None

    def name_of(self, entry: Any, name_attr: str) -> str | None:
        """The topic an entry names, by name or by id; None for an unknown id (the handler
        answers UNKNOWN_TOPIC_ID)."""
        name = getattr(entry, name_attr)
        if name:
            return str(name)
        topic_id = getattr(entry, "topic_id", None)
        topic = self.topics.by_id(topic_id) if topic_id is not None else None
        return None if topic is None else str(topic.name)

    def may_topic(self, operation: str, entry: Any, name_attr: str = "name") -> bool:
        name = self.name_of(entry, name_attr)
        return name is None or self.may(operation, TOPIC, name)

    def may_all_topics(self, operation: str, entries: list[Any], name_attr: str) -> bool:
        """`may_topic` for every entry (the common case of every request with topics: one
        authorizer call per entry named by name, without the layers between)."""
        allowed = self.authorizer.allowed
        principal, host = self.principal, self.host
        for entry in entries:
            name = getattr(entry, name_attr)
            if name:
                if not allowed(principal, host, operation, TOPIC, name):
                    return False
            elif not self.may_topic(operation, entry, name_attr):
                return False
        return True

    def may(self, operation: str, resource_type: str, name: str) -> bool:
        return self.authorizer.allowed(self.principal, self.host, operation, resource_type, name)

    def on_cluster(self, operation: str) -> bool:
        return self.may(operation, CLUSTER, CLUSTER_NAME)

    def may_on_any(self, operation: str, resource_type: str) -> bool:
        """Whether some resource of the type allows `operation` (KIP-679)."""
        return self.authorizer.allowed_on_any(self.principal, self.host, operation, resource_type)


# A check: (subject, request) → None to let the handler run, or the response to answer.
Check = Callable[[Subject, Any], "ApiMessage | None"]
# A per-entry rule: (subject, request, version) → error entries to merge into the response
# (the request is left holding the allowed entries only), and the merge function.
Split = Callable[[Subject, Any, int], "Callable[[Any], None] | None"]


def whole_rule(
    operation: str,
    error: int,
    response: type[ApiMessage],
    resource: Callable[[Any], tuple[str, str]] | None = None,
) -> Check:
    def check(subject: Subject, request: Any) -> ApiMessage | None:
        kind, name = resource(request) if resource else (CLUSTER, CLUSTER_NAME)
        if subject.may(operation, kind, name):
            return None
        return response(error_code=error)  # type: ignore[call-arg]

    return check


def group_of(request: Any) -> tuple[str, str]:
    return GROUP, request.group_id


def split_list(items: list[Any], allowed: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for item in items:
        (ok if allowed(item) else denied).append(item)
    return ok, denied


def topic_split(
    list_attr: str,
    name_attr: str,
    operation: str,
    response_attr: str,
    denied_entry: Callable[[Any, int], Any],
    *,
    whole: Callable[[Subject, Any], int | None] | None = None,
) -> Split:
    """Per-topic split of `request.<list_attr>` (entries named by `<name_attr>`);
    `whole(subject, request)`, when given, may deny every entry with one error first, or
    allow every one (`ALL_ALLOWED`)."""

    def split(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
        entries = getattr(request, list_attr)
        if entries is None:
            return None
        error = whole(subject, request) if whole is not None else None
        if error == ALL_ALLOWED:
            return None
        if error is not None:
            ok: list[Any] = []
            denied = list(entries)
        else:
            if subject.may_all_topics(operation, entries, name_attr):
                return None  # the common case: nothing to split
            may = subject.may_topic
            error = TOPIC_DENIED
            ok, denied = split_list(entries, lambda e: may(operation, e, name_attr))
        setattr(request, list_attr, ok)
        answers = [denied_entry(e, error) for e in denied]

        def merge(response: Any) -> None:
            getattr(response, response_attr).extend(answers)

        return merge

    return split


class Answer(Exception):
    """A per-entry rule that decided to answer the whole request itself."""

    def __init__(self, response: ApiMessage) -> None:
        self.response = response


@dataclass(frozen=True)
class Rule:
    """How one API is authorized: `check` may answer the whole request, `split` may take
    denied entries out (and merge their answers in), `after` may hide entries."""

    check: Check | None = None
    split: Split | None = None
    after: Callable[[Subject, Any, Any], None] | None = None
