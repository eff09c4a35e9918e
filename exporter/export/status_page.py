"""The human view at ``/``: per run, the loss over the recent steps, step time per rank, incidents, and a row per rank.

One page without libraries or external assets: inline SVG charts (page_charts.py), a few
lines of inline script that refresh the content in place (the scroll position stays), and
a meta refresh for a browser without script. Everything a log or a path said is escaped.
The state is copied under its lock (a few arrays per rank); the words and charts are made
after it is released, so a page over 1,024 ranks does not hold up the follower.
"""

from __future__ import annotations

import html
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from exporter import kinds
from exporter.export.page_charts import Marker, loss_chart, step_time_chart
from exporter.kinds import ANOMALY_KINDS
from exporter.parse import faults
from exporter.state import RankState, SeriesKey, TrainingState
from exporter.state.events import Event
from exporter.thresholds import STALL_FLOOR_SECONDS, STRAGGLER_FACTOR, STRAGGLER_MIN_RANKS

DEFAULT_RUNBOOK_URL = "https://github.com/trainlog-exporter/trainlog-exporter/blob/main/docs/runbooks/"  # --runbook-url
_STALE_AFTER_SECONDS = STALL_FLOOR_SECONDS  # without a rank's own stall threshold: the floor of one
# An anomaly this many steps behind the rank's step is in the past: the row says at which
# step it was, without staying red for the rest of the run.
RECENT_ANOMALY_STEPS = 50
# A rank whose recent step time exceeds the run's median by this factor is slow, as the
# TrainingStraggler alert says (with at least this many ranks to compare).
SLOW_FACTOR, SLOW_MIN_RANKS = STRAGGLER_FACTOR, STRAGGLER_MIN_RANKS
_STEP_TIME_WINDOW = 16  # the recent step times whose median is a rank's pace
REFRESH_SECONDS = 5

@dataclass(frozen=True, slots=True)
class _Rank:
    """What the page shows of one rank, copied out of the state under its lock."""

    run: str
    node: str
    label: str
    file: str
    role: str
    step: int | None
    total_steps: int | None
    loss: float | None
    learning_rate: float | None
    grad_norm: float | None
    step_time: float | None
    age: float | None
    anomalies: dict[str, tuple[int, int | None]]  # kind -> (count, last step)
    errors: dict[str, tuple[int, int | None]]
    failures: dict[str, str]  # error kind -> what its latest failure said, worded
    goodput: dict[str, float]
    recent: tuple[Sequence[int], Sequence[float], Sequence[float]]  # steps, losses, step times
    pace: float | None = field(default=None)  # seconds per step over the recent steps
    stall_threshold: float | None = None  # the silence after which the rank is stalled (its own, learned)
    cause: str = ""  # this rank holds its run's root cause: what it is ("hang at step 69")

    @property
    def stalled(self) -> bool:
        """Silent past its own stall threshold (the floor when it has none)."""
        threshold = _STALE_AFTER_SECONDS if self.stall_threshold is None else self.stall_threshold
        return self.age is not None and self.age > threshold

    def active_anomalies(self) -> dict[str, tuple[int, int | None]]:
        """Anomalies at most RECENT_ANOMALY_STEPS behind the rank's step (or at an unknown step)."""
        return {kind: (count, step) for kind, (count, step) in self.anomalies.items()
                if step is None or self.step is None or step >= self.step - RECENT_ANOMALY_STEPS}


def render_status_page(state: TrainingState, ready: bool, now: float | None = None,
                       runbook_url: str = DEFAULT_RUNBOOK_URL) -> str:
    now = time.time() if now is None else now
    with state.lock:
        causes = {run: cause.event for run, cause in state.causes.causes().items()}
        ranks = [_copy(key, rank, now, causes.get(key[0])) for key, rank in sorted(state.series.items(),
                                                                                  key=_rank_order)]
        stats = state.stats
        summary = (f"{stats.files_followed} files followed · {stats.bytes_read_total:,} bytes read · "
                   f"{stats.lines_unparsed_total:,} lines unparsed")
    runs = [_run_section(run, list(members), runbook_url)
            for run, members in groupby(ranks, key=lambda rank: rank.run)]
    readiness = "ready" if ready else "waiting for the log directories"
    content = "\n".join(runs) or "<p>No log files found yet.</p>"
    return _PAGE.format(summary=html.escape(summary), readiness=readiness, content=content,
                        refresh=REFRESH_SECONDS, refresh_ms=REFRESH_SECONDS * 1000)


