"""`riverlog configs --entity-type users`: SCRAM credentials, as `kafka-configs.sh` manages
them (DescribeUserScramCredentials / AlterUserScramCredentials).

    --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    --alter --delete-config SCRAM-SHA-512
    --describe   →  SCRAM credential configs for user-principal 'alice' are
                    SCRAM-SHA-256=iterations=8192

The tool salts and hashes the password itself (PBKDF2, RFC 5802's Hi) and sends only the salt
and salted password, as Kafka's admin client does; 4096 iterations when none are given.
"""

from __future__ import annotations

import hashlib
import os

from riverlog.client.connection import Connection
from riverlog.protocol import messages as m
from riverlog.security.scram_credentials import MECHANISM_TYPES, MIN_ITERATIONS

NAMES = {type_id: name for name, type_id in MECHANISM_TYPES.items()}


class UserConfigError(ValueError):
    """A user config the tool cannot send."""


def upsertion(
    user: str, mechanism: str, text: str
) -> m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion:
    if mechanism not in MECHANISM_TYPES:
        raise UserConfigError(f"Invalid config(s): {mechanism}")
    fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    if "password" not in fields:
        raise UserConfigError(f"{mechanism}: a password is required (password=...)")
    iterations = int(fields.get("iterations", MIN_ITERATIONS))
    salt = os.urandom(32)
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, fields["password"].encode(), salt, iterations)
    return m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism=MECHANISM_TYPES[mechanism],
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )


async def alter(conn: Connection, user: str, add: dict[str, str], delete: list[str]) -> None:
    deletions = []
    for mechanism in delete:
        if mechanism not in MECHANISM_TYPES:
            raise UserConfigError(f"Invalid config(s): {mechanism}")
        deletions.append(
            m.AlterUserScramCredentialsRequest.ScramCredentialDeletion(
                name=user, mechanism=MECHANISM_TYPES[mechanism]
            )
        )
    upsertions = [upsertion(user, k, v) for k, v in add.items()]
    response = await conn.send(
        m.AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions)
    )
    assert isinstance(response, m.AlterUserScramCredentialsResponse)
    for result in response.results:
        if result.error_code:
            raise UserConfigError(result.error_message or f"error {result.error_code}")
    print(f"Completed updating config for user {user}.")


async def describe(conn: Connection, user: str | None) -> None:
    users = None if user is None else [m.DescribeUserScramCredentialsRequest.UserName(name=user)]
    response = await conn.send(m.DescribeUserScramCredentialsRequest(users=users))
    assert isinstance(response, m.DescribeUserScramCredentialsResponse)
    if response.error_code:
        raise UserConfigError(response.error_message or f"error {response.error_code}")
    for result in response.results:
        if result.error_code:
            continue  # no credentials: nothing to print, as Kafka's tool
        configs = ", ".join(
            f"{NAMES.get(c.mechanism, c.mechanism)}=iterations={c.iterations}"
            for c in result.credential_infos
        )
        print(f"SCRAM credential configs for user-principal '{result.user}' are {configs}")
