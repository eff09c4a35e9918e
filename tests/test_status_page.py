"""The status page's wording and structure: export words the facts the state keeps."""

from __future__ import annotations

import re
from pathlib import Path

from exporter.export.page_charts import MAX_RANK_LINES
from exporter.export.status_page import (
    DEFAULT_RUNBOOK_URL,
    RECENT_ANOMALY_STEPS,
    duration,
    error_summary,
    rank_ranges,
    render_status_page,
)
from exporter.parse import ErrorEvent, faults
from exporter.parse.records import StepLine
from exporter.state import TrainingState
from tests.support.records import fixture_lines, fixture_parser, in_batches, parse_lines

FIXTURES = Path(__file__).parent / "fixtures"
KEY = ("run", "node-0", "3")


def _rank_rows(page: str) -> list[tuple[str, list[str]]]:
    """(class, cells) of every rank row."""
    return [(css, re.findall(r"<td>(.*?)</td>", row))
            for css, row in re.findall(r'<tr class="([^"]*)" data-rank="[^"]*"[^>]*>(.*?)</tr>', page)]


def _steps(state: TrainingState, ranks: range, steps: range, loss=lambda rank, step: 3.0 - step / 1000,
           step_time=lambda rank, step: 0.84, run: str = "run", extra=None) -> None:
    """One batch a step for each rank, as the follower applies a live run."""
    with state.lock:
        for step in steps:
            for rank in ranks:
                key = (run, "node-0", str(rank))
                state.register(key, {"file": f"worker_{rank}.log", "role": "worker"}, None)
                values = {"loss": loss(rank, step), "step_time_seconds": step_time(rank, step), "total_steps": 100}
                state.ingest(key, 1, in_batches(StepLine(step, {**values, **(extra or {})})), None, 1000.0)


def test_error_summaries_name_what_identifies_the_failure():
    assert error_summary({"op": "ALLREDUCE", "seq_num": 7}) == "op ALLREDUCE"
    assert error_summary({"exception": "ChildFailedError", "root_cause_rank": 5, "exitcode": -6, "signal": "SIGABRT",
                          "host": "gpu-7"}) == "ChildFailedError (root_cause_rank 5, exitcode -6, signal SIGABRT)"
    assert error_summary({"message": "CUDA out of memory"}) == "CUDA out of memory"
    assert error_summary({"device": "npu", "requested_bytes": 1024}) == "device npu, requested 1 KiB"
    assert error_summary({"exception": "RuntimeError", "device": "npu", "requested": "260.00 MiB"}) == (
        "RuntimeError (device npu, requested 260.00 MiB)")


def test_a_rank_row_words_the_latest_failure_of_each_kind_and_its_step():
    state = TrainingState()
    with state.lock:
        state.register(KEY, {"file": "worker_3.log", "role": "worker"}, 1000.0)
        state.ingest(KEY, 4, in_batches(
            StepLine(12, {"total_steps": 100, "loss": 2.5}),
            ErrorEvent("nccl_timeout", {"op": "ALLREDUCE", "seq_num": 7}),
            ErrorEvent("oom", {}),
            ErrorEvent("elastic", {"exception": "ChildFailedError", "exitcode": 1, "signal": "SIGKILL"}),
        ), log_timestamp=1000.0, now=1000.0)
    page = render_status_page(state, ready=True, now=1010.0)
    ((css, cells),) = _rank_rows(page)
    assert css == "bad cause"  # its OOM is the run's root cause (the cause model)
    assert cells[:5] == ["node-0", "3", "worker_3.log", "12 / 100", "2.5"]
    assert cells[-4] == "10"  # seconds since the last line
    assert cells[-2] == "oom 1 at step 12, nccl_timeout 1 at step 12, elastic 1 at step 12"
    # the oom said nothing more than its kind
    assert cells[-1] == ("out of memory; NCCL collective timeout: op ALLREDUCE; "
                         "worker failed (elastic agent): ChildFailedError (exitcode 1, signal SIGKILL)")


