"""Kafka principals as strings, `<type>:<name>` (`User:alice`); `User:ANONYMOUS` for clients
of PLAINTEXT listeners and TLS clients without a certificate."""

from __future__ import annotations

ANONYMOUS = "User:ANONYMOUS"


def parse(text: str) -> tuple[str, str]:
    """`User:alice` → ("User", "alice"); ValueError without a type."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(
            f"Could not parse principal from `{text}` (no colon is found "
            "between principalType and name)"
        )
    return kind, name
