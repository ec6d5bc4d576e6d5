"""What a durable lease costs a pull: ``qc_pull`` committed without and with waiting for the
WAL flush, side by side in one run (docs/decisions.md §11).

A private PostgreSQL (``fsync=on``, as in production) holds a topic with a backlog index of
``--messages`` messages over 8 partitions (the index only: ``qc_pull`` leases offsets and the
object store is not read), and one group whose 8 members each own a partition. In each round
every member pulls up to ``--batch`` messages and acks them (``qc_ack_ranges``, which always
waits for the flush), concurrently, for ``--seconds``; rounds alternate the pull's commit mode
(``p_async_commit`` true / false), so noise on a shared machine hits both alike. Reported per
mode: pull statement latency p50 / p90 / p99, pulls and messages per second.

    python -m benchmarks.pull_commit [--rounds 6] [--seconds 4] [--batch 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row

from data_plane.delivery import group_ref
from data_plane.delivery import queries as q
from data_plane.delivery.leases import new_lease_id
from data_plane.groups import service as groups
from data_plane.topics import service as topics
from data_plane.write import queries as write_q
from infra import migrate
from infra.embedded import EmbeddedPostgres, free_port_block
from tenants import service as tenants

PARTITIONS = 8
BLOCK = 100_000  # messages per index row of the backlog
MODES = {"async": True, "sync": False}


async def backlog(url: str, topic_id: str, messages: int) -> None:
    """Index rows for ``messages`` messages per partition (no object behind them)."""
    async with await AsyncConnection.connect(url, autocommit=True) as conn:
        for first in range(0, messages, BLOCK):
            rows = [
                (topic_id, p, BLOCK, 0, 1000, 0, 0) for p in range(PARTITIONS)
            ]  # count, byte offset, byte length, min and max timestamps
            await conn.execute(
                write_q.COMMIT_FLUSH,
                {
                    "object_key": f"bench/{uuid.uuid4().hex}-{first}",
                    "size_bytes": 1000 * PARTITIONS,
                    "blocks": msgspec.json.encode(rows).decode(),
                    "keys": "[]",
                },
            )


async def member_loop(
    conn: AsyncConnection[DictRow], ref: Any, member: str, batch: int, async_commit: bool,
    until: float, latencies: list[float],
) -> int:  # fmt: skip
    """Pull and ack until ``until``; returns the messages pulled."""
    pulled = 0
    while time.perf_counter() < until:
        params = {
            "group_id": ref.id, "member_id": member, "topic_id": ref.topic_id, "limit": batch,
            "async_commit": async_commit, "lease_ids": [new_lease_id()],
        }  # fmt: skip
        started = time.perf_counter()
        row = await (await conn.execute(q.PULL, params)).fetchone()
        latencies.append(time.perf_counter() - started)
        assert row is not None
        leases = row["pulled"].get("leases") or []
        if not leases:
            break
        ids = [lease[1] for lease in leases]
        masks = ["1" * (lease[3] - lease[2] + 1) for lease in leases]
        params = {"group_id": ref.id, "strict": False, "lease_ids": ids, "masks": masks}
        await conn.execute(q.ACK_RANGES, params)
        pulled += sum(lease[3] - lease[2] + 1 for lease in leases)
    return pulled


async def one_round(
    url: str, ref: Any, members: list[str], batch: int, async_commit: bool, seconds: float
) -> dict[str, Any]:
    """Every member pulls and acks for ``seconds``, in the given commit mode."""
    conns = [
        await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) for _ in members
    ]
    latencies: list[float] = []
    until = time.perf_counter() + seconds
    began = time.perf_counter()
    try:
        counts = await asyncio.gather(
            *(
                member_loop(c, ref, m, batch, async_commit, until, latencies)
                for c, m in zip(conns, members, strict=True)
            )
        )
    finally:
        for conn in conns:
            await conn.close()
    return {"latencies": latencies, "messages": sum(counts), "wall_s": time.perf_counter() - began}


def summary(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Latency percentiles (ms) and rates of one mode's rounds together."""
    latencies = sorted(x for r in rounds for x in r["latencies"])
    wall = sum(r["wall_s"] for r in rounds)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1e3

    return {
        "pulls": len(latencies),
        "p50_ms": statistics.median(latencies) * 1e3,
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "pulls_per_s": len(latencies) / wall,
        "messages_per_s": sum(r["messages"] for r in rounds) / wall,
    }


async def setup(url: str, messages: int) -> tuple[Any, list[str]]:
    """The topic, its backlog, the group and its members (one partition each)."""
    async with await AsyncConnection.connect(url, row_factory=dict_row) as conn:
        org = await tenants.create_organisation(
            conn, "bench", "bench@example.com", "correct-horse-battery", tier="enterprise"
        )
        env = org.project.environment("production").id
        topic = await topics.create_topic(
            conn, org.organisation.id, env, "bench.pull", partitions=PARTITIONS,
            delivery="at-least-once",
        )  # fmt: skip
        config = groups.GroupConfig(start_from="earliest", session_timeout_ms=600_000)
        await groups.configure(conn, env, "bench.pull", "g", config)
        await conn.commit()
        await backlog(url, topic.id, messages)
        members = []
        for n in range(PARTITIONS):
            joined = await groups.join(conn, env, "bench.pull", "g", client_id=f"m{n}")
            await conn.commit()
            members.append(joined.member_id)
        ref = await group_ref(conn, env, "bench.pull", "g")
        await conn.commit()
    return ref, members


async def bench(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Alternate the modes round by round; every mode's rounds summarised."""
    ref, members = await setup(url, args.messages)
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for number in range(args.rounds):
        order = list(MODES) if number % 2 == 0 else list(reversed(MODES))
        for mode in order:
            measured = await one_round(url, ref, members, args.batch, MODES[mode], args.seconds)
            results[mode].append(measured)
    return {mode: summary(rounds) for mode, rounds in results.items()}


def main() -> None:
    """Command line entry: run, print a table (and the JSON, when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per mode")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per round")
    parser.add_argument("--batch", type=int, default=100, help="messages per pull")
    parser.add_argument("--messages", type=int, default=5_000_000, help="backlog per partition")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qc-pull-commit-") as tmp:
        postgres = EmbeddedPostgres(Path(tmp) / "pg", Path(tmp) / "logs", free_port_block())
        postgres.start()
        try:
            migrate.apply(postgres.url)
            report = asyncio.run(bench(postgres.url, args))
        finally:
            postgres.stop()
    print("| pull commit | pulls | p50 ms | p90 ms | p99 ms | pulls/s | messages/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, r in report.items():
        print(
            f"| {mode} | {r['pulls']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {r['pulls_per_s']:.0f} | {r['messages_per_s']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
