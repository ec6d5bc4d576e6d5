"""Rolling restarts from a client's side: restartable replicas, a client-side load balancer, and
producers and consumers that record what they were answered.

A :class:`Journal` records every error a client saw (and when, from which replica); a
:class:`Ledger` records what was published, delivered and acked, and flags a delivery of an
offset whose ack the server had already accepted.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from infra.embedded import free_port_block
from tests.support.processes import http_status, queuecore, stop, wait_for

RETRYABLE_CODES = frozenset({"SERVICE_UNAVAILABLE", "PUBLISH_OUTCOME_UNKNOWN"})
CONNECTION_ERRORS = (
    httpx.ConnectError,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)
RETRY_PAUSE_S = 0.05
WINDOW_GRACE_S = 2.0  # after a restarted replica is ready, clients may still be switching back


class ServeReplica:
    """One single-worker ``queuecore serve`` process on a port of its own, restartable."""

    def __init__(self, name: str, env: dict[str, str], logs: Path) -> None:
        self.name = name
        port = free_port_block()
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**env, "QUEUECORE_HTTP_PORT": str(port)}
        self.log = logs / f"serve-{name}.log"
        self.process: Any = None

    def start(self) -> None:
        """Start the process (not waiting for it)."""
        self.process = queuecore(["serve", "--workers", "1"], self.env, self.log)

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Until ``/readyz`` answers 200."""
        wait_for(
            lambda: http_status(f"{self.url}/readyz") == 200,
            timeout_s,
            f"replica {self.name} ready",
            self.process,
            self.log,
        )

    def readyz(self) -> tuple[int | None, str]:
        """Status and error message of ``/readyz`` (None when nothing answers)."""
        try:
            response = httpx.get(f"{self.url}/readyz", timeout=2)
        except httpx.HTTPError:
            return None, ""
        body = response.json()
        return response.status_code, str(body.get("error", {}).get("message", ""))

    def sigterm(self) -> None:
        """Send SIGTERM (a rolling restart's stop)."""
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not go."""
        if self.process is not None:
            stop(self.process)


@dataclass
class Journal:
    """Every error clients saw, when and from where, and the restart windows of each replica."""

    started: float = field(default_factory=time.monotonic)
    errors: list[tuple[float, str, str]] = field(default_factory=list)  # (t, url, what)
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # a client thread that died
    _open: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        """Seconds since the journal started."""
        return time.monotonic() - self.started

    def saw(self, url: str, what: str) -> None:
        """A client saw ``what`` (an error) from ``url``."""
        with self._lock:
            self.errors.append((self.now(), url, what))

    def window_opens(self, url: str) -> None:
        """``url`` is being restarted from now on."""
        self._open[url] = self.now()

    def window_closes(self, url: str) -> None:
        """``url`` is ready again (clients may take a moment to notice)."""
        start = self._open.pop(url)
        self.windows.setdefault(url, []).append((start, self.now() + WINDOW_GRACE_S))

    def outside_windows(self) -> list[tuple[float, str, str]]:
        """Errors that no restart of their replica explains."""
        return [
            (t, url, what)
            for t, url, what in self.errors
            if not any(start <= t <= end for start, end in self.windows.get(url, []))
        ]

    def unexpected(self) -> list[tuple[float, str, str]]:
        """Errors other than documented 503s, connection errors and the drain's stream end."""
        allowed = ("connection:", "503 ", "stream-end SERVICE_UNAVAILABLE")
        return [e for e in self.errors if not e[2].startswith(allowed) or "unexpected" in e[2]]


@dataclass
class Ledger:
    """What producers stored and consumers were delivered and had acked."""

    published: dict[str, tuple[int, int]] = field(default_factory=dict)  # key → (p, o)
    published_at: list[float] = field(default_factory=list)
    delivered: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # (p, o) → data ids
    deliveries: int = 0
    acked: set[tuple[int, int]] = field(default_factory=set)
    after_ack: list[tuple[int, int]] = field(default_factory=list)  # delivered after its ack
    mismatched: list[str] = field(default_factory=list)  # a retried key answered elsewhere
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def store(self, key: str, partition: int, offset: int, at: float) -> None:
        """A publish of ``key`` was answered 2xx with this place."""
        with self._lock:
            before = self.published.setdefault(key, (partition, offset))
            if before != (partition, offset):
                self.mismatched.append(key)
            self.published_at.append(at)

    def deliver(self, messages: list[dict[str, Any]]) -> None:
        """Messages were delivered to a consumer."""
        with self._lock:
            for message in messages:
                place = (message["partition"], message["offset"])
                self.deliveries += 1
                if place in self.acked:
                    self.after_ack.append(place)
                self.delivered.setdefault(place, set()).add(message["data"]["id"])

    def ack(self, places: list[tuple[int, int]]) -> None:
        """The server accepted the acks of these messages."""
        with self._lock:
            self.acked.update(places)

    def missing(self) -> list[str]:
        """Keys answered 2xx whose message was not delivered with its data and acked."""
        with self._lock:
            return [
                key
                for key, place in self.published.items()
                if place not in self.acked or key not in self.delivered.get(place, set())
            ]


