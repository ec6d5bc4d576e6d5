"""The GreptimeDB series tables: their names, tags and fields, and rows built from query records.

Every table is tagged with its tenant (``organisation`` and ``project`` ids, ``environment``
name); the domain reads the database and hands the records here (this module imports no domain
package). Fields are numbers; a field the source does not know (a rate with no usable step) is
sent as NULL. Docs: docs/observability.md ("GreptimeDB series").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from observability.series import Row

GROUP_LAG: Final = "queuecore_group_lag"
USAGE_HOURLY: Final = "queuecore_usage_hourly"
CONSUMERS: Final = "queuecore_consumers"
PRODUCERS: Final = "queuecore_producers"
SLOW_PUBLISHES: Final = "queuecore_slow_publishes"  # written by the latency triage
SLOW_DELIVERIES: Final = "queuecore_slow_deliveries"  # written by the latency triage
TABLES: Final = (GROUP_LAG, USAGE_HOURLY, CONSUMERS, PRODUCERS, SLOW_PUBLISHES, SLOW_DELIVERIES)

TENANT_TAGS: Final = ("organisation", "project", "environment")
_TENANT_COLUMNS: Final = {
    "organisation": "organisation_id",
    "project": "project_id",
    "environment": "environment",
}
LAG_FIELDS: Final = ("partitions", "lag", "consume_rate", "produce_rate", "time_to_drain_s")
USAGE_FIELDS: Final = (
    "messages_in",
    "bytes_in",
    "messages_out",
    "bytes_out",
    "publish_requests",
    "consume_requests",
    "admin_requests",
    "storage_bytes_avg",
)
CONSUMER_FIELDS: Final = (
    "committed_offset",
    "delivered_offset",
    "end_offset",
    "backlog",
    "last_activity_ms",
)
PRODUCER_FIELDS: Final = ("last_offset", "messages", "last_activity_ms")

Record = Mapping[str, Any]


def _tenant(record: Record) -> dict[str, str]:
    return {tag: str(record[column]) for tag, column in _TENANT_COLUMNS.items()}


def _fields(record: Record, names: Iterable[str]) -> dict[str, float | int | None]:
    return {name: _number(record[name]) for name in names}


def _number(value: Any) -> float | int | None:
    return None if value is None else float(value) if not isinstance(value, int) else value


def lag_rows(records: Iterable[Record]) -> list[Row]:
    """``queuecore_group_lag``: one row per group and bucket of the lag analytics output."""
    return [
        Row(
            GROUP_LAG,
            {**_tenant(r), "topic": r["topic"], "group": r["group"]},
            _fields(r, LAG_FIELDS),
            int(r["bucket_start_ms"]),
        )
        for r in records
    ]


def usage_rows(records: Iterable[Record]) -> list[Row]:
    """``queuecore_usage_hourly``: one row per environment and UTC hour (a re-sent hour replaces
    its row: same tags, same timestamp)."""
    return [
        Row(USAGE_HOURLY, _tenant(r), _fields(r, USAGE_FIELDS), int(r["hour_ms"])) for r in records
    ]


def consumer_rows(records: Iterable[Record], at_ms: int) -> list[Row]:
    """``queuecore_consumers``: per group, partition and owning member at ``at_ms``."""
    return [
        Row(
            CONSUMERS,
            {
                **_tenant(r),
                "topic": r["topic"],
                "group": r["group"],
                "member": r["member"],
                "client": r["client"],
                "partition": str(r["partition"]),
            },
            _fields(r, CONSUMER_FIELDS),
            at_ms,
        )
        for r in records
    ]