def test_a_mindspore_oom_says_what_happened_not_runtime_error_twice():
    # The real MindSpore OOM of tests/fixtures/formats/errors_ascend.log: an empty "RuntimeError: "
    # whose framework message says "Out of Memory!!!"; the parser gives an oom and its traceback.
    path = FIXTURES / "formats" / "errors_ascend.log"
    lines = fixture_lines(path)
    start = next(index for index, line in enumerate(lines) if b"run_mindformer.py" in line) - 1
    end = next(index for index, line in enumerate(lines) if b"MallocStaticDevMem" in line) + 1
    records = parse_lines(fixture_parser(path), lines[start:end]).records
    assert sorted(record.kind for record in records) == ["oom", "traceback"]
    state = TrainingState()
    with state.lock:
        state.register(KEY, {"file": "worker_0.log", "role": "worker"}, 1000.0)
        state.ingest(KEY, end - start, in_batches(StepLine(7, {"loss": 2.0}), *records), 1000.0, 1000.0)
    ((_, cells),) = _rank_rows(render_status_page(state, ready=True, now=1000.0))
    # The fault knowledge (parse/faults/) names the fault, its component, and says what to do.
    advice = faults.knowledge().by_id["AISW_MindSpore_Ascend_Backend_41"].advice
    assert cells[-1] == ("out of memory: RuntimeError (code AISW_MindSpore_Ascend_Backend_41, component MindSpore, "
                         "device npu, requested 30.8 GiB). " + advice)
    assert cells[-2] == "oom 1 at step 7, traceback 1 at step 7"  # both still counted


def test_the_loss_chart_draws_a_line_per_rank_and_the_smoothed_median():
    state = TrainingState()
    _steps(state, range(3), range(1, 41))
    page = render_status_page(state, ready=True)
    assert page.count('<svg class="loss-chart"') == 1
    lines = re.findall(r'<polyline class="rank-loss"[^>]*points="([^"]*)"', page)
    assert len(lines) == 3 and all(len(points.split()) == 40 for points in lines)
    (smoothed,) = re.findall(r'<polyline class="smoothed-loss"[^>]*points="([^"]*)"', page)
    assert len(smoothed.split()) == 40
    assert "step 1<" in page and "step 40<" in page  # the x axis spans the steps shown


def test_beyond_16_ranks_the_chart_draws_the_median_and_band():
    state = TrainingState()
    ranks = MAX_RANK_LINES + 4
    _steps(state, range(ranks), range(1, 31), loss=lambda rank, step: 3.0 + rank / 100 - step / 1000)
    page = render_status_page(state, ready=True)
    assert "rank-loss" not in page
    (median,) = re.findall(r'<polyline class="median-loss"[^>]*points="([^"]*)"', page)
    (band,) = re.findall(r'<polygon class="band" points="([^"]*)"', page)
    assert len(median.split()) == 30 and len(band.split()) == 60  # the lower edge there, the upper back
    assert f"median and min-max of {ranks} ranks" in page


def test_a_spike_is_shown_at_its_step_and_the_rows_recover_once_it_is_past():
    state = TrainingState()
    spike = lambda rank, step: 30.0 if step == 40 else 3.0 - step / 1000  # noqa: E731
    _steps(state, range(4), range(1, 61), loss=spike)
    page = render_status_page(state, ready=True)
    assert re.search(r'<g class="marker anomaly" data-step="40">.*?loss spike @ step 40</text>', page)
    assert {css for css, _ in _rank_rows(page)} == {"bad"}  # 20 steps ago: still recent
    assert re.search(r'<tr class="anomaly" data-kind="loss_spike"><td>40</td><td>0-3</td><td>loss spike</td>'
                     rf'<td><a href="{DEFAULT_RUNBOOK_URL}TrainingLossSpike.md">TrainingLossSpike</a></td></tr>', page)
    _steps(state, range(4), range(61, 41 + RECENT_ANOMALY_STEPS + 1), loss=spike)
    rows = _rank_rows(render_status_page(state, ready=True))
    assert {css for css, _ in rows} == {"past"}  # no longer red ...
    assert all(cells[9] == "loss_spike 1 at step 40" for _, cells in rows)  # ... and still saying when


