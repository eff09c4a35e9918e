"""The human view at ``/``: one row per rank, the stalest and failing ranks stand out."""

from __future__ import annotations

import html
import time
from collections.abc import Mapping

from exporter.state import TrainingState

_STALE_AFTER_SECONDS = 600  # the troubleshooting guide's "no log line for 10 minutes"


def render_status_page(state: TrainingState, ready: bool, now: float | None = None) -> str:
    now = time.time() if now is None else now
    with state.lock:
        rows = [_row(key, rank, now) for key, rank in sorted(state.series.items(), key=_rank_order)]
        stats = state.stats
        summary = (f"{stats.files_followed} files followed · {stats.bytes_read_total:,} bytes read · "
                   f"{stats.lines_unparsed_total:,} lines unparsed")
    readiness = "ready" if ready else "waiting for the log directories"
    body = "\n".join(rows) or '<tr><td colspan="12">No log files found yet.</td></tr>'
    return _PAGE.format(summary=html.escape(summary), readiness=readiness, rows=body)


def _rank_order(item):
    (run, node, rank), _ = item
    return run, node, (int(rank) if rank.isdigit() else -1), rank


def _fmt(value, spec: str = ".4g") -> str:
    return "" if value is None else format(value, spec)


def _row(key, rank, now: float) -> str:
    run, node, rank_label = key
    age = None if rank.last_log_timestamp is None else max(0.0, now - rank.last_log_timestamp)
    errors = ", ".join(f"{kind} {count}" for kind, count in rank.errors.items() if count)
    anomalies = ", ".join(f"{kind} {count}" for kind, count in rank.anomalies.items() if count)
    details = "; ".join(filter(None, map(error_summary, rank.last_error_facts.values())))
    classes = []
    if age is not None and age > _STALE_AFTER_SECONDS:
        classes.append("stale")
    if errors or anomalies:
        classes.append("bad")
    step = "" if rank.step is None else f"{rank.step}" + (f" / {rank.total_steps}" if rank.total_steps else "")
    cells = (run, node, rank_label or "-", rank.info.get("file", ""), step,
             _fmt(rank.loss), _fmt(rank.learning_rate, ".3e"), _fmt(rank.grad_norm),
             _fmt(rank.step_time_seconds, ".3f"), _fmt(age, ".0f"), errors or anomalies, details)
    tds = "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
    return f'<tr class="{" ".join(classes)}">{tds}</tr>'


def error_summary(detail: Mapping[str, str | float]) -> str:
    """One short phrase for a failure: the exception type and what identifies the failure."""
    head = detail.get("exception") or detail.get("message") or ""
    facts = [f"{name} {detail[name]}" for name in _SUMMARY_FACTS if name in detail]
    return f"{head} ({', '.join(facts)})" if head and facts else str(head) or ", ".join(facts)


# Detail keys worth a place in the summary, in this order.
_SUMMARY_FACTS = ("op", "code", "cuda_error", "nccl_error", "root_cause_rank", "exitcode", "signal")


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>trainlog-exporter</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; }}
table {{ border-collapse: collapse; font-size: 0.9rem; }}
th, td {{ padding: 0.3rem 0.6rem; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ background: #f3f3f5; }}
tr.stale td {{ background: #fff4d6; }}
tr.bad td {{ background: #fde2e1; }}
.muted {{ color: #666; }}
</style></head>
<body>
<h1>trainlog-exporter</h1>
<p class="muted">{readiness} · {summary} · <a href="/metrics">/metrics</a></p>
<table>
<thead><tr><th>run</th><th>node</th><th>rank</th><th>file</th><th>step</th><th>loss</th><th>lr</th>
<th>grad norm</th><th>step s</th><th>s since last line</th><th>errors / anomalies</th><th>last error</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""