def _rank_order(item: tuple[SeriesKey, RankState]) -> tuple:
    (run, node, rank), _ = item
    return run, node, (int(rank) if rank.isdigit() else -1), rank


def _copy(key: SeriesKey, rank: RankState, now: float, cause: Event | None) -> _Rank:
    run, node, label = key
    recent = rank.recent.columns()
    mine = cause is not None and cause.key == key
    return _Rank(
        run=run, node=node, label=label or "-", role=rank.info.get("role", ""),
        file=rank.info.get("file", "") + (f" ({rank.info['reading']})" if "reading" in rank.info else ""),
        step=rank.step,
        total_steps=rank.total_steps, loss=rank.loss, learning_rate=rank.learning_rate, grad_norm=rank.grad_norm,
        step_time=rank.step_time_seconds,
        age=None if rank.last_log_timestamp is None else max(0.0, now - rank.last_log_timestamp),
        anomalies={kind: (count, rank.last_anomaly_step.get(kind)) for kind, count in rank.anomalies.items() if count},
        errors={kind: (count, rank.last_error_step.get(kind)) for kind, count in rank.errors.items() if count},
        failures=failure_summaries(rank.errors, rank.last_error_facts, rank.last_error_timestamp),
        goodput={name: value for values in (rank.printed, rank.extra) for name, value in values.items()
                 if "goodput" in name},
        recent=recent, pace=_pace(recent[2], rank.step_time_seconds), stall_threshold=rank.stall_threshold_seconds,
        cause=(f"{kinds.words(cause.kind)}" + (f" after step {cause.step}" if cause.step is not None else ""))
        if cause is not None and mine else "")


def _pace(step_times: Sequence[float], latest: float | None) -> float | None:
    known = [seconds for seconds in step_times[-4 * _STEP_TIME_WINDOW:] if math.isfinite(seconds)]
    return statistics.median(known[-_STEP_TIME_WINDOW:]) if known else latest


def slow_ranks(paces: Mapping[str, float | None]) -> dict[str, float]:
    """Ranks (label -> ratio) whose pace exceeds SLOW_FACTOR times the median of the run's ranks."""
    known = {label: pace for label, pace in paces.items() if pace is not None and pace > 0}
    if len(known) < SLOW_MIN_RANKS:
        return {}
    median = statistics.median(known.values())
    return {label: pace / median for label, pace in known.items() if pace > SLOW_FACTOR * median}


def _run_section(run: str, ranks: list[_Rank], runbook_url: str) -> str:
    workers = [rank for rank in ranks if rank.role not in ("scheduler", "launcher")]
    slow = slow_ranks({rank.label: rank.pace for rank in workers})
    incidents = _incidents(ranks, slow)
    markers = [Marker(step, ", ".join(f"{kinds.words(kind)} @ step {step}" for kind in at_step),
                      "error" if any(kind not in _ANOMALY_KINDS for kind in at_step) else "anomaly")
               for step, at_step in _kinds_by_step(incidents)]
    chart = loss_chart({rank.label: list(zip(rank.recent[0], rank.recent[1], strict=True)) for rank in workers},
                       markers)
    bars = step_time_chart([(rank.label, rank.pace, rank.label in slow) for rank in workers])
    rows = "\n".join(_row(rank, slow.get(rank.label)) for rank in ranks)
    return _RUN.format(
        run=html.escape(run),
        progress=html.escape(_progress(workers, next((rank for rank in ranks if rank.cause), None))),
        loss_chart=chart or '<p class="muted">No loss printed yet.</p>',
        step_time_chart=bars or '<p class="muted">No step time printed yet.</p>',
        incidents=_incident_table(incidents, runbook_url), rows=rows)


@dataclass(frozen=True, slots=True)
class _Incident:
    kind: str
    step: int | None
    ranks: tuple[str, ...]
    count: int
    what: str


