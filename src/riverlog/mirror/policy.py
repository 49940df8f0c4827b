"""Which topics and groups a mirror takes, and what remote topics are called (pure logic).

Replication policies are MirrorMaker 2's: `DefaultReplicationPolicy` names the copy of topic
`t` from cluster `a` `a.t` (the separator is `replication.policy.separator`) and can tell a
remote topic's source cluster, which is what prevents loops: a flow a->b never mirrors a topic
whose chain of sources reaches b. `IdentityReplicationPolicy` keeps names, so it cannot tell
remote topics from local ones and prevents no loop (as in Kafka: use it for one-way flows).

Filters: MM2's `topics` / `groups` settings are comma-separated lists of regexes, each matching
a whole name; MM1's `--include` is one regex in which commas also separate alternatives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


@dataclass(frozen=True)
class ReplicationPolicy:
    """`identity` False: Kafka's DefaultReplicationPolicy; True: IdentityReplicationPolicy."""

    identity: bool = False
    separator: str = "."

    @classmethod
    def named(cls, class_name: str, separator: str = ".") -> ReplicationPolicy:
        short = class_name.rsplit(".", 1)[-1]
        if short == "DefaultReplicationPolicy":
            return cls(False, separator)
        if short == "IdentityReplicationPolicy":
            return cls(True, separator)
        raise ValueError(
            f"replication.policy.class: {class_name!r} is not supported "
            f"(riverlog has {DEFAULT_POLICY} and {IDENTITY_POLICY})"
        )

    def remote_topic(self, source_alias: str, topic: str) -> str:
        return topic if self.identity else f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The cluster a remote topic came from; None for a local topic (or unknowable)."""
        if self.identity or self.separator not in topic:
            return None
        return topic.split(self.separator, 1)[0]

    def upstream_topic(self, topic: str) -> str | None:
        if self.topic_source(topic) is None:
            return None
        return topic.split(self.separator, 1)[1]

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Whether mirroring `topic` to `target_alias` would send it back where it came from."""
        name: str | None = topic
        while name is not None:
            source = self.topic_source(name)
            if source is None:
                return False
            if source == target_alias:
                return True
            name = self.upstream_topic(name)
        return False


def regex_list(text: str) -> re.Pattern[str]:
    """MM2's list of regexes ("a, b.*"): one pattern matching a whole name any of them
    matches. An empty list matches nothing."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        return re.compile(r"(?!)")
    for item in items:
        try:
            re.compile(item)
        except re.error as e:
            raise ValueError(f"bad regex {item!r}: {e}") from None
    return re.compile("|".join(f"(?:{item})" for item in items))


def include_pattern(text: str) -> re.Pattern[str]:
    """MirrorMaker 1's `--include` / `--whitelist`: a regex where commas also mean `|` and
    spaces are dropped (Kafka's IncludeList)."""
    cleaned = text.strip().replace(",", "|").replace(" ", "")
    if cleaned.startswith('"') and cleaned.endswith('"'):
        cleaned = cleaned[1:-1]
    try:
        return re.compile(cleaned)
    except re.error as e:
        raise ValueError(f"--include: bad regex {text!r}: {e}") from None


@dataclass(frozen=True)
class NameFilter:
    include: re.Pattern[str]
    exclude: re.Pattern[str]

    def __call__(self, name: str) -> bool:
        return bool(self.include.fullmatch(name)) and not self.exclude.fullmatch(name)


def is_internal_topic(topic: str) -> bool:
    """Topics no flow mirrors whatever the filters say: Kafka's internal topics and the
    mirrors' own (`mm2-offset-syncs.*.internal`, `*.checkpoints.internal`)."""
    return topic.startswith(("__", ".")) or topic.endswith((".internal", "-internal"))
