"""The layer stack: ground → domain → edges → entry points, and no import pointing up or round."""

from __future__ import annotations

from pathlib import Path

from infra import layers


def test_no_package_imports_a_higher_layer_or_makes_a_cycle() -> None:
    found = layers.imports()
    assert found, "the import graph is empty: the scan found no project source"
    assert [f"{i.source} -> {i.target} at {i.where}" for i in layers.upward(found)] == []
    assert layers.cycles(found) == []


def test_the_check_sees_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    for package, source in {
        "core": "from data_plane import thing\n",
        "data_plane": "from core import settings\nfrom tenants import x\n",
        "tenants": "import data_plane.topics\n",
    }.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "mod.py").write_text(source)
    found = layers.imports(tmp_path)
    assert [(i.source, i.target) for i in layers.upward(found)] == [("core", "data_plane")]
    assert layers.cycles(found) == [["core", "data_plane", "tenants"]]


def test_task_modules_are_edges_of_their_own() -> None:
    assert layers.node_of("data_plane.tasks") == "data_plane.tasks"
    assert layers.rank_of("data_plane.tasks") > layers.rank_of("data_plane")
    assert layers.node_of("data_plane.write.writer") == "data_plane"
    assert layers.node_of("httpx") is None
