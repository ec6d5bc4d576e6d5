"""The layer stack: ground → domain → edges → entry points, and no import pointing up or round."""

from __future__ import annotations

import ast
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


def test_no_package_has_a_cycle_among_its_sub_packages_and_modules() -> None:
    assert "data_plane.delivery" in layers.packages()
    assert layers.child_imports("data_plane"), "the scan found no import between sub-packages"
    assert layers.child_cycles() == {}


def test_the_check_sees_a_cycle_one_level_down(tmp_path: Path) -> None:
    files = {
        "data_plane/__init__.py": "",
        "data_plane/write/__init__.py": "",
        "data_plane/write/writer.py": "from data_plane.topics import queries as q\n",
        "data_plane/topics/__init__.py": "",
        "data_plane/topics/queries.py": "",
        "data_plane/topics/service.py": "from data_plane.groups.service import GroupRef\n",
        "data_plane/groups/__init__.py": "",
        "data_plane/groups/service.py": "from ..write import writer\n",
        "data_plane/errors.py": "",
        "data_plane/read/__init__.py": "from data_plane.read.reader import Reader\n",
        "data_plane/read/reader.py": "from data_plane.errors import Gone\nfrom data_plane.read import X\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    for package in layers.PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    assert layers.child_cycles(tmp_path) == {
        "data_plane": [["data_plane.groups", "data_plane.topics", "data_plane.write"]],
        "data_plane.read": [["data_plane.read.__init__", "data_plane.read.reader"]],
    }


def test_the_edges_reach_the_data_plane_through_its_service_api_and_open_no_connection() -> None:
    edges = layers.edge_files()
    assert layers.ROOT / "control_plane/api/consume.py" in edges
    assert layers.ROOT / "data_plane/tasks.py" in edges
    assert layers.door_violations() == []


def test_the_door_check_sees_an_internal_import_and_an_opened_connection(tmp_path: Path) -> None:
    files = {
        "control_plane/api/topics.py": (
            "from data_plane.service import DataPlane\n"
            "from data_plane.topics import service as topics\n"
        ),
        "control_plane/dashboard/home.py": (
            "async def page(resources):\n"
            "    async with resources.db.connection() as conn:\n"
            "        return conn\n"
        ),
        "billing/tasks.py": "import psycopg\n\npsycopg.connect('postgresql://')\n",
        "data_plane/tasks.py": "from data_plane.service import Upkeep\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    for package in layers.PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    assert layers.door_violations(tmp_path) == [
        "billing/tasks.py:3: opens a connection (connect)",
        "control_plane/api/topics.py:2: imports data_plane.topics.service",
        "control_plane/dashboard/home.py:2: opens a connection (connection)",
    ]


def client_constructions(path: Path) -> set[str]:
    """The database and Redis clients a module builds itself (by the call that builds them)."""
    built = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            call = ast.unparse(node.func)
            if call in {"ConnectionPool", "AsyncConnectionPool", "Redis", "redis.Redis"} or (
                call.endswith((".connect", ".from_url"))
                and call.split(".")[-2] in {"psycopg", "AsyncConnection", "Connection", "Redis"}
            ):
                built.add(call)
    return built


def test_postgresql_and_redis_are_reached_one_way() -> None:
    found = {
        str(path.relative_to(layers.ROOT)): client_constructions(path)
        for package in layers.PACKAGES
        for path in (layers.ROOT / package).rglob("*.py")
    }
    assert found["core/db.py"] >= {"psycopg.connect", "AsyncConnection.connect"}
    assert found["core/redis_client.py"] == {"Redis.from_url"}
    elsewhere = {
        path: built
        for path, built in found.items()
        if built and path not in {"core/db.py", "core/redis_client.py"}
    }
    assert elsewhere == {}
