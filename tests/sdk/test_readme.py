"""The examples of sdk/python/README.md run as written against a real API process."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tenants.models import NewOrganisation

pytestmark = pytest.mark.e2e

README = Path(__file__).parents[2] / "sdk" / "python" / "README.md"


def python_blocks(text: str) -> list[str]:
    """The fenced ``python`` blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_every_python_example_of_the_readme_runs(
    api: str, org: NewOrganisation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUECORE_API_KEY", org.keys["production"].secret)
    monkeypatch.setenv("QUEUECORE_URL", api)
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 6
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for number, block in enumerate(blocks, 1):
            code = compile(block, f"{README.name} example {number}", "exec")
            exec(code, {"__name__": "__main__"})  # noqa: S102 - the README's own examples
    output = printed.getvalue()
    assert "['order.events']" in output  # the tour listed the topic it created
    assert "[0, 1, 2, 3, 4]" in output  # the handler got and acked every payment
    assert "connected" in output
    assert "ada@example.com 1" in output  # the synchronous consumer's first delivery
    assert "TOPIC_NOT_FOUND 404 req_" in output
    assert "push.test payments 1 {'test': True" in output  # the handler verified the test push
    assert "test push delivered: True 204" in output
