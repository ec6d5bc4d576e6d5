"""The Go SDK (sdk/go): ``go vet`` and its own tests, run against a real API process.

The Go tests include the conformance scenarios (``sdk/conformance/scenarios.json``) and the
README's examples (``Example…`` functions); the README's snippets must be those examples.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tenants.models import NewOrganisation
from tests.support.services import Services, unavailable
from tests.support.tenancy import new_organisation

GO_DIR = Path(__file__).resolve().parents[2] / "sdk" / "go"
GO_TEST_TIMEOUT_S = 240  # within the suite's 300 s per test, compilation included


def go_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``go`` command: caches under the temp dir, no module downloads."""
    cache = Path(tempfile.gettempdir()) / "queuecore-go-cache"
    return {
        **os.environ,
        "GOCACHE": str(cache / "build"),
        "GOPATH": str(cache / "path"),
        "GOFLAGS": "-mod=readonly",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
        **(extra or {}),
    }


def go_command() -> str:
    """The ``go`` binary; skipped on a laptop without it, failed under CI."""
    found = shutil.which("go")
    if found is None:
        unavailable("go is not installed (apt-get install golang-go)")
        raise AssertionError("unreachable")
    return found


def run_go(args: list[str], env: dict[str, str], timeout_s: float) -> None:
    """Run ``go ARGS`` in sdk/go; fail the test with go's output when it fails."""
    done = subprocess.run(
        [go_command(), *args],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"go {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )


@pytest.fixture
def go_org(services: Services) -> NewOrganisation:
    """A fresh Pro organisation (Developer's 50 consume requests/s would throttle acks)."""
    return new_organisation(services.database_url, tier="pro")


def test_go_vet_finds_nothing() -> None:
    run_go(["vet", "./..."], go_env(), 300)


def test_go_sdk_tests_pass_against_the_api(
    api: str, go_org: NewOrganisation, services: Services
) -> None:
    developer = new_organisation(services.database_url, tier="developer")
    env = go_env(
        {
            "QUEUECORE_URL": api,
            "QUEUECORE_API_KEY": go_org.keys["production"].secret,
            "QUEUECORE_DEVELOPER_API_KEY": developer.keys["production"].secret,
        }
    )
    run_go(
        ["test", "-count=1", f"-timeout={GO_TEST_TIMEOUT_S}s", "./..."], env, GO_TEST_TIMEOUT_S + 60
    )


def test_go_tests_fail_when_the_api_does_not_answer() -> None:
    env = go_env({"QUEUECORE_URL": "http://127.0.0.1:9", "QUEUECORE_API_KEY": "pq_live_sk_x"})
    done = subprocess.run(
        [go_command(), "test", "-count=1", "-run", "TestConformance", "."],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert "does not answer" in done.stdout


def readme_snippets() -> list[str]:
    """The ```go blocks of sdk/go/README.md."""
    text = (GO_DIR / "README.md").read_text()
    return [block.strip("\n") for block in re.findall(r"```go\n(.*?)```", text, re.S)]


def example_bodies() -> dict[str, str]:
    """Each ``Example…`` function of example_test.go: name → body, one tab unindented."""
    source = (GO_DIR / "example_test.go").read_text()
    bodies = {}
    for name, body in re.findall(r"^func (Example\w*)\(\) \{\n(.*?)^\}", source, re.S | re.M):
        lines = [line.removeprefix("\t") for line in body.splitlines()]
        bodies[name] = "\n".join(lines).strip("\n")
    return bodies


def test_readme_snippets_are_the_tested_examples() -> None:
    snippets, examples = readme_snippets(), example_bodies()
    assert len(snippets) >= 4, "the README shows the client, publishing, consuming and the DLQ"
    for snippet in snippets:
        if snippet.startswith(("import", "go get")):
            continue
        assert snippet in examples.values(), f"README snippet is not an Example body:\n{snippet}"


APP_MAIN = """package main

import (
	"context"
	"fmt"
	"log"

	queuecore "github.com/queuecore/queuecore-go"
)

func main() {
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Close()
	health, err := pq.Health(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("health:", health["status"])
}
"""


def test_another_module_uses_the_sdk_through_a_replace_directive(
    api: str, go_org: NewOrganisation, tmp_path: Path
) -> None:
    """The README's way to use sdk/go before the module is published: require it, replace it."""
    (tmp_path / "go.mod").write_text(
        "module example.com/app\n\ngo 1.19\n\n"
        "require github.com/queuecore/queuecore-go v0.0.0\n\n"
        f"replace github.com/queuecore/queuecore-go => {GO_DIR}\n"
    )
    (tmp_path / "main.go").write_text(APP_MAIN)
    env = go_env({"QUEUECORE_URL": api, "QUEUECORE_API_KEY": go_org.keys["production"].secret})
    done = subprocess.run(
        [go_command(), "run", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=GO_TEST_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "health: ok"
