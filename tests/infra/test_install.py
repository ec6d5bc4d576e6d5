"""``make install`` prints nothing that reads like an error: the editable builds of the server
and of the Python SDK raise no setuptools warnings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("project", [".", "sdk/python"])
def test_the_editable_build_prints_no_warning(project: str, tmp_path: Path) -> None:
    # The same PEP 660 hook pip calls for `pip install -e`, with warnings shown as pip shows them.
    code = f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path)!r})"
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        cwd=ROOT / project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("*.editable-*.whl"))
    output = done.stdout + done.stderr
    assert "Warning" not in output and "!!" not in output, output
