"""The dashboard's time charts, drawn server-side as inline SVG (no JavaScript, nothing loaded).

One shape for every chart: the full width of the page, a time axis whose ticks carry the date,
gridlines at round values, and a dot per point whose tooltip (its SVG ``<title>``) tells the
point's time and value. Every chart has its numbers in a table beside it as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from billing.schemas import UsageReport
from data_plane.service import LagSeries, TrafficSeries

WIDTH, HEIGHT = 960, 240
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 16, 12, 40
X_TICKS = 6
Y_STEPS = 4


@dataclass(frozen=True, slots=True)
class Dot:
    """A point of a series: where it is drawn, and what its tooltip says."""

    x: float
    y: float
    label: str


@dataclass(frozen=True, slots=True)
class Line:
    """One series: its name (the legend's), CSS class, polyline and dots."""

    name: str
    css: str
    points: str  # "x,y x,y …"
    dots: tuple[Dot, ...]


@dataclass(frozen=True, slots=True)
class Tick:
    """A labelled position on an axis."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """Everything the ``_chart.html`` macro draws."""

    title: str
    lines: tuple[Line, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM


SeriesData = tuple[str, str, Sequence[tuple[datetime, float]]]  # name, css class, points


def nice_step(span: float, steps: int = Y_STEPS) -> float:
    """A round step (1, 2 or 5 times a power of ten) that covers ``span`` in about ``steps`` steps."""
    raw = max(span, 1e-9) / steps
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def time_label(at: datetime, span: timedelta) -> str:
    """A tick's label: the date, and the time of day unless the chart spans weeks."""
    at = at.astimezone(UTC)
    return at.strftime("%d %b") if span > timedelta(days=3) else at.strftime("%d %b %H:%M")


def time_chart(
    title: str,
    since: datetime,
    until: datetime,
    series: Sequence[SeriesData],
    value_text: Callable[[float], str],
) -> Chart | None:
    """A chart of ``series`` over ``[since, until]``; None when no series has a point."""
    if not any(points for _, _, points in series):
        return None
    top_value = max((value for _, _, points in series for _, value in points), default=0.0)
    step = nice_step(top_value)
    y_max = max(step * math.ceil(top_value / step), step)
    span_s = max((until - since).total_seconds(), 1.0)
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x_of(at: datetime) -> float:
        along = (at - since).total_seconds() / span_s
        return round(PAD_LEFT + min(max(along, 0.0), 1.0) * plot_w, 1)

    def y_of(value: float) -> float:
        return round(HEIGHT - PAD_BOTTOM - value / y_max * plot_h, 1)

    lines = []
    for name, css, points in series:
        dots = tuple(
            Dot(
                x_of(at),
                y_of(value),
                f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC: {value_text(value)} {name}",
            )
            for at, value in points
        )
        lines.append(Line(name, css, " ".join(f"{d.x},{d.y}" for d in dots), dots))
    span = until - since
    x_ticks = tuple(
        Tick(
            x_of(since + span * i / (X_TICKS - 1)),
            time_label(since + span * i / (X_TICKS - 1), span),
        )
        for i in range(X_TICKS)
    )
    y_ticks = tuple(
        Tick(y_of(step * i), value_text(step * i)) for i in range(round(y_max / step) + 1)
    )
    return Chart(title, tuple(lines), x_ticks, y_ticks)


def format_rate(rate_per_s: float) -> str:
    """A rate as the axis prints it: per second, or per minute when below one a second."""
    if rate_per_s == 0:
        return "0"
    if rate_per_s >= 1:
        return f"{rate_per_s:.1f}/s"
    return f"{rate_per_s * 60:.1f}/min"


def format_count(value: float) -> str:
    """A count as an axis prints it: 950, 1.2k, 3.4M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


def lag_chart(series: LagSeries) -> Chart | None:
    """A group's lag per minute over its window."""
    points = [(point.at, float(point.lag)) for point in series.points]
    title = f"Lag of {series.group}, messages behind, from {series.since:%Y-%m-%d %H:%M} UTC"
    return time_chart(title, series.since, series.until, [("lag", "lag", points)], format_count)


def traffic_chart(series: TrafficSeries) -> Chart | None:
    """A topic's publish and consume rates over its window (None without traffic)."""
    if not series.published and not series.consumed:
        return None
    published = [(p.at, p.publish_rate) for p in series.points]
    consumed = [(p.at, p.consume_rate) for p in series.points]
    title = f"Messages per second, {series.window.label}"
    return time_chart(
        title,
        series.since,
        series.until,
        [("published", "published", published), ("consumed", "consumed", consumed)],
        format_rate,
    )


def usage_chart(report: UsageReport) -> Chart | None:
    """Messages in and out per day of a month's usage (None for a month without any)."""
    days = [b for b in report.buckets if b.messages_in or b.messages_out]
    if not days:
        return None
    inbound = [(b.start, float(b.messages_in)) for b in report.buckets]
    outbound = [(b.start, float(b.messages_out)) for b in report.buckets]
    until = report.buckets[-1].start if report.buckets else report.to
    return time_chart(
        f"Messages per day from {report.from_:%Y-%m-%d}",
        report.from_,
        until,
        [("in", "published", inbound), ("out", "consumed", outbound)],
        format_count,
    )
