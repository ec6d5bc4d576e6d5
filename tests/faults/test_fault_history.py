"""The bounded fault run: a private cluster under kills and freezes of every service, the
recorded history checked for every anomaly the checker names. A few minutes; fixed seed.

Reproduce a failure outside pytest with the same seed:
``python -m tests.faults.run --seed 13 --faults 12 --duration 110 --ops 0``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.embedded import ServiceError
from tests.faults.cluster import TARGET_KINDS
from tests.faults.run import run
from tests.support.services import unavailable

pytestmark = pytest.mark.e2e

SEED = 13
FAULTS = 12
FAULT_PERIOD_S = 110.0
NON_VACUOUS = (
    "acknowledgedMessages",
    "deliveries",
    "acceptedAcksExactlyOnce",
    "committedOffsetReads",
    "pollSteps",
    "committedOffsetsDelivered",
)


@pytest.mark.timeout(480)
def test_no_anomaly_under_kills_and_freezes_of_api_s3_postgres_and_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        summary = run(tmp_path / "run", SEED, FAULTS, FAULT_PERIOD_S)
    except ServiceError as exc:
        unavailable(f"could not start the fault run's services: {exc}")
        return
    printed = {k: v for k, v in summary.items() if k not in {"faultLog", "anomalyDetails"}}
    with capsys.disabled():
        print("\nfault run summary:", json.dumps(printed, indent=2))
    kinds = {kind.split(":")[0] for kind in summary["faultsByKind"]}
    assert summary["faults"] >= 10 and kinds == set(TARGET_KINDS), summary["faultsByKind"]
    assert summary["outcomes"]["publish"]["ok"] >= 500, summary["outcomes"]
    assert summary["outcomes"]["ack"]["ok"] >= 100, summary["outcomes"]
    assert summary["outcomes"]["kafkaProduce"]["ok"] >= 100, summary["outcomes"]
    checked = summary["checked"]
    assert min(checked.get(what, 0) for what in NON_VACUOUS) > 0, checked  # the checks saw data
    # PostgreSQL's client connections at each of its faults: at most the two replicas' pools
    # (10 each) and LISTEN connections, and a few made or ended meanwhile; never connections left
    # behind by freezes piling up.
    connections = [
        f["connections"] for f in summary["faultLog"] if f["target"].startswith("postgres")
    ]
    assert connections and max(connections) <= 2 * (10 + 1) + 3, connections
    found = {name: n for name, n in summary["anomalies"].items() if n}
    assert not found, (
        f"anomalies {found} (seed {SEED}); first of each: "
        f"{json.dumps(summary['anomalyDetails'])}; history in {tmp_path / 'run'}"
    )
