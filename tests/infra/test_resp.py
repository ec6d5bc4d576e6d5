"""The pipelined Redis connection against a real Redis server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis as sync_redis

from core.resp import RedisPipe, RespError, Script
from infra.embedded import EmbeddedRedis, free_port_block
from tests.support.services import Services


def test_concurrent_commands_each_get_their_own_reply(
    services: Services, unique: Callable[[str], str]
) -> None:
    prefix = unique("resp")

    async def scenario() -> list[object]:
        pipe = RedisPipe(services.redis_url)
        try:
            return list(
                await asyncio.gather(*(pipe.call("INCRBY", f"{prefix}:{i}", i) for i in range(200)))
            )
        finally:
            await pipe.close()

    assert asyncio.run(scenario()) == list(range(200))


def test_an_error_reply_raises_and_the_connection_keeps_working(
    services: Services, unique: Callable[[str], str]
) -> None:
    key = unique("resp")

    async def scenario() -> object:
        pipe = RedisPipe(services.redis_url)
        try:
            await pipe.call("SET", key, "text")
            with pytest.raises(RespError, match=r"WRONGTYPE|not an integer"):
                await pipe.call("INCR", key)
            return await pipe.call("GET", key)
        finally:
            await pipe.close()

    assert asyncio.run(scenario()) == b"text"


def test_script_is_loaded_when_the_server_does_not_know_it(
    services: Services, unique: Callable[[str], str]
) -> None:
    key = unique("resp")
    source = "return {redis.call('INCRBY', KEYS[1], ARGV[1]), 'ok', {1, 2}}"

    async def scenario() -> list[object]:
        pipe = RedisPipe(services.redis_url)
        script = Script(pipe, source)
        try:
            await pipe.call("SCRIPT", "FLUSH")
            return [await script([key], [5]), await script([key], [2])]
        finally:
            await pipe.close()

    assert asyncio.run(scenario()) == [[5, b"ok", [1, 2]], [7, b"ok", [1, 2]]]


def test_database_number_in_the_url_is_selected(
    services: Services, unique: Callable[[str], str]
) -> None:
    key = unique("resp")

    async def scenario() -> None:
        pipe = RedisPipe(_with_db(services.redis_url, 3))
        try:
            await pipe.call("SET", key, "in db 3")
        finally:
            await pipe.close()

    asyncio.run(scenario())
    with (
        sync_redis.Redis.from_url(_with_db(services.redis_url, 3)) as db3,
        sync_redis.Redis.from_url(_with_db(services.redis_url, 0)) as db0,
    ):
        assert db3.get(key) == b"in db 3"
        assert db0.get(key) is None


def _with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def test_a_stopped_server_fails_calls_and_a_restarted_one_is_reconnected(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", tmp_path / "logs", free_port_block())
    server.start()

    async def scenario() -> list[object]:
        pipe = RedisPipe(server.url)
        try:
            seen: list[object] = [await pipe.call("PING")]
            server.stop()
            with pytest.raises(ConnectionError):
                async with asyncio.timeout(5):
                    await pipe.call("PING")
            server.start()
            seen.append(await pipe.call("PING"))
            return seen
        finally:
            await pipe.close()

    try:
        assert asyncio.run(scenario()) == [b"PONG", b"PONG"]
    finally:
        server.stop()