class Balancer:
    """A client-side load balancer: the preferred replica first; after a connection error, a
    503 or a stream ended by a drain, the next one, retrying the same request."""

    def __init__(
        self, urls: list[str], headers: dict[str, str], journal: Journal, start: int = 0
    ) -> None:
        self.clients = [
            httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(30, connect=2))
            for url in urls
        ]
        self.preferred = start % len(urls)
        self.journal = journal

    def url(self) -> str:
        """The preferred replica's base URL."""
        return str(self.clients[self.preferred].base_url)

    def switch(self) -> None:
        """Prefer the next replica."""
        self.preferred = (self.preferred + 1) % len(self.clients)

    def request(
        self, method: str, path: str, body: Any = None, deadline_s: float = 60
    ) -> httpx.Response:
        """The first answer other than a 503 or a connection error, whichever replica gave it."""
        deadline = time.monotonic() + deadline_s
        while True:
            url = self.url()
            try:
                response = self.clients[self.preferred].request(method, path, json=body)
            except CONNECTION_ERRORS as exc:
                last = path.rstrip("/").rsplit("/", 1)[-1]
                self.journal.saw(url, f"connection: {type(exc).__name__} ({method} …/{last})")
            else:
                if response.status_code != 503:
                    return response
                code = error_code(response)
                tag = "" if code in RETRYABLE_CODES else " unexpected"
                self.journal.saw(url, f"503 {code}{tag}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{method} {path}: no replica answered in {deadline_s}s")
            self.switch()
            time.sleep(RETRY_PAUSE_S)

    def close(self) -> None:
        """Close every connection."""
        for client in self.clients:
            client.close()


def error_code(response: httpx.Response) -> str:
    """The ``error.code`` of an error body, or the status when there is none."""
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return str(response.status_code)


class SseReader:
    """Stream bytes in, ``(event type, JSON data)`` out; keeps the last ``retry:`` seen."""

    def __init__(self) -> None:
        self._rest = b""
        self._fields: dict[str, str] = {}
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[tuple[str, Any]]:
        """The events ``chunk`` completes."""
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        out = []
        for raw in lines:
            line = raw.rstrip(b"\r").decode()
            if not line:
                if "data" in self._fields:
                    out.append(
                        (self._fields.get("event", "message"), json.loads(self._fields["data"]))
                    )
                self._fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "retry":
                    self.retry_ms = int(value)
                else:
                    self._fields[name] = value
        return out


