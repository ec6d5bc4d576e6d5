"""How a Spark job is started: in a child Python process for a local master, through
``spark-submit`` with the project shipped to the executors for a cluster master.

On a cluster the executors run the job's functions (a compaction run, a lag slice read) and so
import ``data_plane``, ``infra`` and the rest; they get them from a zip of the installed project
passed with ``--py-files``, so no executor needs QueueCore installed, only a Python with its
third-party dependencies (``spark.pyspark.python``). The driver runs where ``spark-submit`` runs
(client mode), in this interpreter. Everything else Spark needs (executor memory, the executors'
Python, …) comes from ``$SPARK_CONF_DIR/spark-defaults.conf``, as for any Spark application.
A session built in-process against a cluster master (``queuecore spark …`` run by hand) adds
the same zip itself (:func:`ship_project`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from core.settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What a job's tasks import (spark_pipelines → data_plane → core, observability …), when the
# installed distribution does not say which top-level packages it has.
SHIPPED_PACKAGES = (
    "spark_pipelines",
    "core",
    "data_plane",
    "infra",
    "observability",
    "billing",
    "tenants",
)
SHIPPED_SUFFIXES = (".py", ".sql", ".lua")
# The driver's script: spark-submit wants a file; it runs the job module as ``python -m`` would.
DRIVER_SOURCE = (
    '"""Run the module named first on the command line as __main__ (the Spark driver)."""\n'
    "import runpy\nimport sys\n\n"
    'runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)\n'
)


def project_root() -> Path:
    """The directory holding the installed top-level packages."""
    return Path(__file__).resolve().parent.parent


def shipped_packages() -> list[str]:
    """The project's top-level packages, as its installed distribution lists them (so a package
    added to pyproject.toml is shipped too)."""
    try:
        listed = (
            importlib.metadata.distribution("queuecore-server").read_text("top_level.txt") or ""
        )
    except importlib.metadata.PackageNotFoundError:
        listed = ""
    return sorted(set(listed.split()) | set(SHIPPED_PACKAGES))


def project_files(root: Path) -> Iterator[Path]:
    """The shipped source files under ``root``, in a stable order."""
    for package in shipped_packages():
        for path in sorted((root / package).rglob("*")):
            if path.suffix in SHIPPED_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def package_project(directory: Path, root: Path | None = None) -> Path:
    """Write the project's zip for ``--py-files`` into ``directory``; its path (named by its
    content's hash, so an unchanged project is not written twice)."""
    root = root or project_root()
    files = list(project_files(root))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    target = directory / f"queuecore-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.relative_to(root).as_posix())
        partial.replace(target)
    return target


def driver_script(directory: Path) -> Path:
    """The driver's entry file in ``directory``."""
    script = directory / "queuecore_driver.py"
    if not script.exists() or script.read_text() != DRIVER_SOURCE:
        script.write_text(DRIVER_SOURCE)
    return script


@functools.cache
def _bundle_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="queuecore-spark-"))


def spark_submit() -> Path:
    """The ``spark-submit`` of the installed PySpark wheel."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def job_command(module: str, args: list[str], config: SparkSettings) -> list[str]:
    """The command that runs job ``module`` with ``args`` against ``config.master``."""
    if config.local:
        return [sys.executable, "-m", module, *args]
    bundle = _bundle_dir()
    return [
        str(spark_submit()),
        "--master",
        config.master,
        "--deploy-mode",
        "client",
        "--name",
        f"queuecore-{module.rsplit('.', 1)[-1]}",
        "--py-files",
        str(package_project(bundle)),
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        "--conf",
        "spark.ui.enabled=false",
        str(driver_script(bundle)),
        module,
        *args,
    ]


def ship_project(session: SparkSession) -> None:
    """Put the project's zip on a cluster session's executors' path, unless spark-submit's
    ``--py-files`` already did (``queuecore spark …`` run by hand against a cluster master)."""
    submitted = session.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    if "queuecore-" not in submitted:
        session.sparkContext.addPyFile(str(package_project(_bundle_dir())))
