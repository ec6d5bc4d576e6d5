"""``queuecore tenants …``: operator commands over the tenancy services, printing JSON.

Each command runs the same async services as the API, in one transaction on its own
connection to ``QUEUECORE_DATABASE_URL``. A domain error prints one line on stderr and exits 1.
Services are imported inside the commands: ``queuecore`` builds this parser for every
sub-command, and importing them (argon2, psycopg) would slow ``serve`` and ``worker`` start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.errors import QueueCoreError, ValidationFailed
from core.settings import SettingsError

if TYPE_CHECKING:
    from tenants.models import ApiKey, IssuedKey, Organisation, Project
    from tenants.service import Conn

Command = Callable[[argparse.Namespace, "Conn"], Awaitable[dict[str, Any]]]
TIER_CHOICES = ("developer", "pro", "enterprise")
GENERATED_PASSWORD_BYTES = 18


def add_tenants_parser(sub: Any) -> None:
    """Register ``tenants`` and its sub-commands on the ``queuecore`` parser."""
    tenants = sub.add_parser("tenants", help="manage organisations, projects, keys and tiers")
    commands = tenants.add_subparsers(dest="tenants_command", required=True)
    org = commands.add_parser(
        "create-org",
        help="create an organisation with its owner, a default project and a key per environment",
    )
    org.add_argument("--name", required=True)
    org.add_argument("--email", required=True, help="the owner's email (login)")
    org.add_argument("--tier", choices=TIER_CHOICES, default="developer")
    org.add_argument(
        "--password", default=None, help="owner password; generated and printed once if omitted"
    )
    org.add_argument("--project", default="default", help="name of the first project")
    project = commands.add_parser(
        "create-project",
        help="create a project with its three environments and, unless --no-keys, a key for each",
    )
    project.add_argument("--org", required=True, help="organisation id (org_…)")
    project.add_argument("--name", required=True)
    project.add_argument(
        "--no-keys", action="store_true", help="do not issue a key per environment"
    )
    key = commands.add_parser("create-key", help="issue an API key; the secret is printed once")
    key.add_argument("--env", required=True, help="environment id (env_…)")
    key.add_argument("--scopes", default=None, help="comma-separated: publish,consume,admin (all)")
    key.add_argument("--name", default="")
    key.add_argument("--expires-at", default=None, help="ISO 8601 time; UTC when no offset")
    revoke = commands.add_parser("revoke-key", help="revoke an API key of an environment")
    revoke.add_argument("--env", required=True, help="environment id (env_…)")
    revoke.add_argument("--key", required=True, help="key id (key_…)")
    tier = commands.add_parser(
        "set-tier",
        help="change an organisation's tier; applied on the next request (with "
        "QUEUECORE_REDIS_URL set; else when the API's cached limits expire, within 30 s)",
    )
    tier.add_argument("--org", required=True, help="organisation id (org_…)")
    tier.add_argument("--tier", choices=TIER_CHOICES, required=True)
    tier.add_argument(
        "--limits",
        default=None,
        help="enterprise custom limits as JSON, e.g. '{\"publish_per_s\": 5000}'",
    )
    commands.add_parser("list", help="organisations with their tier and project count")
    from tenants.team.cli import add_team_commands

    add_team_commands(commands)


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``tenants`` sub-command; settings errors propagate (exit 2 upstream)."""
    from core import settings

    database_url = settings.database().url
    redis_url = _tier_redis_url() if args.tenants_command == "set-tier" else None
    command = COMMANDS[args.tenants_command]
    try:
        _check_names(args)
    except ValidationFailed as exc:
        print(f"queuecore tenants: {exc.message}; nothing was written", file=sys.stderr)
        return 2
    try:
        output = asyncio.run(_in_transaction(database_url, redis_url, command, args))
    except QueueCoreError as exc:
        print(f"queuecore tenants: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # psycopg's OperationalError and socket errors
        print(f"queuecore tenants: database unavailable: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(output, indent=2, default=_json_default))
    return 0


async def _in_transaction(
    database_url: str, redis_url: str | None, command: Command, args: argparse.Namespace
) -> dict[str, Any]:
    import psycopg

    from core.db import Connector

    try:
        async with Connector(database_url).connection() as conn, conn.transaction():
            output = await command(args, conn)
    except psycopg.OperationalError as exc:
        raise OSError(_one_line(exc)) from exc
    if "_mail" in output:  # after the commit: an email never announces a rolled-back change
        output["emailed"] = await _send_mail(output.pop("_mail"))
    if args.tenants_command == "set-tier":
        applied = redis_url is not None and await _publish_tier(redis_url, output["organisation"])
        output["appliedNow"] = applied
    return output


async def _send_mail(message: Any) -> bool:
    """Email through ``QUEUECORE_SMTP_*``; a note on stderr (the link is printed) when not."""
    from core import settings
    from core.mail import MailNotSent, mailer

    try:
        await mailer(settings.mail()).send(message)
    except MailNotSent as exc:
        print(f"queuecore tenants: note: {exc.message} Pass the link on yourself.", file=sys.stderr)
        return False
    return True


def _check_names(args: argparse.Namespace) -> None:
    """Names are checked before connecting: a bad one is a usage error (exit 2)."""
    from tenants.service import check_name

    if args.tenants_command == "create-org":
        check_name(args.name, "--name (the organisation name)")
        check_name(args.project, "--project (the first project's name)")
    elif args.tenants_command == "create-project":
        check_name(args.name, "--name (the project name)")


def _tier_redis_url() -> str | None:
    """Redis, where ``set-tier`` pushes the new limits; without it they apply on cache expiry."""
    from core import settings
    from tenants.rate_limits import LIMITS_TTL_S

    try:
        return settings.redis().url
    except SettingsError as exc:
        print(
            f"queuecore tenants: note: no Redis ({exc}); the tier is saved in PostgreSQL and "
            f"each API replica applies it when its cached limits expire (at most "
            f"{LIMITS_TTL_S} s). Set QUEUECORE_REDIS_URL to apply it on the next request.",
            file=sys.stderr,
        )
        return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


async def _create_org(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service
    from tenants.team import audit

    password = args.password or secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    made = await service.create_organisation(
        conn, args.name, args.email, password, tier=args.tier, project_name=args.project
    )
    organisation = made.organisation
    await audit.record(conn, organisation.id, audit.OPERATOR, "organisation.created", args.name)
    owner: dict[str, Any] = {"id": made.owner_id, "email": made.owner_email}
    if args.password is None:
        owner["password"] = password  # generated: this is the only time anyone sees it
    return {
        "organisation": _organisation(made.organisation),
        "owner": owner,
        **_project(made.project, made.keys),
    }


async def _create_project(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service

    project = await service.create_project(conn, args.org, args.name)
    issued = (
        {}
        if args.no_keys
        else {
            env.name: await service.create_key(conn, env.id, name="default")
            for env in project.environments
        }
    )
    return _project(project, issued)


async def _create_key(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service

    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()] if args.scopes else None
    issued = await service.create_key(
        conn,
        args.env,
        name=args.name,
        scopes=scopes,
        expires_at=_parse_time(args.expires_at),
    )
    await _audit_key(conn, args.env, "key.created", issued.key)
    return {**_key(issued.key), "key": issued.secret}


async def _revoke_key(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service

    key = await service.revoke_key(conn, args.env, args.key)
    await _audit_key(conn, args.env, "key.revoked", key)
    return _key(key)


async def _audit_key(conn: Conn, environment_id: str, action: str, key: ApiKey) -> None:
    from tenants.access import organisation_of_environment
    from tenants.team import audit

    organisation_id = await organisation_of_environment(conn, environment_id)
    target = f"{key.id} ({environment_id})"
    await audit.record(conn, organisation_id, audit.OPERATOR, action, target, hint=key.hint)


async def _set_tier(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service

    custom = _parse_limits(args.limits)
    organisation = await service.set_tier(conn, args.org, args.tier, custom)
    return {"organisation": _organisation(organisation)}


async def _list(args: argparse.Namespace, conn: Conn) -> dict[str, Any]:
    from tenants import service

    rows = await service.list_organisations(conn)
    return {
        "organisations": [
            {
                "id": row["id"],
                "name": row["name"],
                "tier": row["tier"],
                "customLimits": row["custom_limits"],
                "projectCount": row["project_count"],
                "createdAt": row["created_at"],
            }
            for row in rows
        ]
    }


async def _publish_tier(redis_url: str, organisation: dict[str, Any]) -> bool:
    """Push the committed limits to Redis so every replica applies them on its next request."""
    from redis.exceptions import RedisError

    from core.redis_client import redis_client
    from tenants import rate_limits
    from tenants.tiers import Limits

    redis = redis_client(redis_url)
    try:
        async with asyncio.timeout(5):  # the client would otherwise retry for a long while
            limits = Limits(**organisation["limits"])
            await rate_limits.publish_limits(redis, organisation["id"], limits)
        return True
    except (RedisError, OSError) as exc:
        print(
            f"queuecore tenants: warning: Redis unreachable ({_one_line(exc)}); the new tier "
            f"applies once the API's cached limits expire (at most {rate_limits.LIMITS_TTL_S} s)",
            file=sys.stderr,
        )
        return False
    finally:
        await redis.aclose()


def _parse_time(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise ValidationFailed(
            f"--expires-at is not an ISO 8601 time: {raw!r}", field="expiresAt"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _parse_limits(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        limits = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"--limits is not valid JSON: {exc}", field="limits") from None
    if not isinstance(limits, dict):
        raise ValidationFailed("--limits must be a JSON object", field="limits")
    return limits


def _organisation(organisation: Organisation) -> dict[str, Any]:
    return {
        "id": organisation.id,
        "name": organisation.name,
        "tier": organisation.tier,
        "customLimits": organisation.custom_limits,
        "limits": organisation.limits.as_dict(),
    }


def _project(project: Project, issued: dict[str, IssuedKey]) -> dict[str, Any]:
    """The project, its environments by name, and the secrets of new keys by environment."""
    environments = {
        env.name: {
            "id": env.id,
            **({"keyId": issued[env.name].key.id} if env.name in issued else {}),
        }
        for env in project.environments
    }
    return {
        "project": {"id": project.id, "name": project.name},
        "environments": environments,
        "keys": {name: key.secret for name, key in issued.items()},
    }


def _key(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "environmentId": key.environment_id,
        "name": key.name,
        "hint": key.hint,
        "scopes": list(key.scopes),
        "createdAt": key.created_at,
        "expiresAt": key.expires_at,
        "revokedAt": key.revoked_at,
        "status": "revoked" if key.revoked_at else "active",
    }


def _team_commands() -> dict[str, Command]:
    from tenants.team.cli import TEAM_COMMANDS

    return dict(TEAM_COMMANDS)


COMMANDS: dict[str, Command] = {
    "create-org": _create_org,
    "create-project": _create_project,
    "create-key": _create_key,
    "revoke-key": _revoke_key,
    "set-tier": _set_tier,
    "list": _list,
    **_team_commands(),
}