_ANOMALY_KINDS = frozenset(ANOMALY_KINDS)


def _incidents(ranks: Sequence[_Rank], slow: Mapping[str, float]) -> list[_Incident]:
    """One incident per kind, step and wording, with every rank it happened on; the latest first."""
    grouped: dict[tuple[str, int | None, str], list[tuple[str, int]]] = defaultdict(list)
    for rank in ranks:
        for kind, (count, step) in rank.anomalies.items():
            grouped[kind, step, ""].append((rank.label, count))
        for kind, (count, step) in rank.errors.items():
            grouped[kind, step, rank.failures.get(kind, "")].append((rank.label, count))
        if rank.label in slow:
            what = f"slow rank: {slow[rank.label]:.1f}x the run's median step time"
            grouped["slow", rank.step, what].append((rank.label, 1))
    incidents = [_Incident(kind, step, tuple(label for label, _ in members), sum(count for _, count in members), what)
                 for (kind, step, what), members in grouped.items()]
    return sorted(incidents, key=lambda incident: (incident.step is not None, incident.step or 0), reverse=True)


def _kinds_by_step(incidents: Iterable[_Incident]) -> list[tuple[int, list[str]]]:
    by_step: dict[int, list[str]] = defaultdict(list)
    for incident in incidents:
        if incident.step is not None and incident.kind != "slow" and incident.kind not in by_step[incident.step]:
            by_step[incident.step].append(incident.kind)
    return sorted(by_step.items())


def _incident_table(incidents: Sequence[_Incident], runbook_url: str) -> str:
    if not incidents:
        return '<p class="muted">No incidents.</p>'
    rows = []
    for incident in incidents:
        alert = kinds.alert(incident.kind)
        link = (f'<a href="{html.escape(runbook_url.rstrip("/") + "/" + alert + ".md")}">{alert}</a>'
                if alert else "")
        what = incident.what or kinds.words(incident.kind)
        if incident.kind != "slow" and incident.count > len(incident.ranks):
            what += f" ({incident.count} times)"
        css = "anomaly" if incident.kind in _ANOMALY_KINDS else "slow" if incident.kind == "slow" else "error"
        cells = (_fmt(incident.step, "d"), rank_ranges(incident.ranks), what)
        rows.append(f'<tr class="{css}" data-kind="{html.escape(incident.kind)}">'
                    + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + f"<td>{link}</td></tr>")
    return ('<table class="incidents"><thead><tr><th>step</th><th>ranks</th><th>what</th><th>runbook</th></tr>'
            "</thead><tbody>" + "\n".join(rows) + "</tbody></table>")


def rank_ranges(labels: Sequence[str]) -> str:
    """"0-7, 9" for ranks 0 to 7 and 9; labels that are no numbers as they are."""
    numbers = sorted(int(label) for label in labels if label.isdigit())
    words = [label for label in labels if not label.isdigit()]
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join([f"{low}-{high}" if high > low else f"{low}" for low, high in spans] + words)


def _progress(ranks: Sequence[_Rank], cause: _Rank | None = None) -> str:
    """"8 ranks · step 200 / 100,000 · ETA 23 h 05 min at 2.1 s per step (the slowest rank's pace) · goodput ...";
    a run with a root cause or silent past every rank's threshold is stopped: no ETA, the cause instead."""
    parts = [f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''}"]
    steps = [rank.step for rank in ranks if rank.step is not None]
    totals = [rank.total_steps for rank in ranks if rank.total_steps]
    if steps:
        parts.append(f"step {max(steps):,}" + (f" / {max(totals):,}" if totals else ""))
    paces = [rank.pace for rank in ranks if rank.pace]
    aged = [rank for rank in ranks if rank.age is not None]
    stalled = bool(aged) and all(rank.stalled for rank in aged)
    if cause is not None:
        parts.append(f"stopped: root cause {cause.cause} on rank {cause.label}"
                     + (f" ({cause.node})" if cause.node else ""))
    elif stalled and steps and not (totals and max(steps) >= max(totals)):
        parts.append("stalled: every rank silent past its stall threshold")
    if steps and totals and paces and cause is None and not stalled:  # no ETA for a run that does not train
        remaining = max(totals) - max(steps)
        # Synchronous training moves at the pace of its slowest rank.
        parts.append("finished" if remaining <= 0 else
                     f"ETA {duration(remaining * max(paces))} at {max(paces):.3g} s per step (the slowest rank's pace)")
    goodput: dict[str, list[float]] = defaultdict(list)
    for rank in ranks:
        for name, value in rank.goodput.items():
            goodput[name].append(value)
    parts.extend(f"{name} {statistics.median(values):.4g}" for name, values in sorted(goodput.items()))
    return " · ".join(parts)


