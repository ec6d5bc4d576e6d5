"""Responses leave in one write (control_plane.edge.coalesce), intact and in order.

Unit tests on a real socket pair and a real event loop (the transport under the wrapper only
counts the calls it gets), then the server: pipelined and ``Connection: close`` requests against a
real ``queuecore serve``, where a write kept and never sent would be a lost answer.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from control_plane.edge.coalesce import MAX_KEPT_BYTES, CoalescingTransport
from tests.control_plane.test_http_limits import connect, read_until_closed, status_of


class _Counting:
    """The real transport, with a count of the writes handed to it."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.transport.write(data)

    def writelines(self, lines: list[bytes]) -> None:
        self.writes += 1
        self.transport.writelines(lines)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def _pair() -> tuple[CoalescingTransport, _Counting, socket.socket]:
    ours, peer = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    counting = _Counting(transport)
    return CoalescingTransport(counting, loop), counting, peer  # type: ignore[arg-type]


async def _received(peer: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    peer.setblocking(False)
    data = b""
    while len(data) < size:
        chunk = await asyncio.wait_for(loop.sock_recv(peer, 65536), 5)
        if not chunk:
            break
        data += chunk
    return data


def test_a_head_and_body_written_in_one_callback_leave_in_one_write() -> None:
    async def scenario() -> None:
        wrapped, counting, peer = await _pair()
        wrapped.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
        wrapped.write(b"hello")
        assert counting.writes == 0  # kept until the callback ends
        assert await _received(peer, 43) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        assert counting.writes == 1
        wrapped.write(b"second")  # a later callback: its own write, after the first
        assert await _received(peer, 6) == b"second"
        assert counting.writes == 2
        wrapped.close()
        peer.close()

    asyncio.run(scenario())


def test_close_sends_what_was_kept_and_abort_drops_it() -> None:
    async def scenario() -> None:
        wrapped, _, peer = await _pair()
        wrapped.write(b"last words")
        wrapped.close()
        assert await _received(peer, 100) == b"last words"  # then EOF
        peer.close()
        wrapped, counting, peer = await _pair()
        wrapped.write(b"never sent")
        wrapped.abort()
        await asyncio.sleep(0.05)
        assert counting.writes == 0
        assert await _received(peer, 1) == b""  # EOF or reset, no bytes
        peer.close()

    asyncio.run(scenario())


def test_pipelined_requests_get_whole_answers_in_order(api: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with connect(api) as sock:
        sock.sendall(request * 3 + last)
        answer = read_until_closed(sock)
    parts = answer.split(b"HTTP/1.1 ")[1:]
    assert len(parts) == 4, answer[:600]
    for part in parts:
        assert status_of(b"HTTP/1.1 " + part) == 200
        head, _, body = part.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        assert len(body) == length, part  # the body whole, before the next answer's head


def test_a_long_body_goes_out_at_once_so_flow_control_sees_it() -> None:
    async def scenario() -> None:
        wrapped, counting, peer = await _pair()
        head, body = b"head\r\n\r\n", b"x" * (MAX_KEPT_BYTES + 1)
        wrapped.write(head)
        wrapped.write(body)
        assert counting.writes == 1  # not held until the callback ends
        # nothing kept back: what is buffered is the real transport's (its flow control's)
        assert wrapped.get_write_buffer_size() == counting.transport.get_write_buffer_size()
        assert await _received(peer, len(head + body)) == head + body
        wrapped.close()
        peer.close()

    asyncio.run(scenario())
