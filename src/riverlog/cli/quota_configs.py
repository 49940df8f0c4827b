"""`riverlog configs --entity-type clients|users`: client quotas, as `kafka-configs.sh` manages
them through a broker (DescribeClientQuotas / AlterClientQuotas).

    --entity-type clients --entity-name app-1 --alter --add-config producer_byte_rate=1048576
    --entity-type clients --entity-default --alter --delete-config producer_byte_rate
    --entity-type users --entity-name alice --describe
        →  Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0

Without a name, `--describe` lists every entity of the type (the default one included).
Quota keys: producer_byte_rate, consumer_byte_rate, request_percentage (SCRAM credentials of
users are cli/user_configs.py's).
"""

from __future__ import annotations

from riverlog.client.connection import Connection
from riverlog.protocol import messages as m

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
ENTITY_TYPES = {"clients": "client-id", "users": "user"}
LABELS = {"client-id": "client-id", "user": "user-principal"}
DEFAULT = "<default>"


class QuotaConfigError(ValueError):
    """A quota the tool cannot send, or the broker refused."""


def _entity_text(parts: list[m.DescribeClientQuotasResponse.EntityData]) -> str:
    texts = []
    for p in parts:
        label = LABELS.get(p.entity_type, p.entity_type)
        texts.append(
            f"the default {label}" if p.entity_name is None else f"{label} '{p.entity_name}'"
        )
    return ", ".join(texts)


async def describe(conn: Connection, kind: str, name: str | None) -> None:
    entity_type = ENTITY_TYPES[kind]
    Component = m.DescribeClientQuotasRequest.ComponentData
    if name is None:
        component = Component(entity_type=entity_type, match_type=2, match=None)
    elif name == DEFAULT:
        component = Component(entity_type=entity_type, match_type=1, match=None)
    else:
        component = Component(entity_type=entity_type, match_type=0, match=name)
    response = await conn.send(m.DescribeClientQuotasRequest(components=[component], strict=True))
    assert isinstance(response, m.DescribeClientQuotasResponse)
    if response.error_code:
        raise QuotaConfigError(response.error_message or f"error {response.error_code}")
    for entry in response.entries or ():
        values = ", ".join(f"{v.key}={float(v.value)}" for v in entry.values)
        print(f"Quota configs for {_entity_text(entry.entity)} are {values}")


async def alter(
    conn: Connection, kind: str, name: str, add: dict[str, str], delete: list[str]
) -> None:
    ops = []
    for key in delete:
        if key not in QUOTA_KEYS:
            raise QuotaConfigError(f"Invalid config(s): {key}")
        ops.append(m.AlterClientQuotasRequest.OpData(key=key, value=0.0, remove=True))
    for key, text in add.items():
        if key not in QUOTA_KEYS:
            raise QuotaConfigError(f"Invalid config(s): {key}")
        try:
            value = float(text)
        except ValueError:
            raise QuotaConfigError(f"Invalid value {text!r} for {key}") from None
        ops.append(m.AlterClientQuotasRequest.OpData(key=key, value=value, remove=False))
    entity = m.AlterClientQuotasRequest.EntityData(
        entity_type=ENTITY_TYPES[kind], entity_name=None if name == DEFAULT else name
    )
    response = await conn.send(
        m.AlterClientQuotasRequest(
            entries=[m.AlterClientQuotasRequest.EntryData(entity=[entity], ops=ops)]
        )
    )
    assert isinstance(response, m.AlterClientQuotasResponse)
    for entry in response.entries:
        if entry.error_code:
            raise QuotaConfigError(entry.error_message or f"error {entry.error_code}")
    shown = "default" if name == DEFAULT else name
    print(f"Completed updating config for {kind[:-1]} {shown}.")
