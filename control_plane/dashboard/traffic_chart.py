"""The topic page's traffic chart: publish and consume rates drawn as two lines of a small SVG."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.dashboard.charts import HEIGHT, PAD_BOTTOM, PAD_LEFT, PAD_RIGHT, PAD_TOP, WIDTH
from data_plane.service import TrafficSeries


@dataclass(frozen=True, slots=True)
class TrafficChart:
    """Both rate lines of a series in a ``WIDTH`` by ``HEIGHT`` view box, on one scale."""

    max_rate: float  # messages per second at the top of the chart
    published: str  # polyline points, "x,y x,y …"
    consumed: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM


def traffic_chart(series: TrafficSeries) -> TrafficChart | None:
    """The chart of a series, or None when nothing was published or consumed in the window."""
    if not series.published and not series.consumed:
        return None
    points = series.points
    max_rate = max(max(max(p.publish_rate, p.consume_rate) for p in points), 1e-9)
    step = (WIDTH - PAD_LEFT - PAD_RIGHT) / max(len(points) - 1, 1)
    plot_height = HEIGHT - PAD_TOP - PAD_BOTTOM

    def line(rates: list[float]) -> str:
        coords = []
        for index, rate in enumerate(rates):
            x = round(PAD_LEFT + index * step, 1)
            y = round(HEIGHT - PAD_BOTTOM - rate / max_rate * plot_height, 1)
            coords.append(f"{x},{y}")
        return " ".join(coords)

    return TrafficChart(
        max_rate,
        line([p.publish_rate for p in points]),
        line([p.consume_rate for p in points]),
    )


def format_rate(rate_per_s: float) -> str:
    """A rate as the chart's axis prints it: per second, or per minute when below one a second."""
    if rate_per_s >= 1:
        return f"{rate_per_s:.1f}/s"
    return f"{rate_per_s * 60:.1f}/min"
