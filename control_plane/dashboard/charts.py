"""The group page's lag chart: a consumer group's lag series drawn as a small inline SVG."""

from __future__ import annotations

from dataclasses import dataclass

from data_plane.service import LagSeries

WIDTH, HEIGHT = 640, 180
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 12, 28


@dataclass(frozen=True, slots=True)
class LagChart:
    """Coordinates of a lag series in a ``WIDTH`` by ``HEIGHT`` view box."""

    max_lag: int
    line: str  # the polyline's points, "x,y x,y …"
    dots: list[tuple[float, float]]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM


def lag_chart(series: LagSeries) -> LagChart | None:
    """The chart of a series over its window, or None when it has no points yet."""
    if not series.points:
        return None
    max_lag = max(max(point.lag for point in series.points), 1)
    span_s = max((series.until - series.since).total_seconds(), 1.0)
    dots = []
    for point in series.points:
        along = (point.at - series.since).total_seconds() / span_s
        x = PAD_LEFT + min(max(along, 0.0), 1.0) * (WIDTH - PAD_LEFT - PAD_RIGHT)
        y = HEIGHT - PAD_BOTTOM - point.lag / max_lag * (HEIGHT - PAD_TOP - PAD_BOTTOM)
        dots.append((round(x, 1), round(y, 1)))
    return LagChart(max_lag, " ".join(f"{x},{y}" for x, y in dots), dots)
