"""serve and analyze are one engine: every simulated incident, read live by a real exporter process (scraped
/metrics and its status page) and after the fact by ``analyze --format json``, gives the same kinds on the
same ranks at the same steps.
"""

from __future__ import annotations

import io
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from exporter import kinds
from exporter.analyze.command import run_analyze
from exporter.simulate.incidents import KINDS as INCIDENTS
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get, scrape
from tests.support.simulated import lines_by_file, run_config, write_simulated

RANKS, STEPS = 4, 240
# One run per incident the simulator knows, each at a step the run reaches. plateau is left out:
# analyze reports a plateau only past the alert's 2,000 steps (exporter/thresholds.py).
SPECS = {
    "nan": "nan:1@150", "spike": "spike:2@120", "hang": "hang:3@150", "crash": "crash:1@150",
    "oom": "oom:2@150", "segfault": "segfault:0@150", "nccl": "nccl:2@150", "hccl": "hccl:1@150", "ecc": "ecc:1@150",
    "node_timeout": "node_timeout:3@150", "watchdog": "watchdog@150", "diverge": "diverge:2@120",
    "norm_shift": "norm_shift@120", "straggler": "straggler:1@100", "slowdown": "slowdown@100",
    "checkpoint": "checkpoint@120", "restart": "restart@170", "restart-loop": "restart-loop@20",
}
LEFT_OUT = {"plateau"}
# A checkpoint save is no incident; a hang is the silence of its culprit (first_stopped_rank, only analyze).
QUIET = {"checkpoint", "hang"}
Outcome = dict[tuple[str, str], tuple[int, int | None]]  # (kind, rank) -> (occurrences, step of the latest)


def test_every_incident_of_the_simulator_is_in_the_comparison():
    assert set(SPECS) | LEFT_OUT == set(INCIDENTS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {name: write_simulated(root, run_config(spec, ranks=RANKS, steps=STEPS), run=name.replace("-", "_"))
            for name, spec in SPECS.items()}


@pytest.fixture(scope="module")
def served(runs) -> dict[str, tuple[dict, str]]:
    """Each run's scraped samples and status page, once the exporter has read every line of every run."""
    lines = {name: sum(len(text) for text in lines_by_file(run_config(SPECS[name], ranks=RANKS, steps=STEPS)).values())
             for name in runs}
    args = [argument for log_dir in runs.values() for argument in ("--log-dir", str(log_dir))]
    with ExporterProcess(*args) as exporter:
        def read_all():
            samples = scrape(exporter.url)
            counted = defaultdict(float)
            for (name, labels), value in samples.items():
                if name == "training_log_lines_total":
                    counted[dict(labels)["run"]] += value
            return samples if all(counted[log_dir.parent.name] == lines[name]
                                  for name, log_dir in runs.items()) else None

        samples = eventually(read_all, 60, interval=0.5, what="every line of every run read")
        status, page = http_get(exporter.url + "/")
        assert status == 200
    return {name: ({key: value for key, value in samples.items() if dict(key[1]).get("run") == log_dir.parent.name},
                   page) for name, log_dir in runs.items()}


def _served(samples: dict) -> Outcome:
    """What /metrics says happened: anomalies with their latest step, errors, restarts, node timeouts."""
    outcome: Outcome = {}
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if name in ("training_anomalies_total", "training_errors_total") and value:
            step = samples.get(("training_last_anomaly_step", tuple(sorted({**labels}.items()))))
            outcome[labels["kind"], labels["rank"]] = (int(value), None if step is None else int(step))
        elif name == "training_restarts_total" and value:
            outcome["restart", labels["rank"]] = (int(value), None)
        elif name == "training_scheduler_node_timeouts_total" and value:
            outcome["node_timeout", labels["node_id"]] = (int(value), None)
    return outcome


def _analyzed(log_dir: Path) -> tuple[Outcome, dict]:
    out = io.StringIO()
    assert run_analyze([str(log_dir)], "json", stdout=out) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    outcome: Outcome = {}
    for finding in run["findings"]:
        kind = kinds.KINDS[finding["kind"]]
        if (kind.family == kinds.FINDING and finding["kind"] != "restart") or finding["kind"] == "hang":
            # first stopped rank, plateau and a hang told at the logs' end: what only the whole log tells (live, a
            # hang is told by the silence past the ranks' thresholds, which a finished log read at once never has)
            continue
        count, _ = outcome.get((finding["kind"], finding["rank"]), (0, None))
        latest = finding.get("last_step", finding["step"]) if kind.family == kinds.ANOMALY else None
        outcome[finding["kind"], finding["rank"]] = (count + finding.get("count", 1), latest)
    return outcome, run


@pytest.mark.parametrize("name", SPECS)
def test_serve_and_analyze_find_the_same_kinds_on_the_same_ranks_at_the_same_steps(name, runs, served):
    samples, page = served[name]
    live = _served(samples)
    after, run = _analyzed(runs[name])
    assert bool(live) == (name not in QUIET), f"{name}: the exporter saw {live or 'nothing'}"
    assert live == after, f"{name}: serve {sorted(live.items())} != analyze {sorted(after.items())}"
    # The status page words the same failures at the same steps: "oom 1 at step 150" in the rank's row.
    for (kind, rank), (count, _) in after.items():
        if kinds.KINDS[kind].family != kinds.ERROR:
            continue
        finding = next(f for f in run["findings"] if (f["kind"], f["rank"]) == (kind, rank))
        row = re.search(rf'<tr class="[^"]*" data-rank="{rank}"[^>]*>(.*?)</tr>', _run_section(page, run["run"]))
        assert row is not None, f"{name}: no row for rank {rank}"
        assert f"{kind} {count} at step {finding.get('last_step', finding['step'])}" in row.group(1), \
            f"{name}: rank {rank}'s row does not say {kind} at step {finding['step']}: {row.group(1)}"


def _run_section(page: str, run: str) -> str:
    start = page.index(f"<h2>run {run}</h2>")
    end = page.find("<section", start)
    return page[start:end if end > 0 else len(page)]


# The root cause of each cascade the simulator writes: (kind, rank), in analyze and served live alike.
CAUSES = {"nan": ("loss_nonfinite", "1"), "crash": ("traceback", "1"), "oom": ("oom", "2"),
          "segfault": ("segfault", "0"), "nccl": ("nccl", "2"), "hccl": ("hccl", "1"),
          "node_timeout": ("node_timeout", "3"), "hang": ("hang", "3"), "ecc": ("hardware", "1")}


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_the_root_cause_of_each_cascade_is_the_culprit_live_and_in_analyze(name, runs, served):
    samples, _ = served[name]
    _, run = _analyzed(runs[name])
    (cause,) = [finding for finding in run["findings"] if finding["root_cause"]]
    assert (cause["kind"], cause["rank"]) == CAUSES[name], cause
    incidents = {(dict(labels)["kind"], dict(labels)["rank"]) for (metric, labels) in samples
                 if metric == "training_incident_info" and dict(labels)["run"] == run["run"]}
    if name == "hang":  # told live by the silence past the thresholds, which a finished log read at once has not
        assert incidents == set()
    elif name == "node_timeout":  # scheduler.log's series names no rank; analyze words it on the rank timed out
        assert incidents == {("node_timeout", "")}
    else:
        assert incidents == {CAUSES[name]}
