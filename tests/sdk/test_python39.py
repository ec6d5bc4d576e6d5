"""The SDK stays importable on Python 3.9, checked on its source (no 3.9 interpreter here).

ruff (``target-version = "py39"``) rejects 3.10+ syntax such as ``match``; this test catches
what parses on 3.9 but fails when run: ``X | Y`` outside annotations and library features
added after 3.9.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SDK = Path(__file__).parents[2] / "sdk" / "python" / "queuecore"
# Names and keywords that 3.9 lacks (and that the SDK might plausibly reach for).
NEWER = {
    "aclosing": "contextlib.aclosing is 3.10",
    "ExceptionGroup": "3.11",
    "TypeAlias": "typing.TypeAlias is 3.10",
    "ParamSpec": "typing.ParamSpec is 3.10",
    "Self": "typing.Self is 3.11",
    "anext": "the builtin anext is 3.10",
    "aiter": "the builtin aiter is 3.10",
}
NEWER_IN_ASYNCIO = {"timeout": "asyncio.timeout is 3.11", "TaskGroup": "3.11"}
NEWER_KEYWORDS = {"slots": "dataclass(slots=) is 3.10", "kw_only": "3.10", "strict": "3.10"}


def annotation_nodes(tree: ast.AST) -> set[int]:
    """Ids of every node inside an annotation (not evaluated under ``from __future__``)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, (ast.arg, ast.AnnAssign)):
            annotations.append(node.annotation)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            annotations.append(node.returns)
        for annotation in annotations:
            if annotation is not None:
                inside |= {id(n) for n in ast.walk(annotation)}
    return inside


def problems(path: Path) -> list[str]:
    """What would fail on 3.9 in one module."""
    tree = ast.parse(path.read_text())
    in_annotation = annotation_nodes(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        runtime_union = isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)
        if runtime_union and id(node) not in in_annotation:
            found.append(f"{where}: X | Y evaluated at run time")
        of_asyncio = (
            isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "asyncio"
        )
        if of_asyncio and node.attr in NEWER_IN_ASYNCIO:  # type: ignore[attr-defined]
            found.append(f"{where}: {node.attr} ({NEWER_IN_ASYNCIO[node.attr]})")
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if name in NEWER:
            found.append(f"{where}: {name} ({NEWER[name]})")
        if isinstance(node, ast.keyword) and node.arg in NEWER_KEYWORDS:
            found.append(f"{where}: {node.arg}= ({NEWER_KEYWORDS[node.arg]})")
    return found


@pytest.mark.parametrize("path", sorted(SDK.glob("*.py")), ids=lambda p: p.name)
def test_the_module_uses_nothing_newer_than_python_3_9(path: Path) -> None:
    source = path.read_text()
    assert path.name == "__init__.py" or "from __future__ import annotations" in source
    assert problems(path) == []


def test_the_check_finds_what_3_9_lacks(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nAlias = int | None\nasyncio.timeout(1)\nzip([], strict=True)\n")
    assert [p.split(": ", 1)[1] for p in problems(bad)] == [
        "X | Y evaluated at run time",
        "timeout (asyncio.timeout is 3.11)",
        "strict= (3.10)",
    ]
