"""The package-level import graph and the layer stack it must respect.

Run ``python -m infra.layers`` to print the graph and any violation. A node is a top-level
package, except that Celery task modules (``<package>.tasks``) are nodes of their own: they are
edges of the system, as the controllers are, though they live beside the domain they serve.

One level down, inside every package and sub-package, its children (modules and sub-packages)
must import each other without a cycle either (:func:`child_cycles`): a ring of sub-packages is
a ring of responsibilities, whatever the layers around them allow.

And the edges (``control_plane`` and every Celery task module) go through the services' doors:
none imports a part of the data plane other than its service API (``data_plane.service``) or
opens a database connection itself (:func:`door_violations`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lower ranks are lower layers. An import may point to a lower rank, or within one rank when
# it makes no cycle; never up.
RANKS: dict[str, int] = {
    "core": 0,  # ground: settings, database, errors, service clients
    "observability": 1,  # ground: telemetry set-up, logging, metrics
    "tenants": 2,  # domain
    "data_plane": 2,
    "billing": 2,
    "control_plane": 3,  # edges: HTTP, the Kafka listener, Celery tasks, Spark jobs
    "kafka_protocol": 3,
    "pusher": 3,
    "tasks": 3,
    "spark_pipelines": 3,
    "infra": 4,  # entry points: CLI, Celery app, dev stack
}
LAYER_NAMES = {0: "ground", 1: "ground", 2: "domain", 3: "edges", 4: "entry points"}
PACKAGES = tuple(name for name in RANKS if name != "tasks")


@dataclass(frozen=True)
class Import:
    """One import statement between two nodes of the graph."""

    source: str
    target: str
    where: str


def node_of(module: str) -> str | None:
    """The graph node of a dotted module name, or None for a module outside the project."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if "tasks" in parts[1:]:
        return f"{parts[0]}.tasks"
    return parts[0]


def rank_of(node: str) -> int:
    """The layer rank of a node."""
    return RANKS["tasks"] if node.endswith(".tasks") else RANKS[node]


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of a source file (or package folder) under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """Every module an import in ``path`` names (relative imports resolved), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path if path.name == "__init__.py" else path.parent, root)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def imports(root: Path = ROOT) -> list[Import]:
    """The cross-node imports of every project source file."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = node_of(module_name(path, root))
            for module, line in imported_modules(path, root):
                target = node_of(module) or node_of(module.rpartition(".")[0])
                if source and target and target != source:
                    found.append(Import(source, target, f"{path.relative_to(root)}:{line}"))
    return found


def upward(found: Iterable[Import]) -> list[Import]:
    """Imports that point to a higher layer."""
    return [i for i in found if rank_of(i.target) > rank_of(i.source)]


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        graph.setdefault(i.source, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    result: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def packages(root: Path = ROOT) -> list[str]:
    """Every package and sub-package of the project (a folder with ``__init__.py``)."""
    found = []
    for package in PACKAGES:
        for init in sorted((root / package).rglob("__init__.py")):
            found.append(module_name(init, root))
    return found


def child_of(package: str, module: str, children: set[str]) -> str | None:
    """The child of ``package`` that ``module`` is or lies in; a name the package's own
    ``__init__`` defines counts as the package's ``__init__``. None outside the package."""
    if not module.startswith(package + "."):
        return None
    head = f"{package}.{module[len(package) + 1 :].split('.')[0]}"
    return head if head in children else f"{package}.__init__"


def child_imports(package: str, root: Path = ROOT) -> list[Import]:
    """The imports between the children of one package (its modules and sub-packages)."""
    folder = root / Path(*package.split("."))
    children = {
        module_name(path, root)
        for path in folder.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").exists()
    }
    found = []
    for path in sorted(folder.rglob("*.py")):
        source = child_of(package, module_name(path, root), children) or f"{package}.__init__"
        for module, line in imported_modules(path, root):
            target = child_of(package, module, children)
            if target and target != source:
                found.append(Import(source, target, f"{path.relative_to(root)}:{line}"))
    return found


def child_cycles(root: Path = ROOT) -> dict[str, list[list[str]]]:
    """Per package, the cycles among its children (empty when there is none anywhere)."""
    found = {}
    for package in packages(root):
        ring = cycles(child_imports(package, root))
        if ring:
            found[package] = ring
    return found


SERVICE_API = "data_plane.service"
OPENERS = frozenset({"connection", "connect"})  # calls that open a database connection


def edge_files(root: Path = ROOT) -> list[Path]:
    """The modules of the edges: the HTTP application, the Kafka listener, the pusher and every
    Celery task module."""
    tasks = [path for package in PACKAGES for path in (root / package).rglob("tasks.py")]
    listeners = [
        *(root / "control_plane").rglob("*.py"),
        *(root / "kafka_protocol").rglob("*.py"),
        *(root / "pusher").rglob("*.py"),
    ]
    return sorted({*listeners, *tasks})


def _through_the_door(module: str) -> bool:
    return module in {"data_plane", SERVICE_API} or module.startswith(SERVICE_API + ".")


def door_violations(root: Path = ROOT) -> list[str]:
    """Where an edge imports the data plane past its service API or opens a connection."""
    found = []
    for path in edge_files(root):
        where = path.relative_to(root)
        for module, line in imported_modules(path, root):
            if node_of(module) == "data_plane" and not _through_the_door(module):
                found.append(f"{where}:{line}: imports {module}")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = node.func
                name = called.attr if isinstance(called, ast.Attribute) else None
                name = called.id if isinstance(called, ast.Name) else name
                if name in OPENERS:
                    found.append(f"{where}:{node.lineno}: opens a connection ({name})")
    return found


def main() -> int:
    """Print the graph by layer, then every upward import and cycle; exit 1 if there is one."""
    found = imports()
    edges = sorted({(i.source, i.target) for i in found}, key=lambda e: (-rank_of(e[0]), e))
    for source, target in edges:
        print(
            f"{source:24} -> {target:24} ({LAYER_NAMES[rank_of(source)]} -> "
            f"{LAYER_NAMES[rank_of(target)]})"
        )
    bad = upward(found)
    for i in bad:
        print(f"UPWARD {i.source} -> {i.target} at {i.where}")
    for component in cycles(found):
        print("CYCLE " + " <-> ".join(component))
    inner = child_cycles()
    for package, components in inner.items():
        for component in components:
            print(f"CYCLE in {package}: " + " <-> ".join(component))
    doors = door_violations()
    for violation in doors:
        print(f"PAST THE DOOR {violation}")
    return 1 if bad or cycles(found) or inner or doors else 0


if __name__ == "__main__":
    sys.exit(main())