def duration(seconds: float) -> str:
    """"2 d 03 h", "3 h 12 min", "4 min 05 s", "12 s"."""
    seconds = round(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours:02d} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "" if value is None else format(value, spec)


def _row(rank: _Rank, slow_ratio: float | None) -> str:
    active = rank.active_anomalies()
    classes = []
    if rank.stalled:
        classes.append("stale")
    if rank.errors or active or rank.cause:
        # the rank of a hang printed nothing wrong: it is the cause, not a healthy row
        classes.extend(("bad", "cause") if rank.cause else ("bad",))
    elif rank.anomalies:
        classes.append("past")  # what happened stays written, at its step; the row is no longer red
    if slow_ratio is not None:
        classes.append("slow")
    step = _fmt(rank.step, "d") + (f" / {rank.total_steps}" if rank.step is not None and rank.total_steps else "")
    step_time = _fmt(rank.step_time, ".3f") + (f" slow {slow_ratio:.1f}x" if slow_ratio is not None else "")
    cells = (rank.node, rank.label, rank.file, step, _fmt(rank.loss), _fmt(rank.learning_rate, ".3e"),
             _fmt(rank.grad_norm), step_time, _fmt(rank.age, ".0f"), _counted(rank.anomalies),
             _counted(rank.errors), "; ".join(rank.failures.values()))
    tds = "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
    said = html.escape(rank.cause)
    cause = f' title="root cause: {said}" data-root-cause="{said}"' if rank.cause else ""
    return f'<tr class="{" ".join(classes)}" data-rank="{html.escape(rank.label)}"{cause}>{tds}</tr>'


def _counted(events: Mapping[str, tuple[int, int | None]]) -> str:
    """"loss_spike 1 at step 120, oom 1": each kind with its count and the step of the latest."""
    return ", ".join(f"{kind} {count}" + (f" at step {step}" if step is not None else "")
                     for kind, (count, step) in events.items())


def failure_summaries(counts: Mapping[str, int], facts: Mapping[str, Mapping[str, str | int | float]],
                      timestamps: Mapping[str, float]) -> dict[str, str]:
    """What the latest failure of each kind a rank logged said: "out of memory: RuntimeError (device npu,
    requested 30.8 GiB)". A traceback that names nothing but the exception of another failure logged with it is
    that failure's traceback, not a second failure (MindSpore's OOM is a RuntimeError and its traceback)."""
    summaries = {}
    for kind, count in counts.items():
        if not count:
            continue
        detail = facts.get(kind, {})
        if kind == "traceback" and _same_failure(detail, timestamps.get(kind), facts, timestamps):
            continue
        said = error_summary(detail)
        summaries[kind] = kinds.words(kind) + (f": {said}" if said else "")
    return summaries


def _same_failure(traceback: Mapping[str, str | int | float], at: float | None,
                  facts: Mapping[str, Mapping[str, str | int | float]], timestamps: Mapping[str, float]) -> bool:
    if set(traceback) - {"exception"}:
        return False
    exception = traceback.get("exception")
    return any(kind != "traceback" and timestamps.get(kind) == at and detail.get("exception") == exception
               for kind, detail in facts.items())


