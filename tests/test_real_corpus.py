"""Every line real runs printed (tests/fixtures/real/*.log), through the exporter's serving path, scored by field.

One exporter process follows one log directory per fixture (``<fixture>/logs/worker_0.log``, or
``scheduler.log`` for a scheduler fixture): each fixture is its own run, so formats never mix
in a file and series never mix between fixtures, and each file's format is detected as in
production. What the fixture's ``.expected.json`` says the lines hold is then looked up on
/metrics: for each rank, the latest value of every printed field (step, loss, lr, grad_norm,
step time, throughput and its unit, every aux loss and named value), the number of failure
events per kind, scheduler events per kind, and the facts of info records. A fixture added
later is picked up without a change here.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from exporter.export.metrics_table import RANK_GAUGES
from tests.support.exporter_process import ExporterProcess
from tests.support.net import Samples, eventually, http_get, scrape
from tests.support.records import fixture_lines

REAL = Path(__file__).parent / "fixtures" / "real"
FIXTURES = sorted(REAL.glob("*.log"))
FILE_RANK = "0"  # worker_0.log: the rank of lines without a rank prefix

# Expected record key -> the gauge it sets (export/metrics_table.py names each printed value).
_GAUGE_OF = {spec.attribute: spec.name for spec in RANK_GAUGES}
_GAUGE_OF.update(step="training_step", lr="training_learning_rate")
_NAMED = {"aux": "training_aux_loss", "extra": "training_metric"}
_NOT_VALUES = {"type", "rank", "nonfinite_loss_steps", "throughput_unit", *_NAMED}


@dataclass(frozen=True)
class Check:
    """One expected sample of /metrics: the family it scores in, the metric, its labels, the value."""

    family: str
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float | str


def run_name(fixture: Path) -> str:
    return fixture.stem


def checks_of(fixture: Path) -> list[Check]:
    """What /metrics must show once the exporter read the fixture, from its expected records."""
    records = json.loads(fixture.with_name(fixture.stem + ".expected.json").read_text())
    run = run_name(fixture)
    latest: dict[tuple[str, str, tuple[tuple[str, str], ...]], float | str] = {}
    events: Counter[tuple[str, str, str, str]] = Counter()
    for record in records:
        rank = FILE_RANK if record.get("rank") is None else str(record["rank"])
        if record["type"] == "step":
            for key, value in record.items():
                if key not in _NOT_VALUES and value is not None:
                    latest[(key, _GAUGE_OF.get(key, f"training_{key}"), (("rank", rank),))] = value
            for group, metric in _NAMED.items():
                for name, value in record.get(group, {}).items():
                    latest[(group, metric, (("name", name), ("rank", rank)))] = value
            if record.get("throughput_unit"):
                latest[("throughput_unit", "training_info", (("rank", rank),
                                                              ("throughput_unit", record["throughput_unit"])))] = 1
        elif record["type"] == "error":
            events[("errors", "training_errors_total", rank, record["kind"])] += 1
        elif record["type"] == "scheduler":
            events[("scheduler", "training_scheduler_events_total", rank, record["kind"])] += 1
        elif record["type"] == "info":
            facts = tuple(sorted((key, str(value)) for key, value in record.items() if key not in ("type", "rank")))
            latest[("info", "training_info", (("rank", rank), *facts))] = 1
    checks = [Check(family, metric, (("run", run), *labels), value)
              for (family, metric, labels), value in latest.items()]
    checks += [Check(family, metric, (("run", run), ("rank", rank), ("kind", kind)), count)
               for (family, metric, rank, kind), count in events.items()]
    return checks


def passes(check: Check, metrics: Samples) -> bool:
    """True when a sample of the metric with these labels (others ignored) holds the value."""
    wanted = dict(check.labels)
    for (name, labels), value in metrics.items():
        if name == check.metric and all(dict(labels).get(key) == label for key, label in wanted.items()):
            if isinstance(check.value, str):  # JSON spells non-finite values "nan", "inf", "-inf"
                return math.isnan(value) if check.value == "nan" else value == float(check.value)
            return math.isclose(value, check.value, rel_tol=1e-9, abs_tol=1e-12)
    return False


def lay_out(log_root: Path) -> list[str]:
    """Each fixture into its own run's log directory; the --log-dir arguments that follow them all."""
    arguments = []
    for fixture in FIXTURES:
        log_dir = log_root / run_name(fixture) / "logs"
        log_dir.mkdir(parents=True)
        name = "scheduler.log" if fixture.stem.endswith("scheduler") else f"worker_{FILE_RANK}.log"
        # Without the header comments a fixture may open with, as the parser tests read it.
        (log_dir / name).write_bytes(b"".join(line + b"\n" for line in fixture_lines(fixture)))
        arguments += ["--log-dir", str(log_dir)]
    return arguments


def score(checks: list[Check], metrics: Samples) -> dict[str, list[Check]]:
    """The failing checks by family (an empty list: all passed)."""
    failing: dict[str, list[Check]] = defaultdict(list)
    for check in checks:
        failing[check.family]  # noqa: B018 - every family shows in the score, failing or not
        if not passes(check, metrics):
            failing[check.family].append(check)
    return failing


def errors_by_run(metrics: Samples) -> Counter[str]:
    """Failure events counted on /metrics, per run, whatever their kind and rank."""
    counted: Counter[str] = Counter()
    for (name, labels), value in metrics.items():
        if name == "training_errors_total":
            counted[dict(labels)["run"]] += int(value)
    return counted


def test_every_real_fixture_is_served_with_every_field_it_printed(tmp_path, capsys):
    assert FIXTURES, "no real fixtures"
    checks = [check for fixture in FIXTURES for check in checks_of(fixture)]
    # Every event the fixtures hold and no other: a healthy fixture (no expected record) counts none.
    expected_errors = Counter({run_name(fixture): 0 for fixture in FIXTURES})
    for check in checks:
        if check.metric == "training_errors_total":
            expected_errors[dict(check.labels)["run"]] += int(check.value)
    arguments = lay_out(tmp_path / "runs")
    with ExporterProcess(*arguments) as exporter:
        eventually(lambda: http_get(exporter.url + "/-/ready")[0] == 200, 15, what="ready")
        with contextlib.suppress(AssertionError):  # the score below says which samples are missing
            eventually(lambda: not any(score(checks, scrape(exporter.url)).values()), 30,
                       what="every expected sample on /metrics")
        metrics = scrape(exporter.url)
        failing = score(checks, metrics)
    counted_errors = errors_by_run(metrics)
    totals = Counter(check.family for check in checks)
    with capsys.disabled():
        print("\nreal corpus score by family (samples on /metrics / expected):")
        for family in sorted(totals):
            print(f"  {family:16} {totals[family] - len(failing[family]):4d} / {totals[family]:4d}")
    missed = [check for family in failing.values() for check in family]
    assert missed == [], "\n".join(f"{check.metric}{dict(check.labels)} != {check.value}" for check in missed)
    assert {run: counted_errors[run] for run in expected_errors} == dict(expected_errors), \
        "failure events on /metrics per run differ from the fixtures' expected records"
