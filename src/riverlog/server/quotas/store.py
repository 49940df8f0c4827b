"""Client quotas where Kafka keeps them in ZooKeeper, and their change notifications.

    /config/clients/<client-id>   {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<user>          (the same node holds the user's SCRAM credentials)
    /config/users/<user>/clients/<client-id>
    ... with `<default>` for the default user or client-id

Names are URL-encoded in paths (Kafka's Sanitizer; `<default>` stays as it is). `alter`
edits only the quota keys of a node (other configs, e.g. SCRAM credentials, are kept), deletes
a node left empty with no children, and announces `{"version":2,"entity_path":"clients/x"}`
under `/config/changes` (server/config_changes.py), so every broker re-reads it.

Invariant: a node's quota values are numbers as text; one that is not is ignored by
`read_all` with a log line, never fails a broker.
"""

from __future__ import annotations

import contextlib
import json
import logging
from urllib.parse import quote, unquote

from riverlog.metadata.store import MetadataStore, NodeExistsError, NoNodeError, NotEmptyError
from riverlog.server.quotas.rules import DEFAULT, QUOTA_KEYS, Entity, parse_value

log = logging.getLogger(__name__)
CONFIG = "/config"
Quotas = dict[Entity, dict[str, float]]


def _encode(name: str) -> str:
    return name if name == DEFAULT else quote(name, safe="")


def _decode(part: str) -> str:
    return part if part == DEFAULT else unquote(part)


def node_path(entity: Entity) -> str:
    """The znode of `entity`: its `path` with each name encoded, under /config."""
    encoded = Entity(
        None if entity.user is None else _encode(entity.user),
        None if entity.client_id is None else _encode(entity.client_id),
    )
    return f"{CONFIG}/{encoded.path}"


def entity_of_change(entity_path: str) -> Entity:
    """The entity a `/config/changes` notification names (encoded names decoded)."""
    raw = Entity.from_path(entity_path)
    return Entity(
        None if raw.user is None else _decode(raw.user),
        None if raw.client_id is None else _decode(raw.client_id),
    )


def _config(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    raw = json.loads(data)
    return {str(k): str(v) for k, v in raw.get("config", {}).items()}


def _quotas_of(entity: Entity, data: bytes) -> dict[str, float]:
    out = {}
    try:
        config = _config(data)
    except (ValueError, AttributeError):
        log.warning("quotas of %s unreadable: %r", entity.path, bytes(data[:200]))
        return {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = parse_value(key, text)
            except ValueError as e:
                log.warning("quota %s of %s ignored: %s", key, entity.path, e)
    return out


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.children(path)
    except NoNodeError:
        return []


def read(store: MetadataStore, entity: Entity) -> dict[str, float]:
    try:
        return _quotas_of(entity, store.get(node_path(entity)).data)
    except NoNodeError:
        return {}


def read_all(store: MetadataStore) -> Quotas:
    """Every entity with at least one quota."""
    entities = [Entity(client_id=_decode(c)) for c in _children(store, f"{CONFIG}/clients")]
    for u in _children(store, f"{CONFIG}/users"):
        user = _decode(u)
        entities.append(Entity(user=user))
        for c in _children(store, f"{CONFIG}/users/{u}/clients"):
            entities.append(Entity(user, _decode(c)))
    nodes = store.get_many([node_path(e) for e in entities])
    out: Quotas = {}
    for entity in entities:
        node = nodes.get(node_path(entity))
        quotas = {} if node is None else _quotas_of(entity, node.data)
        if quotas:
            out[entity] = quotas
    return out


def alter(store: MetadataStore, entity: Entity, set_: dict[str, float], remove: list[str]) -> None:
    """Set and remove quotas of `entity` (keys already validated), then announce it."""
    path = node_path(entity)
    try:
        config = _config(store.get(path).data)
    except NoNodeError:
        config = {}
    for key in remove:
        config.pop(key, None)
    for key, value in set_.items():
        config[key] = str(int(value)) if value == int(value) else repr(value)
    if config:
        data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
        try:
            store.set(path, data)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                store.create(path, data)
                _announce(store, entity)
                return
            store.set(path, data)
    else:
        with contextlib.suppress(NoNodeError, NotEmptyError):
            store.delete(path)  # a user node with client-id children stays (empty)
        with contextlib.suppress(NoNodeError):
            store.set(path, b"")
    _announce(store, entity)


def _announce(store: MetadataStore, entity: Entity) -> None:
    from riverlog.server import config_changes

    encoded = node_path(entity)[len(CONFIG) + 1 :]
    config_changes.announce(store, encoded)
