"""Chart geometry for the dashboard's server-rendered SVG (pure: no ORM, no clock).

The dashboard must work offline and without JavaScript, so charts are plain
SVG drawn by the template from the coordinates computed here. Inputs are
already bucketed series; outputs are numbers and path strings in a fixed
``width`` x ``height`` viewBox.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

WIDTH = 900
HEIGHT = 180
# Room for the y labels on the left and the x labels underneath.
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 8, 20


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= ``value`` (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    raise AssertionError("unreachable")


def _label(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str
    anchor: str = "middle"  # SVG text-anchor: the end labels stay inside the frame


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    state: str
    title: str


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top: int = TOP
    baseline: int = HEIGHT - BOTTOM
    y_max: float = 1.0
    y_ticks: list[Tick] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    dots: list[tuple[float, float]] = field(default_factory=list)  # lone points of a line
    bars: list[Bar] = field(default_factory=list)
    empty: bool = True


def _frame(n: int, y_max: float, x_labels: Mapping[int, str], *, centred: bool) -> Chart:
    chart = Chart(y_max=y_max)
    plot_h = chart.baseline - chart.top
    for fraction in (0.0, 0.5, 1.0):
        chart.y_ticks.append(
            Tick(pos=chart.baseline - fraction * plot_h, label=_label(y_max * fraction))
        )
    for index, label in sorted(x_labels.items()):
        anchor = "start" if index == 0 else "end" if index == n - 1 else "middle"
        pos = _x(chart, index, n, centred=centred)
        chart.x_ticks.append(Tick(pos=round(pos, 1), label=label, anchor=anchor))
    return chart


def _x(chart: Chart, index: float, n: int, *, centred: bool) -> float:
    plot_w = chart.right_edge - chart.left
    if centred:  # bars: bucket i spans [i, i + 1)
        return chart.left + (index + 0.5) * plot_w / max(n, 1)
    return chart.left + index * plot_w / max(n - 1, 1)


def line_chart(values: Sequence[float | None], x_labels: Mapping[int, str]) -> Chart:
    """A line over evenly spaced buckets. ``None`` is a gap (no samples then),
    drawn as a break in the line rather than as a zero."""
    known = [v for v in values if v is not None]
    chart = _frame(len(values), nice_ceiling(max(known, default=0.0)), x_labels, centred=False)
    chart.empty = not known
    plot_h = chart.baseline - chart.top
    segment: list[tuple[float, float]] = []
    for index, value in enumerate([*values, None]):
        if value is not None:
            x = _x(chart, index, len(values), centred=False)
            segment.append((round(x, 1), round(chart.baseline - plot_h * value / chart.y_max, 1)))
            continue
        if len(segment) == 1:  # a lone point has no length: mark it with a dot
            chart.dots.append(segment[0])
        elif segment:
            chart.paths.append("M" + " L".join(f"{x},{y}" for x, y in segment))
        segment = []
    return chart


def stacked_bars(
    buckets: Sequence[Mapping[str, int]],
    order: Sequence[str],
    x_labels: Mapping[int, str],
    titles: Sequence[str],
) -> Chart:
    """One bar per bucket, stacked by state in ``order`` (bottom first).

    ``titles[i]`` names bucket i in each segment's tooltip.
    """
    totals = [sum(b.values()) for b in buckets]
    chart = _frame(len(buckets), nice_ceiling(max(totals, default=0)), x_labels, centred=True)
    chart.empty = not any(totals)
    plot_w = chart.right_edge - chart.left
    plot_h = chart.baseline - chart.top
    slot = plot_w / max(len(buckets), 1)
    bar_w = max(slot * 0.8, 1.0)
    for index, bucket in enumerate(buckets):
        x = chart.left + index * slot + (slot - bar_w) / 2
        y = float(chart.baseline)
        for state in order:
            count = bucket.get(state, 0)
            if not count:
                continue
            h = plot_h * count / chart.y_max
            y -= h
            chart.bars.append(
                Bar(
                    x=round(x, 1),
                    y=round(y, 1),
                    width=round(bar_w, 1),
                    height=round(h, 1),
                    state=state,
                    title=f"{titles[index]}: {count} {state}",
                )
            )
    return chart
