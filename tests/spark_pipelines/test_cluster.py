"""The Spark jobs on a real standalone cluster (a master and a worker from the PySpark wheel),
submitted with ``spark-submit`` as beat submits them, give what a ``local[*]`` run gives.

The executors' Python is this virtualenv's interpreter started with ``-S`` and only its
third-party packages on the path: the project's editable install is invisible to them, so the
jobs work only because ``spark-submit --py-files`` ships the project.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.db import connect
from infra.embedded import free_port_block
from tests.data_plane.stored import commit_segment, object_store, seed_topic
from tests.spark_pipelines.test_compaction import age, blocks_of, read_all, varied
from tests.support.lag import insert_snapshots, minute, series_of, synthetic_group
from tests.support.services import Services, unavailable

pytestmark = pytest.mark.timeout(600)
REGISTER_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Cluster:
    """A running standalone cluster and the Spark configuration that submits to it."""

    master_url: str
    conf_dir: Path
    executor_python: Path


def applications(cluster: Cluster) -> list[Path]:
    """The applications whose executors the cluster's worker has run."""
    return sorted((cluster.conf_dir / "work").glob("app-*"))


def _executor_python(directory: Path) -> Path:
    """This venv's Python without ``site`` (so without the editable install's path hook), with
    its site-packages appended to what Spark puts on ``PYTHONPATH``."""
    purelib = sysconfig.get_paths()["purelib"]
    script = directory / "executor-python"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{purelib}" exec {sys.executable} -S "$@"\n'
    )
    script.chmod(0o755)
    return script


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


def _daemon_env(root: Path) -> dict[str, str]:
    """The environment of the master and worker: no PYTHONPATH, bound to 127.0.0.1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK"))}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(root), SPARK_CONF_DIR=str(root))
    return env


def _start(root: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    log = (root / f"{name}.log").open("wb")
    return subprocess.Popen(
        [str(_spark_class()), *args],
        cwd=root,
        env=_daemon_env(root),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_registered(root: Path, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    log = root / "worker.log"
    while time.monotonic() < deadline:
        if "Successfully registered with master" in log.read_text(errors="replace"):
            return
        if worker.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"the Spark worker did not register:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB) on 127.0.0.1, stopped at the end."""
    if importlib.util.find_spec("pyspark") is None:
        unavailable("pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java 17+ on PATH or JAVA_HOME")
    root = tmp_path_factory.mktemp("spark-cluster")
    python = _executor_python(root)
    (root / "spark-defaults.conf").write_text(
        f"spark.pyspark.python {python}\n"
        "spark.executor.memory 512m\nspark.executor.cores 1\nspark.cores.max 1\n"
        "spark.driver.memory 512m\n"
    )
    port = free_port_block(3)
    master = _start(
        root, "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(port + 1)],
    )  # fmt: skip
    worker = _start(
        root, "worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--webui-port", str(port + 2), "--cores", "1", "--memory", "1g",
                         "--work-dir", str(root / "work"), f"spark://127.0.0.1:{port}"],
    )  # fmt: skip
    try:
        _wait_registered(root, worker)
        yield Cluster(f"spark://127.0.0.1:{port}", root, python)
    finally:
        _stop(worker)
        _stop(master)


@pytest.fixture
def on_master(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, Callable[[], Any]], Any]:
    """Run ``submit`` (a beat task body) with ``QUEUECORE_SPARK_MASTER`` set to ``master``, or
    to the cluster's URL and its Spark configuration for ``"cluster"``; a cluster run must have
    had executors on the cluster's worker."""

    def _run(master: str, submit: Callable[[], Any]) -> Any:
        with monkeypatch.context() as patch:
            patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
            if master != "cluster":
                patch.setenv("QUEUECORE_SPARK_MASTER", master)
                return submit()
            patch.setenv("QUEUECORE_SPARK_MASTER", cluster.master_url)
            patch.setenv("SPARK_CONF_DIR", str(cluster.conf_dir))
            before = applications(cluster)
            result = submit()
            assert len(applications(cluster)) == len(before) + 1, "not run on the cluster"
            return result

    return _run


