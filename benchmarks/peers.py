"""Peers measured in the same run: Redis Streams with ``appendfsync always`` and a RabbitMQ quorum
queue with publisher confirms. Each runs as a private server under the run's directory, on free
ports, with 1 KiB payloads, 8 clients, batches of 100 and single messages like QueueCore.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.load import Send, Throughput, closed_loop
from infra.embedded import (
    HOST,
    EmbeddedRedis,
    ServiceError,
    die_with_parent,
    free_port_block,
    redis_binary,
    wait_until,
)

BATCH = 100
RABBITMQ_SCRIPTS = (Path("/usr/lib/rabbitmq/bin/rabbitmq-server"),)
CONFIRM_TIMEOUT_S = 30
STREAM_MAXLEN = 200_000  # trimmed approximately, as a stream with retention would be


class FsyncRedis(EmbeddedRedis):
    """A dedicated ``redis-server`` that fsyncs its append-only file before every reply."""

    def __init__(self, data_dir: Path, log_dir: Path, port: int) -> None:
        fsync_always = ("--appendfsync", "always", "--auto-aof-rewrite-percentage", "0")
        super().__init__(data_dir, log_dir, port, extra_args=fsync_always, name="redis-peer")

    def version(self) -> str:
        """``redis-server --version``, shortened."""
        out = subprocess.run(
            [redis_binary(), "--version"], capture_output=True, text=True, check=False
        ).stdout
        found = re.search(r"v=(\S+)", out)
        return found.group(1) if found else "?"


def redis_missing() -> str | None:
    """Why the Redis peer cannot run, or None."""
    try:
        redis_binary()
    except (ServiceError, ImportError) as exc:
        return f"redis-server not found ({exc})"
    return None


async def redis_streams(
    port: int, payloads: list[str], clients: int, duration_s: float, warmup_s: float
) -> dict[str, Throughput]:
    """XADD batched 100 per pipeline, then single XADDs, each with ``clients`` connections.

    Commands are packed once up front, as QueueCore's request bodies are encoded once, so the
    Python client spends its time on the round trip rather than on re-encoding.
    """
    from redis.asyncio import Connection

    conns = [Connection(host=HOST, port=port) for _ in range(clients)]
    for conn in conns:
        await conn.connect()
    pipelines = _packed_xadds(conns[0], payloads, BATCH)
    singles = _packed_xadds(conns[0], payloads, 1)
    cursor = [0] * clients

    def sender(packed: list[list[bytes]], size: int) -> Send:
        async def send(index: int) -> int:
            cursor[index] += 1
            conn = conns[index]
            await conn.send_packed_command(packed[(cursor[index] + index) % len(packed)], False)
            for _ in range(size):
                await conn.read_response()
            return size

        return send

    try:
        return {
            "batched": await closed_loop(sender(pipelines, BATCH), clients, duration_s, warmup_s),
            "single": await closed_loop(sender(singles, 1), clients, duration_s, warmup_s),
        }
    finally:
        for conn in conns:
            await conn.disconnect()


def _packed_xadds(conn: Any, payloads: list[str], size: int) -> list[list[bytes]]:
    """Wire-ready pipelines of ``size`` XADDs each, cycling through every payload."""
    commands = [
        ("XADD", "bench", "MAXLEN", "~", STREAM_MAXLEN, "*", "data", p.encode()) for p in payloads
    ]
    return [
        conn.pack_commands(commands[start : start + size])
        for start in range(0, len(commands) - size + 1, size)
    ]


def run_selected(
    names: tuple[str, ...],
    selected: tuple[str, ...],
    run: Callable[[str], dict[str, Any]],
    step: Callable[[str], None],
) -> dict[str, Any]:
    """``run(name)`` for each selected, installed peer; a status saying why for the others."""
    out: dict[str, Any] = {}
    for name in names:
        if name not in selected:
            out[name] = {"status": "not selected"}
            continue
        missing = redis_missing() if name == "redis" else rabbitmq_missing()
        if missing:
            out[name] = {"status": "not installed", "reason": missing}
            step(f"peer {name}: not installed ({missing})")
            continue
        out[name] = run(name)
    return out


def rabbitmq_missing() -> str | None:
    """Why the RabbitMQ peer cannot run, or None."""
    if _rabbitmq_script() is None:
        return "rabbitmq-server not installed"
    if shutil.which("epmd") is None:
        return "epmd (Erlang) not installed"
    try:
        import pika  # noqa: F401
    except ImportError:
        return "python client pika not installed"
    return None


def _rabbitmq_script() -> Path | None:
    # Debian's /usr/sbin/rabbitmq-server switches to the rabbitmq user and drops our environment;
    # the script it wraps honours RABBITMQ_* variables.
    for candidate in RABBITMQ_SCRIPTS:
        if candidate.exists():
            return candidate
    found = shutil.which("rabbitmq-server")
    return Path(found) if found else None


@dataclass
class RabbitNode:
    """A private single RabbitMQ node (own epmd, ports, data and cookie under ``root``)."""

    root: Path
    port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        """Output of the node."""
        return self.root / "rabbitmq.log"

    def env(self, epmd_port: int) -> dict[str, str]:
        """The variables that keep this node away from any system RabbitMQ."""
        base = self.root
        return {
            **os.environ,
            "HOME": str(base),  # the Erlang cookie lives there
            "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.port + 1),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "ERL_EPMD_PORT": str(epmd_port),
        }

    def start(self, timeout_s: float = 90) -> None:
        """Start epmd and the node, then wait until AMQP accepts a connection."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "enabled_plugins").write_text("[].\n")
        (self.root / "rabbitmq.conf").write_text("loopback_users = none\n")
        self.port = free_port_block(2)
        epmd_port = free_port_block()
        env = self.env(epmd_port)
        self._spawn(["epmd", "-port", str(epmd_port)], env)
        script = _rabbitmq_script()
        assert script is not None
        node = self._spawn([str(script)], env)
        wait_until(self._accepts, timeout_s, "RabbitMQ", node, self.log_path)

    def _spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        self.processes.append(proc)
        return proc

    def _accepts(self) -> bool:
        import pika

        params = pika.ConnectionParameters(HOST, self.port, connection_attempts=1)
        pika.BlockingConnection(params).close()
        return True

    def version(self) -> str:
        """The node's version, from its start-up log."""
        found = re.search(r"RabbitMQ (\d+\.\d+\.\d+)", self.log_path.read_text(errors="replace"))
        return found.group(1) if found else "?"

    def stop(self) -> None:
        """Stop the node, then epmd; SIGKILL what outlives its grace period."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        self.processes.clear()


class ConfirmingPublisher:
    """One AMQP connection whose channel is in confirm mode, driven by the asyncio loop."""

    def __init__(self, port: int, queue: str) -> None:
        self.port = port
        self.queue = queue
        self.channel: Any = None
        self.connection: Any = None
        self._tag = 0
        self._outstanding: set[int] = set()
        self._nacked = 0
        self._drained: asyncio.Future[None] | None = None

    async def open(self) -> None:
        """Connect, open a channel, enable confirms, declare the quorum queue."""
        import pika
        from pika.adapters.asyncio_connection import AsyncioConnection

        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Any] = loop.create_future()
        self.connection = AsyncioConnection(
            pika.ConnectionParameters(HOST, self.port),
            on_open_callback=opened.set_result,
            on_open_error_callback=lambda _c, exc: opened.set_exception(RuntimeError(str(exc))),
            on_close_callback=self._on_closed,
            custom_ioloop=loop,
        )
        await opened
        self.channel = await _callback(lambda cb: self.connection.channel(on_open_callback=cb))
        await _callback(
            lambda cb: self.channel.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=cb
            )
        )
        await _callback(
            lambda cb: self.channel.queue_declare(
                self.queue, durable=True, arguments={"x-queue-type": "quorum"}, callback=cb
            )
        )

    async def publish(self, bodies: list[bytes]) -> int:
        """Publish ``bodies`` persistently and wait until the broker confirmed every one."""
        import pika

        properties = pika.BasicProperties(delivery_mode=2)
        for body in bodies:
            self.channel.basic_publish("", self.queue, body, properties)
            self._tag += 1
            self._outstanding.add(self._tag)
        self._drained = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(self._drained, CONFIRM_TIMEOUT_S)
        if self._nacked:
            self._nacked = 0
            raise RuntimeError("broker nacked a publish")
        return len(bodies)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        if method.NAME == "Basic.Nack":
            self._nacked += 1
        if method.multiple:
            self._outstanding = {t for t in self._outstanding if t > method.delivery_tag}
        else:
            self._outstanding.discard(method.delivery_tag)
        if not self._outstanding and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _on_closed(self, _connection: Any, reason: Exception) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(RuntimeError(f"connection closed: {reason}"))

    async def close(self) -> None:
        """Close the connection."""
        if self.connection is not None and not self.connection.is_closed:
            self.connection.close()
            await asyncio.sleep(0.05)


async def _callback(start: Any) -> Any:
    """Await a pika operation that reports completion through a callback."""
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def finish(result: Any) -> None:
        if not done.done():
            done.set_result(result)

    start(finish)
    return await done


async def rabbitmq_quorum(
    port: int, payloads: list[str], clients: int, duration_s: float, warmup_s: float
) -> dict[str, Throughput]:
    """Confirms per 100 messages, then confirm per message, over ``clients`` connections."""
    bodies = [p.encode() for p in payloads]
    return {
        "batched": await _rabbit_phase(
            port, "bench.batched", bodies, BATCH, clients, duration_s, warmup_s
        ),
        "single": await _rabbit_phase(
            port, "bench.single", bodies, 1, clients, duration_s, warmup_s
        ),
    }


async def _rabbit_phase(
    port: int,
    queue: str,
    bodies: list[bytes],
    size: int,
    clients: int,
    duration_s: float,
    warmup_s: float,
) -> Throughput:
    publishers = [ConfirmingPublisher(port, queue) for _ in range(clients)]
    cursor = [0] * clients
    try:
        for publisher in publishers:
            await publisher.open()

        async def send(index: int) -> int:
            start = cursor[index] * clients + index
            cursor[index] += 1
            chunk = [bodies[(start * size + i) % len(bodies)] for i in range(size)]
            return await publishers[index].publish(chunk)

        return await closed_loop(send, clients, duration_s, warmup_s)
    finally:
        for publisher in publishers:
            await publisher.close()
