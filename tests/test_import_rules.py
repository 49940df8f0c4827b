"""The direction of imports (architecture: higher layers import lower ones, never the
reverse) and the one-importer rules, checked by reading every module's imports."""

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
