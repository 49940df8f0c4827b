"""The direction of imports (architecture: higher layers import lower ones, never the
reverse), the one-importer rules, and where replication rules may live, checked by reading
every module's source (docs/architecture.md draws the same rooms)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "src" / "riverlog"

# layer -> riverlog packages it must not import
FORBIDDEN = {
    "protocol": {"storage", "server", "client", "coordinator", "controller", "metadata", "cli"},
    "storage": {"server", "client", "coordinator", "controller", "metadata", "cli"},
    "metadata": {"server", "client", "coordinator", "controller", "storage", "cli"},
    "coordinator": {"server", "client", "controller", "metadata", "cli"},
    "controller": {"server", "client", "coordinator", "cli"},
    "client": {"server", "storage", "coordinator", "controller", "cli"},
    "server": {"cli"},
    "mirror": {"server", "storage", "coordinator", "controller", "metadata", "cli"},
    "spark": {"server", "storage", "coordinator", "controller", "metadata", "cli"},
    # the web console works against any Kafka: it reaches the cluster only through the client
    "webconsole": {"server", "storage", "coordinator", "controller", "metadata"},
}

# server wings -> riverlog.server modules they must not import: the replication wing knows
# nothing of the controller, the handlers, the coordinators or the broker wiring; the
# controller's edge knows nothing of replication or the handlers.
WING_FORBIDDEN = {
    "server/replication": {
        "riverlog.server.controller",
        "riverlog.server.handlers",
        "riverlog.server.broker",
        "riverlog.server.group_coordinator",
    },
    "server/controller": {"riverlog.server.replication", "riverlog.server.handlers"},
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_layers_import_only_downwards() -> None:
    problems = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for name in imports_of(path):
                parts = name.split(".")
                if parts[0] == "riverlog" and len(parts) > 1 and parts[1] in forbidden:
                    problems.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert problems == []


def test_only_the_zookeeper_store_imports_kazoo() -> None:
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name.split(".")[0] == "kazoo" for name in imports_of(path))
    )
    assert importers == ["metadata/zookeeper.py"]


def test_only_the_spark_connector_imports_pyspark() -> None:
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name.split(".")[0] == "pyspark" for name in imports_of(path))
    )
    assert importers and all(name.startswith("spark/") for name in importers)


def test_server_wings_import_only_what_they_may() -> None:
    problems = []
    for wing, forbidden in WING_FORBIDDEN.items():
        for path in sorted((PACKAGE / wing).rglob("*.py")):
            for name in imports_of(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    problems.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert problems == []


def test_the_pure_packages_read_no_clock() -> None:
    """Decisions take `now_ms`; only the injected `riverlog.clock.Clock` reads the time."""
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for layer in ("protocol", "controller", "coordinator")
        for path in (PACKAGE / layer).rglob("*.py")
        if "time" in imports_of(path)
    )
    assert readers == []


def _attribute_uses(path: Path) -> list[ast.Attribute]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)]


def test_handlers_leave_replication_rules_to_the_replica_manager() -> None:
    """No handler reaches into the replica manager's partitions or compares leader ids by
    hand: "am I the leader", epoch fencing and acks=all completion have one home each."""
    problems = []
    for path in sorted((PACKAGE / "server" / "handlers").glob("*.py")):
        for node in _attribute_uses(path):
            if node.attr in ("partitions", "_partitions") and (
                isinstance(node.value, ast.Attribute) and node.value.attr == "replicas"
            ):
                problems.append(f"{path.name}:{node.lineno} reads replicas.{node.attr}")
        for compare in ast.walk(ast.parse(path.read_text())):
            if isinstance(compare, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr in ("leader_id", "broker_id")
                for side in [compare.left, *compare.comparators]
            ):
                problems.append(f"{path.name}:{compare.lineno} compares broker ids")
    assert problems == []


def test_one_writer_of_a_hosted_partitions_high_watermark() -> None:
    """Outside storage (which keeps HW <= log end itself), only `HostedPartition` moves the
    high watermark."""
    writers = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for layer in ("server", "coordinator", "controller", "client", "spark", "cli")
        for path in (PACKAGE / layer).rglob("*.py")
        for node in _attribute_uses(path)
        if node.attr == "update_high_watermark"
    )
    assert writers and all(w.startswith("server/replication/partition.py:") for w in writers)
