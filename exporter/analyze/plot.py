"""``--plot FILE.png``: loss, lr, grad norm and step time against step, findings marked.

A line per rank up to 16 ranks; beyond, the median across ranks with a min-max band (a
line per rank of 512 would be a smear). matplotlib (the ``[plot]`` extra) draws headless
with Agg. Points are thinned as they arrive (every other one dropped when a series is
full), so memory stays bounded by ranks x MAX_POINTS whatever the log's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter import kinds
from exporter.analyze.report import Report
from exporter.state import SeriesKey

MAX_POINTS = 4000  # per rank and gauge
MAX_LINES = 16  # ranks drawn one by one; beyond, median and band
BINS = 400
PANELS = (("loss", "loss"), ("learning_rate", "learning rate"), ("grad_norm", "grad norm"),
          ("step_time_seconds", "step time (s)"))
INSTALL_HINT = "--plot needs matplotlib: pip install 'trainlog-exporter[plot]' (or pip install matplotlib)"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(slots=True)
class _Thinned:
    """A series keeping every ``stride``-th value, the stride doubling whenever it is full."""

    steps: list[int | None] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    stride: int = 1
    skip: int = 0  # values of the next batch to pass over before the next one kept

    def extend(self, steps: Sequence[int | None], values: Sequence[float]) -> None:
        self.steps += steps[self.skip :: self.stride]
        self.values += values[self.skip :: self.stride]
        self.skip = (self.skip - len(values)) % self.stride
        if len(self.values) > MAX_POINTS:
            del self.steps[1::2], self.values[1::2]
            self.stride *= 2


class PlotData:
    """The points to draw, fed batch by batch (Analysis(points=...))."""

    def __init__(self) -> None:
        self.series: dict[SeriesKey, dict[str, _Thinned]] = {}

    def add(self, key: SeriesKey, gauge: str, steps: Sequence[int | None], values: Sequence[float]) -> None:
        if gauge not in dict(PANELS):
            return
        self.series.setdefault(key, {}).setdefault(gauge, _Thinned()).extend(steps, values)


def write_plot(path: str, data: PlotData, report: Report) -> None:
    """Draw the figure into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(data.series, key=lambda key: (key[0], key[1], _rank_order(key[2])))
    runs = {key[0] for key in keys}
    figure, axes = plt.subplots(len(PANELS), 1, figsize=(13, 11), sharex=True, constrained_layout=True)
    for axis, (gauge, label) in zip(axes, PANELS, strict=True):
        if len(keys) <= MAX_LINES:
            for key in keys:
                series = data.series[key].get(gauge)
                if series is not None and series.values:
                    axis.plot(series.steps, _drawable(series.values), linewidth=0.9, label=_label(key, len(runs)))
        else:
            _band(axis, [data.series[key][gauge] for key in keys if gauge in data.series[key]])
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    axes[-1].set_xlabel("step")
    _mark_findings(axes, report)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # on the grad norm panel: the loss panel's top holds the findings' labels
        axes[2].legend(handles, labels, loc="upper right", fontsize=7, ncol=max(1, len(labels) // 8))
    figure.suptitle(_title(report, len(keys)), fontsize=11)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _band(axis: object, series: list[_Thinned]) -> None:
    """Median across ranks with the min-max band, per bin of steps."""
    points = [(step, value) for one in series for step, value in zip(one.steps, one.values, strict=True)
              if step is not None and math.isfinite(value)]
    if not points:
        return
    low, high = min(step for step, _ in points), max(step for step, _ in points)
    width = max(1.0, (high - low + 1) / BINS)
    bins: dict[int, list[float]] = {}
    for step, value in points:
        bins.setdefault(int((step - low) / width), []).append(value)
    order = sorted(bins)
    steps = [low + (index + 0.5) * width for index in order]
    medians = [sorted(bins[index])[len(bins[index]) // 2] for index in order]
    axis.fill_between(steps, [min(bins[index]) for index in order], [max(bins[index]) for index in order],  # type: ignore[attr-defined]
                      alpha=0.25, label=f"min-max of {len(series)} ranks")
    axis.plot(steps, medians, linewidth=1.0, label="median")  # type: ignore[attr-defined]


def _mark_findings(axes: list, report: Report) -> None:
    """A dashed line at each finding's step on every panel, labelled on the loss panel: one label per
    step and kind with its ranks (a spike on 512 ranks is one label), the first 12 of them."""
    marks: dict[tuple[int, str, bool], list[str]] = {}
    for run in report.runs:
        for finding in run.findings:
            if finding.step is not None:
                marks.setdefault((finding.step, finding.kind, finding.root_cause), []).append(finding.rank or "?")
    low, high = axes[0].get_xlim()
    for number, ((step, kind, root_cause), ranks) in enumerate(sorted(marks.items())):
        color = "tab:red" if kind in kinds.ANOMALY_KINDS or kind == "loss_plateau" else (
            "black" if root_cause else "tab:purple" if kind in kinds.ERROR_KINDS else "tab:orange")
        for axis in axes:
            axis.axvline(step, color=color, linestyle="--", linewidth=0.8, alpha=0.7)
        if number >= 12:
            continue
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks" if len(ranks) > 4 else \
            "ranks " + ",".join(ranks)
        near_right = step > low + 0.8 * (high - low)
        axes[0].annotate(f"{kind}{' (root cause)' if root_cause else ''}, {who}", xy=(step, 1.0),
                         xycoords=("data", "axes fraction"), xytext=(-3 if near_right else 3, -12 - 11 * (number % 8)),
                         textcoords="offset points", fontsize=7, color=color,
                         horizontalalignment="right" if near_right else "left")


def _title(report: Report, ranks: int) -> str:
    names = ", ".join(run.run for run in report.runs)
    cause = next((run.root_cause for run in report.runs if run.root_cause is not None), None)
    first = next((run.first_incident for run in report.runs if run.first_incident is not None), None)
    what = (f"root cause: {cause.kind} on rank {cause.rank} at step {cause.step}" if cause is not None
            else f"first finding: {first.kind} on rank {first.rank} at step {first.step}" if first is not None
            else "no findings")
    return f"run {names}: {ranks} rank(s); {what}"


def _label(key: SeriesKey, runs: int) -> str:
    parts = ([key[0]] if runs > 1 else []) + ([key[1]] if key[1] else []) + [f"rank {key[2] or '?'}"]
    return "/".join(parts)


def _drawable(values: list[float]) -> list[float]:
    return [value if math.isfinite(value) else math.nan for value in values]


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (-1, rank)
