"""SQL statements and Lua scripts are files beside their owner: every one the code names exists,
every file is used, and an installed wheel carries them all."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from core import sql
from infra.layers import PACKAGES, ROOT

PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation")
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info")


def queries_modules() -> dict[str, Path]:
    """Each ``<package>.queries`` module and its ``sql/`` folder."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("queries.py"):
            found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path.parent / "sql"
    return found


def named_statements() -> dict[str, set[str]]:
    """Per queries module, the statement names the project's code reads from it."""
    modules = queries_modules()
    named: dict[str, set[str]] = {module: set() for module in modules}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            aliases = {
                alias.asname or alias.name: f"{node.module}.{alias.name}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
                if f"{node.module}.{alias.name}" in modules
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                ):
                    named[aliases[node.value.id]].add(node.attr)
    return named


def test_every_statement_the_code_names_is_a_file_and_every_file_is_named() -> None:
    modules = queries_modules()
    assert "data_plane.delivery.queries" in modules
    for module, names in named_statements().items():
        files = {path.stem.upper() for path in modules[module].glob("*.sql")}
        assert names - files == set(), f"{module} names statements without a file"
        assert files - names == set(), f"{modules[module]} holds statements nothing runs"


def test_a_statement_is_read_without_its_comments_and_kept() -> None:
    from data_plane.write import queries

    text = (ROOT / "data_plane/write/sql/end_lost_commit.sql").read_text()
    assert text.startswith("--")
    assert sql.statement(text) == queries.END_LOST_COMMIT
    assert "--" not in queries.END_LOST_COMMIT
    assert "qc_commit_flush" in queries.END_LOST_COMMIT
    assert vars(queries)["END_LOST_COMMIT"] is queries.END_LOST_COMMIT  # kept after one read
    with pytest.raises(AttributeError, match="NO_SUCH_STATEMENT"):
        queries.NO_SUCH_STATEMENT  # noqa: B018


def test_the_wheel_carries_every_statement_and_script(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: the build writes its own folders beside the sources
    for name in ("pyproject.toml", "README.md"):
        (source / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=IGNORED)
    subprocess.run(
        [*PIP_WHEEL, "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    files = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for suffix in ("*.sql", "*.lua")
        for path in (ROOT / package).rglob(suffix)
    }
    assert len(files) > 150
    assert files - shipped == set()
