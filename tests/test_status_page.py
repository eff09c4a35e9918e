"""The status page's wording: export words the facts the state keeps."""

from __future__ import annotations

import re

from exporter.export.status_page import error_summary, render_status_page
from exporter.parse import ErrorEvent
from exporter.parse.records import StepLine
from exporter.state import TrainingState
from tests.support.records import in_batches

KEY = ("run", "node-0", "3")


def test_error_summaries_name_what_identifies_the_failure():
    assert error_summary({"op": "ALLREDUCE", "seq_num": 7}) == "op ALLREDUCE"
    assert error_summary({"exception": "ChildFailedError", "root_cause_rank": 5, "exitcode": -6, "signal": "SIGABRT",
                          "host": "gpu-7"}) == "ChildFailedError (root_cause_rank 5, exitcode -6, signal SIGABRT)"
    assert error_summary({"message": "CUDA out of memory"}) == "CUDA out of memory"
    assert error_summary({"device": "npu", "requested_bytes": 1024}) == ""


def test_a_rank_row_words_the_latest_failure_of_each_kind():
    state = TrainingState()
    with state.lock:
        state.register(KEY, {"file": "worker_3.log", "role": "worker"}, 1000.0)
        state.ingest(KEY, 4, in_batches(
            StepLine(12, {"total_steps": 100, "loss": 2.5}),
            ErrorEvent("nccl_timeout", {"op": "ALLREDUCE", "seq_num": 7}),
            ErrorEvent("oom", {"device": "npu"}),
            ErrorEvent("elastic", {"exception": "ChildFailedError", "exitcode": 1, "signal": "SIGKILL"}),
        ), log_timestamp=1000.0, now=1000.0)
    page = render_status_page(state, ready=True, now=1010.0)
    (row,) = re.findall(r'<tr class="bad">(.*?)</tr>', page)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[:6] == ["run", "node-0", "3", "worker_3.log", "12 / 100", "2.5"]
    assert cells[-3] == "10"  # seconds since the last line
    assert cells[-1] == "op ALLREDUCE; ChildFailedError (exitcode 1, signal SIGKILL)"  # the oom said nothing to show
