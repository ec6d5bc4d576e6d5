"""The ``queuecore`` command: dev, serve, worker, beat, pusher, migrate, tenants, spark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from core import settings
from core.settings import SettingsError


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    http = settings.http()
    settings.database()
    settings.object_store()
    settings.redis()
    settings.webhooks()
    settings.telemetry()  # exported from each server process (control_plane.app)

    settings.writer()
    settings.meter()
    settings.mail()  # invitations and password resets (core.mail)
    settings.signup_open()
    settings.kafka()
    stop = settings.shutdown()
    workers = args.workers or http.workers
    uvicorn.run(
        "infra.serve:create_server_app",  # the HTTP app with the Kafka listener beside it
        factory=True,
        host=http.host,
        port=http.port,
        workers=workers,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        timeout_graceful_shutdown=stop.timeout_s,  # counted from the drain's end (shutdown.py)
        http="control_plane.edge.http_limits:BoundedHttpToolsProtocol",  # bounded request heads
    )
    return 0


def _worker(args: argparse.Namespace) -> int:
    from infra.celery_app import celery_app

    settings.database()
    settings.webhooks()
    settings.telemetry()  # exported from each pool process (infra.celery_app)
    argv = ["worker", "--loglevel", settings.logs().level, "--concurrency", str(args.concurrency)]
    if args.hostname:
        argv += ["--hostname", args.hostname]
    celery_app().worker_main(argv)
    return 0


def _beat(args: argparse.Namespace) -> int:
    from infra.celery_app import celery_app
    from observability import telemetry

    argv = ["beat", "--loglevel", settings.logs().level]
    if args.schedule:
        argv += ["--schedule", args.schedule]
    telemetry.setup(settings.telemetry(), role="beat")
    try:
        celery_app().start(argv)
    finally:
        telemetry.shutdown()
    return 0


def _pusher(args: argparse.Namespace) -> int:
    from pusher.process import run_pusher

    settings.database()
    settings.object_store()
    settings.webhooks()
    settings.push()
    settings.meter()
    settings.telemetry()
    return run_pusher()


def _migrate(args: argparse.Namespace) -> int:
    from infra import migrate

    url = settings.database().url
    applied = migrate.apply(url)
    print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else ""))
    return 0


def _dev(args: argparse.Namespace) -> int:
    from infra.devstack import run_dev

    return run_dev()


def _tenants(args: argparse.Namespace) -> int:
    from tenants.cli import run

    return run(args)


def _billing(args: argparse.Namespace) -> int:
    from billing.cli import run

    return run(args)


def _spark(args: argparse.Namespace) -> int:
    from spark_pipelines.cli import run

    return run(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "dev": _dev,
    "serve": _serve,
    "worker": _worker,
    "beat": _beat,
    "pusher": _pusher,
    "migrate": _migrate,
    "tenants": _tenants,
    "spark": _spark,
    "billing": _billing,
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="queuecore", description="QueueCore pub/sub broker")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "dev", help="run the whole stack on embedded services (data in QUEUECORE_DATA_DIR)"
    )
    serve = sub.add_parser("serve", help="run the API with a production ASGI server")
    serve.add_argument(
        "--workers", type=int, default=None, help="server processes (QUEUECORE_HTTP_WORKERS)"
    )
    worker = sub.add_parser("worker", help="run a Celery worker")
    worker.add_argument("--concurrency", type=int, default=2)
    worker.add_argument("--hostname", default=None)
    beat = sub.add_parser("beat", help="run Celery beat (one per deployment)")
    beat.add_argument("--schedule", default=None, help="path of beat's schedule file")
    sub.add_parser("pusher", help="deliver push groups to their endpoints (as many as you like)")
    sub.add_parser("migrate", help="apply pending database migrations")
    from tenants.cli import add_tenants_parser  # the operator commands live with their domain

    add_tenants_parser(sub)
    from spark_pipelines.cli import add_spark_parser

    add_spark_parser(sub)
    from billing.cli import add_billing_parser

    add_billing_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``queuecore`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SettingsError as exc:
        print(f"queuecore: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
