"""The Kafka listener is an edge: it reaches the data plane through one module of its service
surface, and runs no SQL and opens no database connection of its own."""

from __future__ import annotations

import ast
import re

from infra.layers import ROOT, imported_modules

SURFACE = "data_plane.service"
SQL = re.compile(r"^\s*(SELECT\s|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|WITH\s+\w+\s+AS)")


def test_the_listener_imports_the_data_plane_only_through_its_surface() -> None:
    past = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "kafka_protocol").rglob("*.py"))
        for module, line in imported_modules(path)
        if module.split(".")[0] == "data_plane" and not module.startswith(SURFACE)
    ]
    assert past == []


def test_the_listener_opens_no_connection_and_holds_no_sql() -> None:
    found = []
    for path in sorted((ROOT / "kafka_protocol").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in {"connection", "execute"}:
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and SQL.match(text):
                found.append(f"{path.name}:{node.lineno}: SQL text")
    assert found == []
