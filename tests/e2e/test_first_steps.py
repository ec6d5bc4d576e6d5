"""The first steps as written: the commands ``queuecore dev`` prints and the README's first
steps and Python example, run verbatim against a real ``queuecore dev``.

They are read from the banner and from README.md, so a change to either that breaks them
breaks this test. The only edits are the ones a reader makes too: the ports (the test's stack
runs on free ones instead of the defaults) and, for the banner's organisation, the email (the
README's organisation has the printed one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.cli import build_parser
from tests.e2e.test_dev_stack import DevPorts, start_dev, wait_ready
from tests.infra.test_deploy import setting_names
from tests.support.processes import stop

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    """A running ``queuecore dev``: its ports and its terminal output."""

    ports: DevPorts
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def localise(self, text: str) -> str:
        """The documented default ports replaced by this stack's."""
        return text.replace("127.0.0.1:5433", f"127.0.0.1:{self.ports.postgres}").replace(
            "127.0.0.1:8080", f"127.0.0.1:{self.ports.http}"
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    ports, scratch = DevPorts.pick(), tmp_path_factory.mktemp("first-steps")
    log = scratch / "dev.log"
    env = {**ports.env(scratch / "data"), "QUEUECORE_SHUTDOWN_DRAIN_S": "0"}  # a quick stop
    proc = start_dev(env, log)
    try:
        wait_ready(proc, ports, log)
        yield Stack(ports, log)
    finally:
        stop(proc)


def a_fresh_terminal() -> dict[str, str]:
    """The environment of a new shell: none of the test session's QueueCore settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a reader pastes it, at the clone's root, stopping at the first error."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env or a_fresh_terminal(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def block_after(text: str, heading: str, language: str) -> str:
    """The first fenced ``language`` block after ``heading``."""
    section = text[text.index(heading) :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block after {heading!r}"
    return match.group(1)


def banner_command(banner: str, after: str) -> str:
    """The command printed under the banner line starting with ``after`` (continuations joined)."""
    lines = banner[banner.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  "))
    command = []
    for line in lines[start:]:
        if not line.strip():
            break
        command.append(line.strip().removesuffix("\\").strip())
    return " ".join(command)


def first_json(output: str) -> dict[str, Any]:
    """The JSON object an output starts with."""
    found, _ = json.JSONDecoder().raw_decode(output.strip())
    assert isinstance(found, dict)
    return found


def test_the_banner_names_every_part_and_its_commands_run_as_printed(stack: Stack) -> None:
    banner = stack.text()[stack.text().index("QueueCore is running.") :]
    ports = stack.ports

    assert f"endpoint http://127.0.0.1:{ports.s3}, bucket queuecore" in banner
    for variable, port in [
        ("QUEUECORE_HTTP_PORT", ports.http),
        ("QUEUECORE_DEV_POSTGRES_PORT", ports.postgres),
        ("QUEUECORE_DEV_REDIS_PORT", ports.redis),
        ("QUEUECORE_DEV_S3_PORT", ports.s3),
        ("QUEUECORE_DEV_SMTP_PORT", ports.smtp),
    ]:
        assert f"{variable}={port}" in banner
    create_org = banner_command(banner, "Get an API key")
    assert ".venv/bin/queuecore tenants create-org" in create_org  # no activated venv needed

    made = bash(create_org.replace("you@example.com", "banner@example.com"))

    assert made.returncode == 0, made.stderr
    output = first_json(made.stdout)
    assert output["owner"]["password"] and output["keys"]["production"].startswith("pq_live_sk_")
    # The Spark command: settings QueueCore reads, then a command its parser takes.
    spark = shlex.split(banner_command(banner, "Run a Spark job by hand"))
    settings = [word for word in spark if "=" in word and word.split("=")[0].isupper()]
    command = spark[len(settings) :]
    assert {s.split("=")[0].removeprefix("QUEUECORE_") for s in settings} <= setting_names()
    assert (ROOT / command[0]).exists(), command[0]
    assert build_parser().parse_args(command[1:]).spark_job == "compaction"


def test_the_readme_first_steps_and_python_example_run_as_written(
    stack: Stack, tmp_path: Path
) -> None:
    readme = (ROOT / "README.md").read_text()
    steps = stack.localise(block_after(readme, "## First steps", "sh"))

    ran = bash(steps)

    assert ran.returncode == 0, ran.stderr
    organisation = first_json(ran.stdout)
    assert organisation["owner"]["email"] == "you@example.com"
    assert organisation["owner"]["password"]  # the owner's dashboard password, printed once
    assert '"offset":0' in ran.stdout.replace(" ", "")  # published
    assert '"order.created"' in ran.stdout  # and pulled back (no other step prints the data)
    example = tmp_path / "example.py"
    example.write_text(block_after(readme, "## SDKs", "python"))
    env = {
        **a_fresh_terminal(),
        "QUEUECORE_API_KEY": organisation["keys"]["production"],
        "QUEUECORE_URL": f"http://127.0.0.1:{stack.ports.http}",
    }
    python = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert python.returncode == 0, python.stderr
    assert "'type': 'order.created'" in python.stdout  # it read its message, then ended
    assert len(python.stdout.splitlines()) >= 2  # the curl step's message, then its own


def test_the_dev_stack_shows_the_email_an_invitation_sends(stack: Stack) -> None:
    base = f"http://127.0.0.1:{stack.ports.http}"
    made = bash(
        stack.localise(
            "QUEUECORE_DATABASE_URL=postgresql://postgres@127.0.0.1:5433/queuecore "
            f"{sys.executable} -m infra.cli tenants create-org --name Mail --email mail@example.com"
        )
    )
    org = first_json(made.stdout)
    with httpx.Client(base_url=base, timeout=30) as http:
        signed_in = http.post(
            "/auth/login", json={"email": "mail@example.com", "password": org["owner"]["password"]}
        )
        assert signed_in.status_code == 200, signed_in.text
        csrf = signed_in.json()["csrfToken"]
        invited = http.post(
            f"/dashboard/orgs/{org['organisation']['id']}/invitations",
            data={"csrf_token": csrf, "email": "teammate@example.com", "role": "developer"},
        )
        assert invited.status_code == 303 and "notice=invited" in invited.headers["location"]

        printed = re.search(
            r"mail to teammate@example\.com: You are invited to Mail on QueueCore\n\s+(\S+)",
            stack.text(),
        )
        assert printed, stack.text()[-2000:]
        assert printed.group(1).startswith(f"{base}/dashboard/invites/qc_inv_")
        assert http.get(printed.group(1)).status_code == 200
    saved = list((stack.log.parent / "data" / "mail").glob("*.eml"))
    assert any(b"teammate@example.com" in path.read_bytes() for path in saved)
