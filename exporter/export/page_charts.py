"""The status page's charts as inline SVG: plain numbers in, markup out, no script and no library.

Every text that reaches the markup is escaped here; the numbers are formatted by us.
"""

from __future__ import annotations

import html
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MAX_RANK_LINES = 16  # beyond this many ranks a line each is a tangle: the median and the min-max band instead
WIDTH, HEIGHT = 900, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 12, 14, 30
_LOG_SCALE_RATIO = 4.0  # a loss range wider than this is drawn on a log scale (early training: 10 down to 2)
# The y range ends at this quantile of the values: a one-step spike (the demo's is 10x) would
# otherwise flatten the curve into a line. A value far above it is cut off at the top edge,
# where it still reads as a spike, and the axis says how high it went.
_ROBUST_QUANTILE = 0.99
_CHARACTER_WIDTH = 6.2  # about, at the page's 11 px: enough to put a marker's words on the side they fit
SMOOTHING_STEPS = 25  # the smoothed line: a trailing median over this many steps, which a one-step spike cannot move
# Tableau 10 and six more: sixteen ranks, sixteen colours told apart.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#d62728")

Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Marker:
    """A vertical line at a step with its words (an anomaly, an error)."""

    step: int
    text: str
    css_class: str


def loss_chart(series: Mapping[str, Sequence[Point]], markers: Sequence[Marker]) -> str:
    """A line per rank (or the median and min-max band beyond ``MAX_RANK_LINES`` ranks), the smoothed median
    over the ranks and the markers; "" when nothing is finite."""
    finite = {label: [(x, y) for x, y in points if math.isfinite(y)] for label, points in series.items()}
    finite = {label: points for label, points in finite.items() if points}
    if not finite:
        return ""
    by_step = _values_by_step(finite.values())
    median = [(step, statistics.median(values)) for step, values in by_step]
    smoothed = list(zip([step for step, _ in median], _rolling_median([value for _, value in median]), strict=True))
    values = [y for points in finite.values() for _, y in points]
    scale = _Scale([x for x, _ in median] + [marker.step for marker in markers], values)
    parts = [scale.axes("loss")]
    legend = [(f"smoothed (median of the last {SMOOTHING_STEPS} steps)", "#1d1d1f")]
    if len(finite) <= MAX_RANK_LINES:
        for index, (label, points) in enumerate(finite.items()):
            colour = PALETTE[index % len(PALETTE)]
            parts.append(_polyline(scale, points, "rank-loss", colour, label=f"rank {label}"))
            legend.append((f"rank {label}", colour))
    else:
        band = [(step, min(values)) for step, values in by_step] + [(step, max(values)) for step, values in
                                                                     reversed(by_step)]
        parts.append(f'<polygon class="band" points="{_points(scale, band)}" fill="#4e79a7" fill-opacity="0.2">'
                     f"<title>min-max over {len(finite)} ranks</title></polygon>")
        parts.append(_polyline(scale, median, "median-loss", "#4e79a7", label="median over ranks"))
        legend.append((f"median and min-max of {len(finite)} ranks", "#4e79a7"))
    parts.append(_polyline(scale, smoothed, "smoothed-loss", "#1d1d1f", label="smoothed", width=2.5))
    shown = sorted((marker for marker in markers if scale.x_min <= marker.step <= scale.x_max),
                   key=lambda marker: marker.step)
    parts.extend(_marker(scale, marker, row) for marker, row in zip(shown, _label_rows(scale, shown), strict=True))
    return _svg("loss-chart", "loss over the recent steps", parts) + _legend(legend)


def _label_rows(scale: _Scale, markers: Sequence[Marker]) -> list[int]:
    """The text line of each marker's words (markers by step): the first line whose words so far end before
    this marker's begin, so that labels of nearby steps do not print over each other."""
    ends: list[float] = []  # per line, where its last words end
    rows = []
    for marker in markers:
        x = scale.x(marker.step)
        start, end = _label_span(x, marker.text)
        row = next((index for index, taken in enumerate(ends) if taken < start), len(ends))
        if row == len(ends):
            ends.append(end)
        ends[row] = max(ends[row], end)
        rows.append(row)
    return rows


def _label_span(x: float, text: str) -> tuple[float, float]:
    """Where a marker's words begin and end: right of its line where they fit, else left of it."""
    width = 4 + len(text) * _CHARACTER_WIDTH
    return (x, x + width) if x + width < WIDTH - _RIGHT else (x - width, x)


def step_time_chart(bars: Sequence[tuple[str, float | None, bool]]) -> str:
    """A bar per rank: (rank label, seconds per step or None, slow); slow bars are red and say so."""
    known = [seconds for _, seconds, _ in bars if seconds is not None]
    if not known:
        return ""
    height, top, bottom = 150, 12, 24
    top_value = max(known) * 1.1
    slot = (WIDTH - _LEFT - _RIGHT) / len(bars)
    labelled = slot >= 14  # room for a rank number under each bar
    parts = [f'<text x="4" y="{top + 10}" class="axis">{_number(top_value)} s</text>',
             f'<line x1="{_LEFT}" y1="{height - bottom}" x2="{WIDTH - _RIGHT}" y2="{height - bottom}" class="axis"/>']
    for index, (label, seconds, slow) in enumerate(bars):
        x = _LEFT + index * slot
        if seconds is not None:
            bar_height = (height - top - bottom) * seconds / top_value
            css = "bar slow" if slow else "bar"
            title = html.escape(f"rank {label}: {seconds:.3g} s per step" + (" (slow)" if slow else ""))
            parts.append(f'<rect class="{css}" x="{x + slot * 0.15:.1f}" y="{height - bottom - bar_height:.1f}" '
                         f'width="{max(slot * 0.7, 0.5):.1f}" height="{bar_height:.1f}"><title>{title}</title></rect>')
            if slow:
                label_y = height - bottom - bar_height - 3
                parts.append(f'<text class="slow-label" x="{x + slot / 2:.1f}" y="{label_y:.1f}" text-anchor="middle">'
                             "slow</text>")
        if labelled:
            parts.append(f'<text class="axis" x="{x + slot / 2:.1f}" y="{height - 8}" text-anchor="middle">'
                         f"{html.escape(label)}</text>")
    return _svg("step-time-chart", "step time per rank", parts, height)