def test_the_slow_rank_is_marked_in_the_bars_the_rows_and_the_incidents():
    state = TrainingState()
    _steps(state, range(8), range(1, 41), step_time=lambda rank, step: 2.1 if rank == 5 and step > 10 else 0.84)
    page = render_status_page(state, ready=True, runbook_url="https://runbooks.example/team")
    slow_rows = [cells for css, cells in _rank_rows(page) if "slow" in css.split()]
    assert [cells[1] for cells in slow_rows] == ["5"] and slow_rows[0][7] == "2.100 slow 2.5x"
    assert page.count('<rect class="bar slow"') == 1 and page.count('<rect class="bar"') == 7
    assert "rank 5: 2.1 s per step (slow)" in page
    assert ('<td>5</td><td>slow rank: 2.5x the run&#x27;s median step time</td>'
            '<td><a href="https://runbooks.example/team/TrainingStraggler.md">') in page


def test_eta_from_the_step_the_total_and_the_slowest_pace_and_goodput_only_when_printed():
    state = TrainingState()
    _steps(state, range(3), range(1, 41), step_time=lambda rank, step: 2.0 if rank == 2 else 1.0)
    page = render_status_page(state, ready=True)
    assert "3 ranks · step 40 / 100 · ETA 2 min 00 s at 2 s per step (the slowest rank&#x27;s pace)" in page
    assert "goodput" not in page
    _steps(state, range(3), range(41, 42), extra={"goodput": 0.93})
    assert "· goodput 0.93</p>" in render_status_page(state, ready=True)


def test_everything_from_a_log_is_escaped():
    hostile = "<script>alert(1)</script>"
    state = TrainingState()
    key = (hostile, "node-<b>", "0")
    with state.lock:
        state.register(key, {"file": f"{hostile}.log", "role": "worker"}, 1000.0)
        state.ingest(key, 2, in_batches(StepLine(3, {"loss": 2.0}),
                                        ErrorEvent("oom", {"exception": hostile, "message": f"{hostile} & more"})),
                     1000.0, 1000.0)
    page = render_status_page(state, ready=True, now=1000.0)
    assert page.count("<script") == 1  # the page's own refresh script, nothing from the log
    assert "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.log" in page
    assert "run &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_small_words():
    assert rank_ranges(["0", "1", "2", "3", "5", "7", "8", "-"]) == "0-3, 5, 7-8, -"
    assert [duration(seconds) for seconds in (12, 245, 3 * 3600 + 720, 2 * 86400 + 3 * 3600)] == [
        "12 s", "4 min 05 s", "3 h 12 min", "2 d 03 h"]


def test_a_hung_rank_is_the_cause_not_a_healthy_row_and_a_dead_run_has_no_eta():
    """Rank 3 stopped inside step 31 without a word; the others stopped at step 40 (in the collective it never
    joined). Once every rank is silent past its own stall threshold, the cause model names rank 3 a hang."""
    state = TrainingState()
    _steps(state, range(3), range(1, 41))
    _steps(state, range(3, 4), range(1, 31))
    alive = render_status_page(state, ready=True, now=1010.0)
    assert "ETA" in alive and "root cause" not in alive
    with state.lock:
        state.settle(1000.0 + 3600.0)  # past every rank's threshold (no pace learned here: the start-up allowance)
    page = render_status_page(state, ready=True, now=1000.0 + 3600.0)
    assert "ETA" not in page
    assert "stopped: root cause hang (silent inside a step) after step 30 on rank 3 (node-0)" in page
    rows = {re.search(r'data-rank="([^"]*)"', row).group(1): css
            for css, row in re.findall(r'<tr class="([^"]*)" (data-rank="[^"]*"[^>]*)>', page)}
    assert rows["3"] == "bad cause" and rows["0"] == ""