def test_a_cluster_master_gets_spark_submit_with_the_project_zipped_a_local_one_python() -> None:
    if importlib.util.find_spec("pyspark") is None:
        unavailable("pyspark is not installed (pip install -e '.[spark]')")
    from spark_pipelines.session import SparkSettings
    from spark_pipelines.submit import job_command, package_project

    args = ["--min-age-s", "0"]
    local = job_command("spark_pipelines.compaction", args, SparkSettings("local[2]"))
    remote = job_command("spark_pipelines.compaction", args, SparkSettings("spark://10.0.0.5:7077"))
    shipped = Path(remote[remote.index("--py-files") + 1])
    names = set(zipfile.ZipFile(shipped).namelist())

    assert local == [sys.executable, "-m", "spark_pipelines.compaction", *args]
    assert Path(remote[0]).name == "spark-submit"
    assert remote[remote.index("--master") + 1] == "spark://10.0.0.5:7077"
    assert remote[-3:] == ["spark_pipelines.compaction", *args]
    assert {"data_plane/__init__.py", "spark_pipelines/compaction.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    assert package_project(shipped.parent) == shipped  # an unchanged project is not zipped again


def test_the_executors_python_cannot_import_the_project_on_its_own(
    cluster: Cluster, tmp_path: Path
) -> None:
    def attempt(module: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(cluster.executor_python), "-c", f"import {module}"],
            cwd=tmp_path,
            env=_daemon_env(tmp_path),
            capture_output=True,
            text=True,
            check=False,
        )

    assert attempt("psycopg, boto3, zstandard").returncode == 0
    missing = attempt("data_plane")
    assert missing.returncode != 0 and "No module named 'data_plane'" in missing.stderr


def test_lag_analytics_on_the_cluster_equals_a_local_run(
    on_master: Callable[..., Any], services: Services, cluster: Cluster
) -> None:
    from spark_pipelines import tasks

    url, ids, t0 = services.database_url, synthetic_group(), minute(-30)
    p0 = [(0, 0, 1200), (1, 600, 1500), (2, 1200, 1800), (3, 1800, 2100)]
    p1 = [(0, 0, 600), (1, 300, 660), (2, 600, 720), (3, 720, 780)]
    insert_snapshots(
        url, ids, [(p, _at(t0, m), c, hw) for p, rows in ((0, p0), (1, p1)) for m, c, hw in rows]
    )
    window = {"since": t0.isoformat(), "until": _at(t0, 4).isoformat()}
    executor_python = str(cluster.executor_python)

    local = on_master("local[*]", lambda: tasks.run_lag_analytics(**window))
    local_series = _series(url, ids.group_id)
    _delete_series(url, ids.group_id)
    remote = on_master("cluster", lambda: tasks.run_lag_analytics(**window))

    # Other tests may have left snapshots in the window: the counts cover them too.
    assert local["points"] == remote["points"] >= 4
    assert _series(url, ids.group_id) == local_series
    assert [row[1] for row in local_series] == [1800, 1260, 720, 360]

    # By hand (`queuecore spark lag-analytics`): the session ships the project itself.
    _delete_series(url, ids.group_id)
    args = ["lag-analytics", "--since", window["since"], "--until", window["until"]]
    by_hand = on_master("cluster", lambda: _queuecore_spark(args, executor_python))
    assert by_hand["points"] == local["points"] and _series(url, ids.group_id) == local_series


def test_compaction_on_the_cluster_equals_a_local_run(
    on_master: Callable[..., Any], services: Services, unique: Callable[[str], str]
) -> None:
    from spark_pipelines import tasks

    url, store = services.database_url, object_store()
    batches = [varied(4, f"c{n}") for n in range(3)]
    topics = [seed_topic(url, unique(f"cluster.{side}"), partitions=1) for side in "ab"]
    for topic in topics:
        keys = [commit_segment(url, store, {(topic.id, 0): batch}) for batch in batches]
        age(url, keys)
    before = read_all(url, topics[0].id, 0)

    local = on_master("local[*]", lambda: tasks.run_compaction(600, [topics[0].id]))
    remote = on_master("cluster", lambda: tasks.run_compaction(600, [topics[1].id]))

    assert local == remote and remote["swapped"] == 1 and remote["blocksMerged"] == 3
    assert [b[:3] for b in blocks_of(url, topics[1].id)] == [(0, 0, 12)]
    assert [b[:3] for b in blocks_of(url, topics[0].id)] == [(0, 0, 12)]
    assert read_all(url, topics[1].id, 0) == read_all(url, topics[0].id, 0) == before


def _queuecore_spark(args: list[str], executor_python: str) -> Any:
    """``queuecore spark …`` in a child process; its JSON report. A session built in-process
    starts its executors' Python from ``PYSPARK_PYTHON`` (spark-submit sets it from the conf)."""
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "spark", *args],
        env={**os.environ, "PYSPARK_PYTHON": executor_python},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _at(t0: Any, minutes: int) -> Any:
    from datetime import timedelta

    return t0 + timedelta(minutes=minutes)


def _series(url: str, group_id: str) -> list[tuple[Any, ...]]:
    return [
        (r["bucket_start"], r["lag"], r["consume_rate"], r["produce_rate"], r["time_to_drain_s"])
        for r in series_of(url, group_id)
    ]


def _delete_series(url: str, group_id: str) -> None:
    with connect(url) as conn:
        conn.execute("DELETE FROM lag_series WHERE group_id = %s", (group_id,))