def _values_by_step(series: Iterable[Sequence[Point]]) -> list[tuple[float, list[float]]]:
    by_step: dict[float, list[float]] = defaultdict(list)
    for points in series:
        for x, y in points:
            by_step[x].append(y)
    return sorted(by_step.items())


def _rolling_median(values: Sequence[float]) -> list[float]:
    return [statistics.median(values[max(0, end - SMOOTHING_STEPS):end]) for end in range(1, len(values) + 1)]


class _Scale:
    """Steps to x, losses to y (on a log scale when they span more than ``_LOG_SCALE_RATIO``), peaks cut off."""

    def __init__(self, steps: Sequence[float], values: Sequence[float]) -> None:
        self.x_min, self.x_max = min(steps), max(steps)
        ordered = sorted(values)
        low, high, peak = ordered[0], ordered[int(_ROBUST_QUANTILE * (len(ordered) - 1))], ordered[-1]
        self.peak_cut = peak > high + (high - low)  # far above the rest: cut off
        if self.peak_cut:
            high += 0.15 * (high - low)  # headroom: a cut peak stands above the curve
        else:
            high = peak
        self.peak = peak
        self.log = low > 0 and high / low > _LOG_SCALE_RATIO
        self.y_min, self.y_max = (math.log10(low), math.log10(high)) if self.log else (low, high)
        if self.y_max == self.y_min:
            self.y_min, self.y_max = self.y_min - 0.5, self.y_max + 0.5
        self.low, self.high = low, high

    def x(self, step: float) -> float:
        span = self.x_max - self.x_min
        return _LEFT + (WIDTH - _LEFT - _RIGHT) * ((step - self.x_min) / span if span else 0.5)

    def y(self, value: float) -> float:
        position = min(max(math.log10(value) if self.log and value > 0 else value, self.y_min), self.y_max)
        return _TOP + (HEIGHT - _TOP - _BOTTOM) * (self.y_max - position) / (self.y_max - self.y_min)

    def axes(self, name: str) -> str:
        bottom, right = HEIGHT - _BOTTOM, WIDTH - _RIGHT
        scale_note = (" (log scale)" if self.log else "") + (
            f", peaks up to {_number(self.peak)} cut off at the top" if self.peak_cut else "")
        return (f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}"/>'
                f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>'
                f'<text class="axis" x="4" y="{self.y(self.high) + 4:.1f}">{_number(self.high)}</text>'
                f'<text class="axis" x="4" y="{self.y(self.low) + 4:.1f}">{_number(self.low)}</text>'
                f'<text class="axis" x="{_LEFT}" y="{HEIGHT - 8}">step {self.x_min:.0f}</text>'
                f'<text class="axis" x="{right}" y="{HEIGHT - 8}" text-anchor="end">step {self.x_max:.0f}</text>'
                f'<text class="axis" x="{(_LEFT + right) / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
                f"{name}{scale_note}</text>")


def _polyline(scale: _Scale, points: Sequence[Point], css: str, colour: str, label: str, width: float = 1.2) -> str:
    return (f'<polyline class="{css}" fill="none" stroke="{colour}" stroke-width="{width}" '
            f'data-label="{html.escape(label)}" points="{_points(scale, points)}"><title>{html.escape(label)}</title>'
            f"</polyline>")


def _points(scale: _Scale, points: Sequence[Point]) -> str:
    return " ".join(f"{scale.x(x):.1f},{scale.y(y):.1f}" for x, y in points)


def _marker(scale: _Scale, marker: Marker, row: int = 0) -> str:
    x = scale.x(marker.step)
    start, _ = _label_span(x, marker.text)
    anchor, offset = ("start", 4) if start == x else ("end", -4)
    return (f'<g class="marker {html.escape(marker.css_class)}" data-step="{marker.step}">'
            f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{HEIGHT - _BOTTOM}"/>'
            f'<text x="{x + offset:.1f}" y="{_TOP + 12 + 13 * row}" text-anchor="{anchor}">'
            f'{html.escape(marker.text)}</text></g>')


def _legend(entries: Sequence[tuple[str, str]]) -> str:
    return '<p class="legend">' + " ".join(f'<span style="color:{colour}">&#9473;</span> {html.escape(text)}'
                                            for text, colour in entries) + "</p>"


def _svg(css: str, title: str, parts: Sequence[str], height: int = HEIGHT) -> str:
    return (f'<svg class="{css}" role="img" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title)}</title>{"".join(parts)}</svg>')


def _number(value: float) -> str:
    return f"{value:.4g}"
