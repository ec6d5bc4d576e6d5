"""The publish listener against a real PostgreSQL: a NOTIFY from another session wakes the
waiters of its topic (and only those of its partitions); when the listening session is killed
the listener wakes everyone (something may have been missed), reconnects, and later
notifications wake waiters again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import psycopg

from data_plane.read.notify import CHANNEL, PublishListener
from tests.support.services import Services

WAKE_S = 5.0
APPLICATION = "qc-notify-test"


async def _notify(url: str, items: list[list[object]]) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(items)))


async def _listening_pids(url: str) -> list[int]:
    """Backends of this test's listener (named by its application_name), once it listens."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = %s",
                (APPLICATION, f"LISTEN {CHANNEL}"),
            )
        ).fetchall()
    return [row[0] for row in rows]


async def _until(condition: Callable[[], bool], timeout_s: float = WAKE_S) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)


def _named(url: str) -> str:
    """The database URL with this test's application_name, so its sessions can be found."""
    return url + ("&" if "?" in url else "?") + f"application_name={APPLICATION}"


def test_a_notification_wakes_the_waiters_of_its_topic_and_partition(services: Services) -> None:
    url = services.database_url

    async def scenario() -> None:
        listener = PublishListener(url)
        listener.start()
        try:
            with (
                listener.watch("top_a", frozenset({1})) as mine,
                listener.watch("top_a", frozenset({2})) as other_partition,
                listener.watch("top_b") as other_topic,
            ):
                await _until(lambda: mine.event.is_set())  # woken once when listening starts
                for watch in (mine, other_partition, other_topic):
                    watch.event.clear()
                await _notify(url, [["top_a", 1, 10]])
                assert await mine.wait(WAKE_S)
                await asyncio.sleep(0.2)
                assert not other_partition.event.is_set()
                assert not other_topic.event.is_set()
                mine.event.clear()
                # a burst: several notifications in one read all count
                for offset in range(5):
                    await _notify(url, [["top_b", 0, offset]])
                assert await other_topic.wait(WAKE_S)
                assert not mine.event.is_set()
        finally:
            await listener.stop()

    asyncio.run(scenario())


def test_a_killed_listening_session_wakes_everyone_and_listening_resumes(
    services: Services,
) -> None:
    url = services.database_url

    async def scenario() -> None:
        listener = PublishListener(_named(url))
        listener.start()
        try:
            with listener.watch("top_c", frozenset({0})) as watch:
                await _until(lambda: watch.event.is_set())
                pids: list[int] = []
                async with asyncio.timeout(WAKE_S):
                    while not pids:
                        pids = await _listening_pids(url)
                watch.event.clear()
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
                    for pid in pids:
                        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                # the listener noticed and woke its waiters: a notification may have been missed
                assert await watch.wait(WAKE_S)
                watch.event.clear()
                async with asyncio.timeout(WAKE_S + 5):
                    while not set(await _listening_pids(url)) - set(pids):
                        await asyncio.sleep(0.1)
                watch.event.clear()
                await _notify(url, [["top_c", 0, 1]])
                assert await watch.wait(WAKE_S)
        finally:
            await listener.stop()

    asyncio.run(scenario())