def error_summary(detail: Mapping[str, str | int | float]) -> str:
    """One short phrase for a failure: the exception type (and message) and what identifies the failure."""
    exception, message = detail.get("exception"), detail.get("message")
    named = exception or message or detail.get("fault") or ""
    head = f"{exception}: {message}" if exception and message else str(named)
    facts = [f"{_FACT_WORDS.get(name, name)} {_fact(name, detail[name])}" for name in _SUMMARY_FACTS if name in detail]
    said = f"{head} ({', '.join(facts)})" if head and facts else head or ", ".join(facts)
    advice = fault_advice(detail)
    return f"{said}. {advice}" if said and advice else said or advice


def fault_advice(detail: Mapping[str, str | int | float]) -> str:
    """The fault knowledge's advice for a failure it named (parse/faults/), else ""."""
    if "fault_id" not in detail:
        return ""
    fault = faults.knowledge().by_id.get(str(detail["fault_id"]))
    return fault.advice if fault is not None else ""


# Detail keys worth a place in the summary, in this order, and how to say them.
_SUMMARY_FACTS = ("op", "code", "component", "cuda_error", "nccl_error", "root_cause_rank", "exitcode", "signal",
                  "device",
                  "requested", "requested_bytes")
_FACT_WORDS = {"requested_bytes": "requested"}


def _fact(name: str, value: str | int | float) -> str:
    return binary_size(value) if name == "requested_bytes" and isinstance(value, (int, float)) else str(value)


def binary_size(size: float) -> str:
    """33100113920 -> "30.8 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.3g} TiB"


_RUN = """<section class="run">
<h2>run {run}</h2>
<p class="progress">{progress}</p>
<div class="charts">{loss_chart}
<h3>step time per rank (median of the recent steps)</h3>
{step_time_chart}</div>
<h3>incidents</h3>
{incidents}
<h3>ranks</h3>
<table class="ranks">
<thead><tr><th>node</th><th>rank</th><th>file</th><th>step</th><th>loss</th><th>lr</th><th>grad norm</th>
<th>step s</th><th>s since last line</th><th>anomalies</th><th>errors</th><th>last error</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</section>"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>
<title>trainlog-exporter</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; }}
table {{ border-collapse: collapse; font-size: 0.9rem; margin-bottom: 1rem; }}
th, td {{ padding: 0.3rem 0.6rem; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ background: #f3f3f5; }}
tr.stale td {{ background: #fff4d6; }}
tr.bad td {{ background: #fde2e1; }}
tr.cause td:first-child {{ border-left: 4px solid #b3261e; }}
tr.past td:nth-child(10) {{ background: #fff4d6; }}
tr.slow td:nth-child(8), tr.slow td:nth-child(2) {{ color: #b3261e; font-weight: 600; }}
table.incidents tr.error td:first-child {{ border-left: 4px solid #d62728; }}
table.incidents tr.anomaly td:first-child {{ border-left: 4px solid #f28e2b; }}
table.incidents tr.slow td:first-child {{ border-left: 4px solid #b07aa1; }}
svg {{ display: block; max-width: 100%; height: auto; font-size: 11px; }}
svg .axis {{ stroke: #999; fill: #555; }}
svg text.axis {{ stroke: none; }}
svg .marker line {{ stroke-dasharray: 4 3; stroke-width: 1.5; }}
svg .marker.anomaly line {{ stroke: #f28e2b; }} svg .marker.anomaly text {{ fill: #b35c00; }}
svg .marker.error line {{ stroke: #d62728; }} svg .marker.error text {{ fill: #d62728; }}
svg .bar {{ fill: #4e79a7; }} svg .bar.slow {{ fill: #d62728; }}
svg .slow-label {{ fill: #d62728; font-weight: 600; }}
.muted {{ color: #666; }}
</style></head>
<body>
<h1>trainlog-exporter</h1>
<div id="content">
<p class="muted">{readiness} · {summary} · <a href="/metrics">/metrics</a></p>
{content}
</div>
<script>
// Refresh the content in place: the page, and so the scroll position, stays.
setInterval(async () => {{
  try {{
    const response = await fetch(location.href, {{cache: "no-store"}});
    if (!response.ok) return;
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = page.getElementById("content");
    if (fresh) document.getElementById("content").replaceWith(fresh);
  }} catch (error) {{ /* the exporter restarts: the next tick tries again */ }}
}}, {refresh_ms});
</script>
</body></html>
"""
