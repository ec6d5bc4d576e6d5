"""The operator views: the Grafana dashboard and the documented queries name only tables,
columns and metrics that exist (the series tables, and the OTLP metric catalogue)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from observability import series_rows as t

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "queuecore.json"
DOC = ROOT / "docs" / "observability.md"

_TENANT = set(t.TENANT_TAGS)
COLUMNS: dict[str, set[str]] = {
    t.GROUP_LAG: _TENANT | {"topic", "group", "ts", *t.LAG_FIELDS},
    t.USAGE_HOURLY: _TENANT | {"ts", *t.USAGE_FIELDS},
    t.CONSUMERS: _TENANT
    | {"topic", "group", "member", "client", "partition", "ts", *t.CONSUMER_FIELDS},
    t.PRODUCERS: _TENANT | {"topic", "producer", "partition", "ts", *t.PRODUCER_FIELDS},
    # The latency triage's tables (data_plane/write/triage.py, data_plane/delivery/triage.py).
    t.SLOW_PUBLISHES: _TENANT
    | {"topic", "partition", "class", "cause", "ts", "messages", "suppressed", "total_ms"}
    | {"queue_wait_ms", "put_ms", "commit_ms", "answer_ms", "loop_lag_ms"},
    t.SLOW_DELIVERIES: {"environment", "topic", "group", "member", "cause", "ts"}
    | {"messages", "suppressed", "total_ms", "acquire_ms", "lease_ms", "read_ms", "other_ms"},
}
SQL_WORDS = {
    "select", "from", "where", "group", "by", "order", "desc", "asc", "limit", "as", "and",
    "or", "not", "now", "interval", "max", "min", "sum", "avg", "count", "concat", "date_bin",
    "date_trunc", "time", "metric", "__timefilter",
}  # fmt: skip
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
PROMQL_WORDS = {"sum", "rate", "by", "le", "histogram_quantile", "avg", "max", "increase"}


def _catalogue() -> set[str]:
    """The metric names of the documented catalogue, as PromQL sees them (``.`` → ``_``)."""
    names = re.findall(r"^\| `([a-z][a-z0-9_.]*)` \|", DOC.read_text(), re.MULTILINE)
    assert len(names) >= 10, "the metric catalogue table was not found"
    return {name.replace(".", "_") for name in names}


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _targets() -> Iterator[dict[str, Any]]:
    for panel in _dashboard()["panels"]:
        yield from panel["targets"]


def _doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)


def _check_sql(query: str) -> None:
    """Every table is a series table and every identifier a column of it (or an alias)."""
    tables = re.findall(r"\bFROM\s+([a-z_]+)", re.sub(r"--[^\n]*", "", query), re.IGNORECASE)
    assert tables, query
    unknown = set(tables) - set(COLUMNS)
    assert not unknown, f"unknown tables {unknown} in {query}"
    for keyword in ("group", "partition"):  # columns named like SQL keywords: backticks only
        assert not re.search(rf"(?<![`\w]){keyword}(?![`\w])", query), f"unquoted {keyword}"
    text = re.sub(r"--[^\n]*", "", query)  # comments
    text = re.sub(r"'[^']*'", "", text)  # string literals
    text = re.sub(r"\$__\w+", "", text)  # Grafana macros
    aliases = {alias.lower() for alias in re.findall(r"\bAS\s+(\w+)", text, re.IGNORECASE)}
    words = {w.strip("`") for w in re.findall(r"`?[A-Za-z_][A-Za-z0-9_]*`?", text)}
    allowed = set().union(*(COLUMNS[name] for name in tables)) | set(tables)
    unknown = {
        w
        for w in words
        if w.lower() not in SQL_WORDS | aliases and w not in allowed and not w.isupper()
    }
    assert not unknown, f"unknown columns {unknown} in {query}"


def _check_promql(query: str, catalogue: set[str]) -> None:
    """Every metric named is in the catalogue (histograms by their ``_bucket`` series)."""
    text = re.sub(r"\{[^}]*\}|\"[^\"]*\"|\[[^\]]*\]", "", query)
    inside_by = {
        w for group in re.findall(r"by \(([^)]*)\)", text) for w in re.findall(r"\w+", group)
    }
    names = set(re.findall(r"[a-z_][a-z0-9_]*", text)) - PROMQL_WORDS - inside_by
    assert names, query
    for name in names:
        base = name.removesuffix(next((s for s in HISTOGRAM_SUFFIXES if name.endswith(s)), ""))
        assert base in catalogue, f"{name} is not in the metric catalogue ({query})"


def test_the_dashboard_is_grafana_json_with_panels_on_both_data_sources() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "queuecore"
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    kinds = {target["datasource"]["type"] for target in _targets()}
    assert kinds == {"mysql", "prometheus"}
    variables = {v["name"]: v["query"] for v in dashboard["templating"]["list"]}
    assert variables == {"sql": "mysql", "prom": "prometheus"}
    for panel in panels:
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["targets"], panel["title"]


def test_every_dashboard_query_names_existing_tables_columns_and_metrics() -> None:
    catalogue = _catalogue()
    queried: set[str] = set()
    for target in _targets():
        if "rawSql" in target:
            _check_sql(target["rawSql"])
            queried |= set(re.findall(r"FROM\s+([a-z_]+)", target["rawSql"]))
        else:
            _check_promql(target["expr"], catalogue)
    assert queried == set(t.TABLES)  # every table has a view


def test_every_documented_query_names_existing_tables_columns_and_metrics() -> None:
    sql, promql = _doc_blocks("sql"), _doc_blocks("promql")
    assert len(sql) >= 4 and len(promql) >= 2
    for query in sql:
        _check_sql(query)
    catalogue = _catalogue()
    for query in promql:
        _check_promql(query, catalogue)


def test_a_query_naming_an_unknown_column_or_metric_is_caught() -> None:
    for bad_sql in (
        "SELECT lagg FROM queuecore_group_lag",
        "SELECT lag FROM queuecore_lag",
        'SELECT "group" FROM queuecore_group_lag',  # a string in MySQL's dialect
    ):
        try:
            _check_sql(bad_sql)
        except AssertionError:
            continue
        raise AssertionError(f"not caught: {bad_sql}")
    try:
        _check_promql("sum(rate(queuecore_messages_publish[5m]))", _catalogue())
    except AssertionError:
        return
    raise AssertionError("an unknown metric was not caught")
