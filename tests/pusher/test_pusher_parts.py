"""The pusher's sans-IO parts and its HTTP/1.1 client against odd (but legal) answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from core.sealed import PLAIN, Sealer, SealError
from data_plane.push.http1 import Http1Pool, Origin
from data_plane.push.sender import body_of, retry_after_s
from data_plane.write.segment import BYTES, Message
from pusher.circuit import MAX_PAUSE_S, OPEN_AFTER, Circuit
from pusher.group import backoff_s, window_share


def test_the_circuit_backs_off_after_five_failures_and_not_for_pushes_already_under_way() -> None:
    circuit = Circuit()
    for _ in range(OPEN_AFTER - 1):
        circuit.failed(now=100.0)
    assert circuit.limit(50) == 50 and circuit.pause_s(now=100.0) == 0
    circuit.failed(now=100.0)  # the fifth in a row
    assert circuit.limit(50) == 1 and circuit.pause_s(now=100.0) == 1.0
    for _ in range(10):  # the other pushes that were in flight fail too: the pause stays
        circuit.failed(now=100.2)
    assert circuit.pause_s(now=100.0) == 1.0
    circuit.failed(now=101.0)  # the probe after the pause fails: twice as long
    assert circuit.pause_s(now=101.0) == 2.0
    for second in range(103, 400, 60):
        circuit.failed(now=float(second))
    assert circuit.pause_s(now=400.0) <= MAX_PAUSE_S
    circuit.succeeded()
    assert circuit.limit(50) == 50 and circuit.pause_s() == 0


def test_the_window_is_shared_by_partitions_owned_and_the_backoff_doubles() -> None:
    assert window_share(10, 3, 3) == 10
    assert window_share(10, 1, 3) == 4  # two pushers: 4 + 7 (rounded up, never 0)
    assert window_share(10, 2, 3) == 7
    assert window_share(10, 0, 3) == 1
    assert [backoff_s(1000, attempt) for attempt in (1, 2, 3)] == [1.0, 2.0, 4.0]


def test_retry_after_is_read_from_a_429_or_503_only() -> None:
    assert retry_after_s(429, "7") == 7.0
    assert retry_after_s(503, " 120 ") == 120.0
    assert retry_after_s(500, "7") is None
    assert retry_after_s(429, "soon") is None
    assert retry_after_s(503, "Thu, 01 Jan 2026 00:00:30 GMT", now_s=1767225600.0) == 30.0
    assert retry_after_s(429, "99999999") == 86_400.0  # at most a day


def test_the_body_carries_the_message_as_published() -> None:
    message = Message(b"k1", {"h": "v"}, b'{"a":[1,2]}', 1767225600000)
    body = json.loads(body_of("msg_x", "t", "g", 2, 41, 3, message))
    assert body == {
        "messageId": "msg_x",
        "topic": "t",
        "group": "g",
        "partition": 2,
        "offset": 41,
        "attempt": 3,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "key": "k1",
        "headers": {"h": "v"},
        "data": {"a": [1, 2]},
    }
    binary = Message(None, {}, b'"AAE="', 0, BYTES)
    assert json.loads(body_of("m", "t", "g", 0, 0, 1, binary))["encoding"] == "base64"


def test_without_a_key_secrets_are_stored_plain_and_a_sealed_one_needs_its_key() -> None:
    plain = Sealer(None)
    assert plain.seal("whsec_abc", "grp_1") == PLAIN + "whsec_abc"
    sealed = Sealer("k" * 32).seal("whsec_abc", "grp_1")
    with pytest.raises(SealError, match="not set"):
        plain.open(sealed, "grp_1")
    assert Sealer("k" * 32).open(plain.seal("whsec_abc", "grp_1"), "grp_1") == "whsec_abc"


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _answered_by(handler: Handler, posts: int = 2) -> list[tuple[int, bytes]]:
    """POST ``posts`` times through one pool to a server run by ``handler``."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook"
    pool = Http1Pool(4)
    try:
        answers = []
        for _ in range(posts):
            answer = await pool.post(url, Origin.of(url), {"X-Test": "1"}, b"{}")
            answers.append((answer.status, answer.body))
        return answers
    finally:
        await pool.close()
        server.close()


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"Host: 127.0.0.1:" in head and b"X-Test: 1" in head
    await reader.readexactly(2)


def test_chunked_answers_keep_the_connection_and_a_closed_one_is_replaced() -> None:
    connections = []

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(
                b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nbad, \r\n4;x=y\r\nsad!\r\n0\r\n\r\n"
            )

    assert asyncio.run(_answered_by(chunked)) == [(500, b"bad, sad!")] * 2
    assert len(connections) == 1  # kept alive

    connections.clear()

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await _read_request(reader)
        writer.write(b"HTTP/1.0 204 No Content\r\n\r\n")
        writer.close()

    assert asyncio.run(_answered_by(closing)) == [(204, b"")] * 2
    assert len(connections) == 2  # delimited by its close: a new connection each time


def test_a_204_without_a_length_is_complete_and_interim_answers_are_skipped() -> None:
    connections = []

    async def no_content(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            # What Go's net/http and most frameworks send: no Content-Length, connection kept.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")

    answers = asyncio.run(asyncio.wait_for(_answered_by(no_content), timeout=5))
    assert answers == [(204, b"")] * 2
    assert len(connections) == 1  # complete at its head: kept alive, not read until a close


def test_an_idle_connection_the_endpoint_closed_is_not_a_failed_push() -> None:
    connections = []

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # keep-alive promised, then closed: the next POST goes on a new one

    async def twice() -> list[tuple[int, bytes]]:
        server = await asyncio.start_server(once, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
        pool = Http1Pool(4)
        first = await pool.post(url, Origin.of(url), {"X-Test": "1"}, b"{}")
        await asyncio.sleep(0.2)
        second = await pool.post(url, Origin.of(url), {"X-Test": "1"}, b"{}")
        await pool.close()
        server.close()
        return [(first.status, first.body), (second.status, second.body)]

    assert asyncio.run(twice()) == [(200, b"ok")] * 2
    assert len(connections) == 2
