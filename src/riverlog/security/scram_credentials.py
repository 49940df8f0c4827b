"""SCRAM credentials as Kafka keeps them in ZooKeeper: `/config/users/<user>`.

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,
                                             iterations=8192"}}

`make` salts and hashes a password (scramp, RFC 5802/7677); `store_credential` /
`delete_credential` edit the user's node and announce the change under `/config/changes`
(`users/<user>`), as Kafka's AdminZkClient does; `lookup` reads one credential. Brokers read
credentials at authentication time, so a change applies to the next login.
"""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass

from scramp import ScramMechanism

from riverlog.metadata.store import MetadataStore, NodeExistsError, NoNodeError

USERS = "/config/users"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's ScramMechanism type ids (Describe/AlterUserScramCredentials)."""
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        def b64(raw: bytes) -> str:
            return base64.b64encode(raw).decode()

        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
            f"server_key={b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )


def make(
    mechanism: str, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    salt_, stored, server, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(salt_, stored, server, count)


def user_path(user: str) -> str:
    return f"{USERS}/{user}"


def read_user(store: MetadataStore, user: str) -> dict[str, str]:
    try:
        raw = json.loads(store.get(user_path(user)).data or b"{}")
    except NoNodeError:
        return {}
    config = raw.get("config", {})
    return {str(k): str(v) for k, v in config.items()}


def users(store: MetadataStore) -> list[str]:
    try:
        return sorted(store.children(USERS))
    except NoNodeError:
        return []


def lookup(store: MetadataStore, user: str, mechanism: str) -> ScramCredential | None:
    text = read_user(store, user).get(mechanism)
    if text is None:
        return None
    try:
        return ScramCredential.from_text(text)
    except (KeyError, ValueError):
        return None


def _write_user(store: MetadataStore, user: str, config: dict[str, str]) -> None:
    data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
    try:
        store.set(user_path(user), data)
    except NoNodeError:
        with contextlib.suppress(NodeExistsError):
            store.create(user_path(user), data)
            return
        store.set(user_path(user), data)


def store_credential(
    store: MetadataStore, user: str, mechanism: str, credential: ScramCredential
) -> None:
    config = read_user(store, user)
    config[mechanism] = credential.to_text()
    _write_user(store, user, config)
    _announce(store, user)


def delete_credential(store: MetadataStore, user: str, mechanism: str) -> bool:
    """Remove one mechanism's credential of `user`; whether it existed."""
    config = read_user(store, user)
    if mechanism not in config:
        return False
    del config[mechanism]
    _write_user(store, user, config)
    _announce(store, user)
    return True


def _announce(store: MetadataStore, user: str) -> None:
    from riverlog.server import config_changes  # the server's notification scheme

    config_changes.announce(store, f"users/{user}")
