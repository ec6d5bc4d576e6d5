"""``queuecore dev``: the whole stack on embedded services, supervised by one process.

One launcher per data directory (an ``flock`` that the kernel releases even after ``kill -9``).
Children die with the launcher (``PR_SET_PDEATHSIG``); the ones a previous launcher recorded in
``run/children.json`` are stopped on start in case they outlived it. A child that exits is
restarted after a backoff (1 s, doubling up to 30 s; back to 1 s once it ran for a minute), and
the stack goes on. Ctrl-C or SIGTERM stops the application processes first, then the services,
and waits for each.

``QUEUECORE_DATABASE_URL`` pointing at the stack's own embedded PostgreSQL (as exported for the
CLI) is the embedded one: it is started, not connected to; another database that cannot be
reached is a one-line error, not a traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from secrets import token_urlsafe
from types import FrameType
from typing import IO
from urllib.parse import urlsplit

import psutil
import psycopg

from core.db import connect
from core.settings import PREFIX, DevStackSettings, HttpSettings
from infra.embedded import (
    HOST,
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedS3,
    EmbeddedService,
    ServiceError,
    die_with_parent,
    require_free,
    wait_until,
)
from infra.mailsink import MailSink, ReceivedMail

BUCKET = "queuecore"
DEV_KAFKA_PORT = 9092  # QUEUECORE_KAFKA_PORT in the dev stack (0 turns the listener off)
RESTART_BASE_S = 1.0
RESTART_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a child that ran this long restarts from the base backoff again
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", ""})
DASHBOARD_PATH = "/dashboard/login"  # the tenant dashboard's sign-in page


class AlreadyRunning(ServiceError):
    """Another launcher holds the data directory."""


class StopRequested(BaseException):
    """SIGINT or SIGTERM arrived; unwinds start-up or the wait loop."""


@dataclass
class ChildRecord:
    """A process the launcher started: enough to recognise it after the launcher died."""

    name: str
    pid: int
    created: float


@dataclass
class Restarts:
    """When a child was started, how often it was restarted in a row, when it is due again."""

    started_at: float = field(default_factory=time.monotonic)
    in_a_row: int = 0
    due_at: float | None = None


@dataclass
class DevStack:
    """Starts, watches and stops the embedded services and QueueCore's own processes."""

    dev: DevStackSettings
    http: HttpSettings
    environ: dict[str, str]
    services: list[EmbeddedService] = field(default_factory=list)
    apps: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    restarts: dict[str, Restarts] = field(default_factory=dict)
    mail_sink: MailSink | None = None
    _commands: dict[str, list[str]] = field(default_factory=dict)
    _env: dict[str, str] = field(default_factory=dict)
    _lock: IO[str] | None = None

    @property
    def logs(self) -> Path:
        """Directory of every child's log."""
        return self.dev.data_dir / "logs"

    @property
    def children_file(self) -> Path:
        """Where the launcher records its children."""
        return self.dev.data_dir / "run" / "children.json"

    def run(self) -> int:
        """Start everything, print where it is, wait for a signal, stop everything."""
        self._acquire()
        previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._stop_leftovers()
            env = self._start_services()
            self._start_apps(env)
            self._banner(env)
            return self._watch()
        except StopRequested:
            print("queuecore dev: stopping…", flush=True)
            return 0
        finally:
            with contextlib.suppress(StopRequested):
                self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._release()

    def _acquire(self) -> None:
        self.dev.data_dir.mkdir(parents=True, exist_ok=True)
        lock = (self.dev.data_dir / "dev.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "unknown"
            lock.close()
            raise AlreadyRunning(
                f"another queuecore dev (pid {owner}) is already running on {self.dev.data_dir}; "
                f"stop it or set {PREFIX}DATA_DIR to another directory"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        self._lock = lock

    def _release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.children_file.unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _stop_leftovers(self) -> None:
        """Stop processes a launcher killed with ``kill -9`` may have left behind."""
        if not self.children_file.exists():
            return
        with contextlib.suppress(ValueError, OSError):
            for item in json.loads(self.children_file.read_text()):
                _kill_if_same(ChildRecord(**item))
        self.children_file.unlink(missing_ok=True)

    def _record(self) -> None:
        procs = [(s.name, s.process) for s in self.services] + list(self.apps.items())
        records = [
            {"name": name, "pid": p.pid, "created": psutil.Process(p.pid).create_time()}
            for name, p in procs
            if p is not None and p.poll() is None
        ]
        self.children_file.parent.mkdir(parents=True, exist_ok=True)
        self.children_file.write_text(json.dumps(records))

    def _start_services(self) -> dict[str, str]:
        env = dict(self.environ)
        self._check_ports(env)
        data = self.dev.data_dir
        if self._is_own_database(env.get(PREFIX + "DATABASE_URL")):
            print(
                f"queuecore dev: {PREFIX}DATABASE_URL names this stack's own PostgreSQL; "
                "starting it",
                flush=True,
            )
            env.pop(PREFIX + "DATABASE_URL")
        elif env.get(PREFIX + "DATABASE_URL"):  # fail before starting anything else
            connect(env[PREFIX + "DATABASE_URL"], connect_timeout_s=3).close()
        if not env.get(PREFIX + "DATABASE_URL"):
            pg = EmbeddedPostgres(data / "postgres", self.logs, self.dev.postgres_port)
            self._start(pg)
            env[PREFIX + "DATABASE_URL"] = pg.url
        if not env.get(PREFIX + "OBJECT_STORE_URL"):
            s3 = EmbeddedS3(data / "s3", self.logs, self.dev.s3_port, BUCKET)
            self._start(s3)
            env[PREFIX + "OBJECT_STORE_URL"] = f"s3://{BUCKET}"
            env[PREFIX + "S3_ENDPOINT_URL"] = s3.endpoint_url
        if not env.get(PREFIX + "REDIS_URL"):
            rd = EmbeddedRedis(data / "redis", self.logs, self.dev.redis_port)
            self._start(rd)
            env[PREFIX + "REDIS_URL"] = rd.url
        if not env.get(PREFIX + "SMTP_HOST"):
            env.update(self._start_mail_sink())
        # A developer's alert receiver listens on this machine; production refuses such URLs.
        env.setdefault(PREFIX + "WEBHOOKS_ALLOW_PRIVATE", "true")
        env.setdefault(PREFIX + "KAFKA_PORT", str(DEV_KAFKA_PORT))  # Kafka clients, as on a broker
        env.setdefault(PREFIX + "SECRETS_KEY", secrets_key(data))  # seals push signing secrets
        from infra import migrate

        migrate.apply(env[PREFIX + "DATABASE_URL"])
        return env

    def _is_own_database(self, url: str | None) -> bool:
        """Whether ``url`` points at the embedded PostgreSQL this stack starts (its port here)."""
        if not url:
            return False
        try:
            parts = urlsplit(url)
            return parts.hostname in LOCAL_HOSTS and parts.port == self.dev.postgres_port
        except ValueError:
            return False

    def _check_ports(self, env: dict[str, str]) -> None:
        require_free(self.http.port, PREFIX + "HTTP_PORT")
        kafka_port = int(env.get(PREFIX + "KAFKA_PORT") or DEV_KAFKA_PORT)
        if kafka_port:
            require_free(kafka_port, PREFIX + "KAFKA_PORT")
        if not env.get(PREFIX + "DATABASE_URL") or self._is_own_database(
            env.get(PREFIX + "DATABASE_URL")
        ):
            require_free(self.dev.postgres_port, PREFIX + "DEV_POSTGRES_PORT")
        if not env.get(PREFIX + "REDIS_URL"):
            require_free(self.dev.redis_port, PREFIX + "DEV_REDIS_PORT")
        if not env.get(PREFIX + "OBJECT_STORE_URL"):
            for port in range(self.dev.s3_port, self.dev.s3_port + 8):
                require_free(port, PREFIX + "DEV_S3_PORT")
        if not env.get(PREFIX + "SMTP_HOST"):
            require_free(self.dev.smtp_port, PREFIX + "DEV_SMTP_PORT")

    def _start_mail_sink(self) -> dict[str, str]:
        """The local SMTP sink: the stack's email is printed here and kept under ``mail/``."""
        print("queuecore dev: starting the mail sink…", flush=True)
        self.mail_sink = MailSink(self.dev.smtp_port, self.dev.data_dir / "mail", _announce_mail)
        self.mail_sink.start()
        return self.mail_sink.env()

    def _start(self, service: EmbeddedService) -> None:
        self.services.append(service)
        print(f"queuecore dev: starting {service.name}…", flush=True)
        service.start()
        self.restarts[service.name] = Restarts()
        self._record()

    def _start_apps(self, env: dict[str, str]) -> None:
        py = [sys.executable, "-m", "infra.cli"]
        schedule = str(self.dev.data_dir / "run" / "celerybeat-schedule")
        commands = {
            "api": [*py, "serve", "--workers", "1"],
            "worker": [
                *py,
                "worker",
                "--concurrency",
                "2",
                "--hostname",
                f"dev@{HOST}-{os.getpid()}",
            ],
            "beat": [*py, "beat", "--schedule", schedule],
            "pusher": [*py, "pusher"],  # delivers push groups (docs/push.md)
        }
        self.logs.mkdir(parents=True, exist_ok=True)
        self._commands, self._env = commands, env
        for name, argv in commands.items():
            self.apps[name] = _spawn_app(argv, env, self.logs / f"{name}.log")
            self.restarts[name] = Restarts()
        self._record()
        url = f"http://{HOST}:{self.http.port}/readyz"
        wait_until(
            lambda: _http_ok(url), 60, "QueueCore API", self.apps["api"], self.logs / "api.log"
        )

    def _banner(self, env: dict[str, str]) -> None:
        lines = banner_lines(self.dev, self.http, env, self.mail_sink is not None)
        print("\n".join(lines), flush=True)

    def _watch(self) -> int:
        """Restart what exits, until a signal (:class:`StopRequested`) ends the stack."""
        while True:
            for service in self.services:
                if service.process is not None and service.process.poll() is not None:
                    code = service.process.returncode
                    self._restart(service.name, code, service.log_path, service.start)
            for name, proc in list(self.apps.items()):
                if proc.poll() is not None:
                    log_path = self.logs / f"{name}.log"
                    respawn = functools.partial(self._respawn, name)
                    self._restart(name, proc.returncode, log_path, respawn)
            time.sleep(0.5)

    def _respawn(self, name: str) -> None:
        log_path = self.logs / f"{name}.log"
        self.apps[name] = _spawn_app(self._commands[name], self._env, log_path)

    def _restart(self, name: str, code: int, log_path: Path, start: Callable[[], None]) -> None:
        """Restart a child that exited once its backoff is over (logged, never fatal)."""
        state = self.restarts.setdefault(name, Restarts())
        now = time.monotonic()
        if state.due_at is None:
            if now - state.started_at >= STABLE_AFTER_S:
                state.in_a_row = 0
            delay_s = min(RESTART_MAX_S, RESTART_BASE_S * 2**state.in_a_row)
            state.due_at = now + delay_s
            _say(f"{name} exited with code {code}; restarting in {delay_s:.0f}s (see {log_path})")
        if now < state.due_at:
            return
        state.due_at, state.in_a_row = None, state.in_a_row + 1
        state.started_at = now
        try:
            start()
        except ServiceError as exc:
            _say(f"{name} did not start again: {exc}")
            return
        _say(f"{name} restarted")
        self._record()

    def _stop_all(self) -> None:
        for proc in self.apps.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.apps.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for service in reversed(self.services):
            service.stop()
        if self.mail_sink is not None:
            self.mail_sink.stop()
        print("queuecore dev: stopped", flush=True)


def secrets_key(data_dir: Path) -> str:
    """The stack's key for secrets at rest: made once, kept in ``DATA_DIR/secrets.key`` (0600),
    so a restarted stack still opens the push secrets it sealed."""
    path = data_dir / "secrets.key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(token_urlsafe(32))
    return path.read_text().strip()


def queuecore_command() -> str:
    """How to run this installation's ``queuecore`` from the current directory
    (``.venv/bin/queuecore`` from a clone's root), so printed commands work without an activated
    virtual environment."""
    script, here = Path(sys.executable).parent / "queuecore", Path.cwd()
    return str(script.relative_to(here)) if script.is_relative_to(here) else str(script)


def banner_lines(
    dev: DevStackSettings, http: HttpSettings, env: dict[str, str], sink: bool = True
) -> list[str]:
    """What ``queuecore dev`` prints once everything is up: where each part is, the ports'
    settings, and commands that run as printed."""
    base, cli = http.public_url, queuecore_command()
    database = env[PREFIX + "DATABASE_URL"]
    objects = env[PREFIX + "OBJECT_STORE_URL"]
    endpoint = env.get(PREFIX + "S3_ENDPOINT_URL", "AWS")
    mail = (
        f"SMTP sink on port {dev.smtp_port}: invitations and password resets are printed here "
        f"and kept in {dev.data_dir / 'mail'}"
        if sink
        else f"sent through {env[PREFIX + 'SMTP_HOST']} (QUEUECORE_SMTP_HOST)"
    )
    return [
        "",
        "QueueCore is running.",
        f"  Dashboard:  {base}{DASHBOARD_PATH}   (sign up there, or sign in)",
        f"  API:        {base}/v1",
        f"  API docs:   {base}/schema",
        f"  Health:     {base}/readyz",
        *_kafka_lines(env),
        f"  PostgreSQL: {database}",
        f"  S3:         endpoint {endpoint}, bucket {urlsplit(objects).netloc} ({objects})",
        f"  Redis:      {env[PREFIX + 'REDIS_URL']}",
        f"  Mail:       {mail}",
        f"  Data:       {dev.data_dir}   (logs in {dev.data_dir / 'logs'})",
        "",
        "Ports (set these before `make dev` to move them):",
        f"  {PREFIX}HTTP_PORT={http.port} {PREFIX}DEV_POSTGRES_PORT={dev.postgres_port} "
        f"{PREFIX}DEV_REDIS_PORT={dev.redis_port}",
        f"  {PREFIX}KAFKA_PORT={env.get(PREFIX + 'KAFKA_PORT', '0')} (0: no Kafka listener)",
        f"  {PREFIX}DEV_S3_PORT={dev.s3_port} (and the 7 after it) "
        f"{PREFIX}DEV_SMTP_PORT={dev.smtp_port}",
        "",
        "Get an API key: create one on the dashboard, or from the command line (it prints the",
        "owner's dashboard password and one key per environment):",
        f"  {PREFIX}DATABASE_URL={database} \\",
        f"    {cli} tenants create-org --name Acme --email you@example.com",
        "",
        "Run a Spark job by hand against this stack:",
        f"  {PREFIX}DATABASE_URL={database} {PREFIX}OBJECT_STORE_URL={objects} \\",
        f"    {PREFIX}S3_ENDPOINT_URL={endpoint} {cli} spark compaction",
        "",
        "Press Ctrl-C to stop.",
    ]


def _kafka_lines(env: dict[str, str]) -> list[str]:
    """Where Kafka clients connect, when the listener is on."""
    port = env.get(PREFIX + "KAFKA_PORT", "0")
    if port == "0":
        return []
    return [
        f"  Kafka:      {HOST}:{port}   (SASL_PLAINTEXT, mechanism PLAIN: any username, an API "
        "key as the password; docs/kafka.md)"
    ]


def _announce_mail(mail: ReceivedMail) -> None:
    """Print a message the sink received: to whom, its subject and its links."""
    lines = [f"queuecore dev: mail to {', '.join(mail.recipients)}: {mail.subject}"]
    lines += [f"    {link}" for link in mail.links]
    print("\n".join(lines), flush=True)


def _say(line: str) -> None:
    print(f"queuecore dev: {line}", file=sys.stderr, flush=True)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopRequested(signum)


def _spawn_app(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )


def _kill_if_same(record: ChildRecord) -> None:
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.created) > 0.01:
            return
        for child in proc.children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(10)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        return


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback URL we built
        return bool(response.status == 200)


def run_dev() -> int:
    """Entry of ``queuecore dev``."""
    try:
        stack = DevStack(DevStackSettings.from_env(), HttpSettings.from_env(), dict(os.environ))
        return stack.run()
    except ServiceError as exc:
        print(f"queuecore dev: {exc}", file=sys.stderr, flush=True)
        return 1
    except psycopg.OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"queuecore dev: cannot reach the database of {PREFIX}DATABASE_URL ({first_line}); "
            f"unset it to use the embedded PostgreSQL",
            file=sys.stderr,
            flush=True,
        )
        return 1