@dataclass
class Load:
    """The clients of one topic and group, run by threads until :meth:`finish`."""

    urls: list[str]
    headers: dict[str, str]
    topic: str
    group: str
    journal: Journal = field(default_factory=Journal)
    ledger: Ledger = field(default_factory=Ledger)
    stopping: threading.Event = field(default_factory=threading.Event)
    producers_stopping: threading.Event = field(default_factory=threading.Event)
    retry_ms_seen: set[int] = field(default_factory=set)
    stream_ends: list[tuple[float, str]] = field(default_factory=list)  # (t, url) of drain ends
    _threads: list[threading.Thread] = field(default_factory=list)
    _stream_threads: set[str] = field(default_factory=set)

    def balancer(self, start: int = 0) -> Balancer:
        """A balancer of this load's replicas, starting with replica ``start``."""
        return Balancer(self.urls, self.headers, self.journal, start)

    def run(self, name: str, work: Callable[[Balancer], None], start: int = 0) -> None:
        """Run ``work`` in a thread; an exception it raises is a failure of the test."""

        def guarded() -> None:
            balancer = self.balancer(start)
            try:
                work(balancer)
            except Exception as exc:
                if not self.stopping.is_set():
                    self.journal.failures.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                balancer.close()

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def produce(self, name: str, batch: int, pause_s: float) -> Callable[[Balancer], None]:
        """Publish singles and batches of ``batch``, alternately, with idempotency keys."""

        def work(balancer: Balancer) -> None:
            for n in range(1_000_000):
                if self.producers_stopping.is_set() or self.stopping.is_set():
                    return
                keys = [f"{name}-{n}"] if n % 2 == 0 else [f"{name}-{n}-{i}" for i in range(batch)]
                self._publish(balancer, keys)
                time.sleep(pause_s)

        return work

    def _publish(self, balancer: Balancer, keys: list[str]) -> None:
        topic = f"/v1/topics/{self.topic}/messages"
        messages = [{"data": {"id": key}, "idempotencyKey": key} for key in keys]
        if len(keys) == 1:
            response = balancer.request("POST", topic, messages[0])
            places = [response.json()] if response.status_code == 201 else []
        else:
            response = balancer.request("POST", f"{topic}/batch", {"messages": messages})
            places = response.json()["results"] if response.status_code == 201 else []
        if response.status_code != 201:
            self.journal.saw(balancer.url(), f"publish {response.status_code} unexpected")
            return
        at = self.journal.now()
        for key, place in zip(keys, places, strict=True):
            self.ledger.store(key, place["partition"], place["offset"], at)

    def pull(self, member: str, wait_ms: int) -> Callable[[Balancer], None]:
        """Long-poll as ``member`` and ack what came, until stopped."""
        path = f"/v1/topics/{self.topic}/groups/{self.group}/members/{member}/pull"

        def work(balancer: Balancer) -> None:
            while not self.stopping.is_set():
                response = balancer.request("POST", path, {"maxMessages": 50, "waitMs": wait_ms})
                if response.status_code != 200:
                    self.journal.saw(balancer.url(), f"pull {error_code(response)} unexpected")
                    time.sleep(RETRY_PAUSE_S)
                    continue
                self._consume(balancer, response.json()["messages"])

        return work

    def stream(self, member: str) -> Callable[[Balancer], None]:
        """Read ``member``'s SSE stream, acking each chunk's messages; reconnect when it ends."""
        path = f"/v1/topics/{self.topic}/groups/{self.group}/members/{member}/stream"

        def work(balancer: Balancer) -> None:
            self._stream_threads.add(threading.current_thread().name)
            while not self.stopping.is_set():
                self._stream_once(balancer, path)

        return work

    def _stream_once(self, balancer: Balancer, path: str) -> None:
        url, client = balancer.url(), balancer.clients[balancer.preferred]
        try:
            with client.stream("GET", path) as response:
                if response.status_code != 200:
                    response.read()
                    code, status = error_code(response), response.status_code
                    tag = "" if status == 503 and code in RETRYABLE_CODES else " unexpected"
                    self.journal.saw(url, f"{status} {code}{tag}")
                    balancer.switch()
                    time.sleep(RETRY_PAUSE_S)
                    return
                self._read_stream(balancer, url, response)
        except CONNECTION_ERRORS as exc:
            if not self.stopping.is_set():
                self.journal.saw(url, f"connection: {type(exc).__name__} (GET …/stream)")
                balancer.switch()
                time.sleep(RETRY_PAUSE_S)

    def _read_stream(self, balancer: Balancer, url: str, response: httpx.Response) -> None:
        reader = SseReader()
        for chunk in response.iter_bytes():
            if self.stopping.is_set():
                return
            events = reader.feed(chunk)
            if reader.retry_ms is not None:
                self.retry_ms_seen.add(reader.retry_ms)
            self._consume(balancer, [data for kind, data in events if kind == "message"])
            for kind, data in events:
                if kind == "error":
                    self._stream_ended(balancer, url, data)
                    return
        self.journal.saw(url, "stream closed without its end event: unexpected")
        balancer.switch()

    def _stream_ended(self, balancer: Balancer, url: str, data: dict[str, Any]) -> None:
        expected = data.get("code") == "SERVICE_UNAVAILABLE" and "reconnect" in data.get(
            "message", ""
        )
        self.journal.saw(
            url, f"stream-end {data.get('code')}" + ("" if expected else " unexpected")
        )
        self.stream_ends.append((self.journal.now(), url))
        balancer.switch()

    def _consume(self, balancer: Balancer, messages: list[dict[str, Any]]) -> None:
        """Record a batch of deliveries and ack it through the balancer."""
        if not messages:
            return
        self.ledger.deliver(messages)
        by_ack = {m["ackId"]: (m["partition"], m["offset"]) for m in messages}
        path = f"/v1/topics/{self.topic}/groups/{self.group}/ack"
        response = balancer.request("POST", path, {"ackIds": list(by_ack)})
        if response.status_code != 200:
            self.journal.saw(balancer.url(), f"ack {error_code(response)} unexpected")
            return
        self.ledger.ack([by_ack[ack_id] for ack_id in response.json()["acked"]])
        if response.json()["rejected"]:
            self.journal.saw(balancer.url(), f"ack rejected unexpected {response.json()}")

    def finish(self, timeout_s: float = 10) -> None:
        """Stop the client threads and wait for those that make requests; a stream's reader
        ends at its next keep-alive, or when its replica stops (it records nothing more)."""
        self.stopping.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread.name not in self._stream_threads:
                thread.join(max(deadline - time.monotonic(), 0))

    def stop_producing(self, producers: list[str]) -> None:
        """Stop the producer threads (named ``producers``; the consumers go on)."""
        self.producers_stopping.set()
        for thread in self._threads:
            if thread.name in producers:
                thread.join(30)
