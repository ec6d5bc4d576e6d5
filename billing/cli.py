"""``queuecore billing …``: issue a month's invoices, or a credit note, printing JSON.

The same service as the Celery task and the API (:class:`billing.service.Billing`), on
autocommit connections to ``QUEUECORE_DATABASE_URL`` (each document is issued in its own
transaction). A domain error
prints one line on stderr and exits 1. Services are imported inside the commands, so building
the ``queuecore`` parser stays cheap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.errors import QueueCoreError

if TYPE_CHECKING:
    from billing.service import Billing

Command = Callable[[argparse.Namespace, "Billing"], Coroutine[Any, Any, dict[str, Any]]]


def add_billing_parser(sub: Any) -> None:
    """Register ``billing`` and its sub-commands on the ``queuecore`` parser."""
    billing = sub.add_parser("billing", help="issue invoices and credit notes")
    commands = billing.add_subparsers(dest="billing_command", required=True)
    issue = commands.add_parser(
        "issue-invoices",
        help="issue a month's invoices to every billed organisation (idempotent)",
    )
    issue.add_argument("--month", default=None, help="YYYY-MM (default: the previous month)")
    issue.add_argument("--org", default=None, help="only this organisation (org_…)")
    credit = commands.add_parser(
        "credit-note", help="issue a credit note against an invoice (the invoice never changes)"
    )
    credit.add_argument("number", help="the invoice's number, e.g. QC-2026-000001")
    credit.add_argument("--reason", required=True, help="why, printed on the credit note")
    credit.add_argument(
        "--amount-cents", type=int, default=None, help="cents to credit (default: all that is left)"
    )


async def _issue(args: argparse.Namespace, billing: Billing) -> dict[str, Any]:
    from billing import invoicing

    now = datetime.now(UTC)
    month = invoicing.parse_month(args.month) if args.month else invoicing.previous_month(now)
    report = await billing.issue_month(month, now, organisation_id=args.org)
    return report.as_dict()


async def _credit(args: argparse.Namespace, billing: Billing) -> dict[str, Any]:
    import msgspec

    note = await billing.credit_note(
        args.number, args.reason, datetime.now(UTC), amount_cents=args.amount_cents
    )
    return dict(msgspec.to_builtins(note))


COMMANDS: dict[str, Command] = {"issue-invoices": _issue, "credit-note": _credit}


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``billing`` sub-command; settings errors propagate (exit 2 upstream)."""
    from billing.service import Billing
    from core import settings
    from core.db import Connector

    command = COMMANDS[args.billing_command]
    try:
        output = asyncio.run(command(args, Billing(Connector(settings.database().url))))
    except QueueCoreError as exc:
        print(f"queuecore billing: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # psycopg's OperationalError and socket errors
        print(f"queuecore billing: database unavailable: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(output, indent=2))
    return 0
