"""Grafana dashboards: generated from grafana/build.py, loadable by the SDK's models, and
every query valid PromQL that returns data from a real exporter scraped by a real Prometheus.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from exporter.app import Exporter
from exporter.settings import load_settings
from tests.support.dashboards import BUILTIN_VARIABLES, panels, queries, substitute
from tests.support.drills import SHIPPED_RULES
from tests.support.prometheus import PrometheusServer
from tests.support.simulated import run_config, write_simulated

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
DASHBOARDS = GRAFANA / "dashboards"

HEALTHY_RUN = "dsmoe-healthy"
INCIDENT_RUN = "dsmoe-incident"
PIPELINE_STAGE_RANK = "8"  # a rank that logs but prints no loss

# Panels (and annotations) that only show incidents: valid PromQL on every run, data only
# in the incident run. "Other step metrics" needs a printed extra field, which only the
# incident run's loss-scaled rank prints.
INCIDENT_ONLY = {
    "Firing training alerts",
    "Anomalies and errors",
    "Anomalies and errors in the time range",
    "Errors by rank and kind",
    "Errors over time",
    "Other step metrics",
    "annotation: Anomalies",
    "annotation: Errors",
    "annotation: Firing alerts",
}


def load_build_module():
    spec = importlib.util.spec_from_file_location("grafana_build", GRAFANA / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(DASHBOARDS.glob("*.json"))}


# ---------------------------------------------------------------- generated from code


def test_committed_json_equals_a_fresh_build():
    rendered = load_build_module().render_all()
    assert sorted(rendered) == sorted(committed()), "dashboard files differ from build.py's list"
    for name, content in rendered.items():
        assert (DASHBOARDS / name).read_text(encoding="utf-8") == content, \
            f"{name} is stale: run python grafana/build.py"


def test_check_mode_fails_on_stale_json(tmp_path):
    shutil.copytree(DASHBOARDS, tmp_path, dirs_exist_ok=True)
    check = [sys.executable, str(GRAFANA / "build.py"), "--check", "--out", str(tmp_path)]
    assert subprocess.run(check, capture_output=True).returncode == 0
    stale = tmp_path / "training-ranks.json"
    stale.write_text(stale.read_text().replace("Training ranks", "Training ranks (edited by hand)"))
    result = subprocess.run(check, capture_output=True, text=True)
    assert result.returncode == 1
    assert "training-ranks.json" in result.stderr


# ---------------------------------------------------------------- the SDK's schema


def lost_in_round_trip(original, reloaded, path: str = "") -> list[str]:
    """Where the SDK's models dropped or changed what the JSON said (they may add defaults)."""
    if isinstance(original, dict) and isinstance(reloaded, dict):
        problems = []
        for key, value in original.items():
            if key not in reloaded:
                problems.append(f"{path}/{key}: unknown to the model")
            else:
                problems.extend(lost_in_round_trip(value, reloaded[key], f"{path}/{key}"))
        return problems
    if isinstance(original, list) and isinstance(reloaded, list) and len(original) == len(reloaded):
        return [problem for index, (a, b) in enumerate(zip(original, reloaded, strict=True))
                for problem in lost_in_round_trip(a, b, f"{path}[{index}]")]
    return [] if original == reloaded else [f"{path}: {original!r} became {reloaded!r}"]


def round_trip(data: dict) -> dict:
    register_default_plugins()
    return json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))


@pytest.mark.parametrize("name", sorted(committed()))
def test_dashboard_loads_in_the_sdk_models_without_loss(name):
    data = committed()[name]
    assert lost_in_round_trip(data, round_trip(data)) == []


def test_round_trip_check_catches_fields_the_schema_does_not_know():
    data = committed()["training-overview.json"]
    data["panels"][1]["fieldConfig"]["defaults"]["unitt"] = "s"
    data["panels"][1]["gridPos"]["w"] = "wide"
    assert lost_in_round_trip(data, round_trip(data)) != []


# ---------------------------------------------------------------- content


def test_training_dashboards_have_the_datasource_run_node_rank_variables():
    for name in ("training-overview.json", "training-ranks.json"):
        variables = [variable["name"] for variable in committed()[name]["templating"]["list"]]
        assert variables == ["datasource", "run", "node", "rank"], name


def test_every_query_panel_uses_the_datasource_variable_and_sets_a_unit():
    for name, dashboard in committed().items():
        for panel in panels(dashboard):
            if panel.get("targets"):
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, panel["title"])
            if panel["type"] in ("timeseries", "stat", "bargauge", "status-history"):
                assert panel["fieldConfig"]["defaults"].get("unit"), (name, panel["title"])


def panel_by_title(dashboard: dict, title: str) -> dict:
    return next(panel for panel in panels(dashboard) if panel["title"] == title and panel["type"] != "row")


def test_units_of_the_key_panels():
    overview = committed()["training-overview.json"]
    units = {title: panel_by_title(overview, title)["fieldConfig"]["defaults"]["unit"]
             for title in ("Loss", "Learning rate", "Step time", "ETA")}
    assert units == {"Loss": "none", "Learning rate": "sci", "Step time": "s", "ETA": "dtdurations"}


def test_per_rank_series_link_to_the_rank_drilldown():
    overview = committed()["training-overview.json"]
    per_rank = [panel for panel in panels(overview)
                if any("{{rank}}" in target.get("legendFormat", "") for target in panel.get("targets", []))]
    assert per_rank
    for panel in per_rank:
        urls = [link["url"] for link in panel["fieldConfig"]["defaults"].get("links", [])]
        assert any(url.startswith("/d/trainlog-ranks/") and "var-rank=${__field.labels.rank}" in url
                   for url in urls), panel["title"]


def test_every_alert_links_to_its_runbook():
    build = load_build_module()
    overview = committed()["training-overview.json"]
    runbooks = panel_by_title(overview, "Alert runbooks")["options"]["content"]
    assert len(build.ALERT_NAMES) >= 13  # read from deploy/prometheus/rules
    for alert in build.ALERT_NAMES:
        assert build.RUNBOOK_URL.format(alert) in runbooks
        assert (ROOT / "docs" / "runbooks" / f"{alert}.md").exists()
    alerts = panel_by_title(overview, "Firing training alerts")
    links = [link for override in alerts["fieldConfig"]["overrides"]
             if override["matcher"]["options"] == "alertname" for prop in override["properties"]
             if prop["id"] == "links" for link in prop["value"]]
    assert links and links[0]["url"] == build.RUNBOOK_URL.format("${__data.fields.alertname}")


def test_provisioning_matches_the_dashboards():
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    (datasource,) = datasources["datasources"]
    assert datasource["type"] == "prometheus"
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "trainlog.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    for name, dashboard in committed().items():
        (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
        assert variable["current"]["value"] == datasource["uid"], name


# ---------------------------------------------------------------- PromQL against a real Prometheus


def pynative_step(step: int, loss: str, grad_norm: str = "1.021344") -> str:
    return (f"[INFO] 2026-06-09 10:23:{step % 60:02d} [mindformers/pynative/callback/loss_callback.py:231] _print_log: "
            f"{{ step:[  {step}/ 1000], loss:   {loss}, per_step_time:    841ms, lr: 9.012345e-05, "
            f"grad_norm:   {grad_norm}, "
            f"throughput:  12.48T, load_balancing_loss: 0.001198, mtp_1_loss:   2.301245 }}\n")


OOM_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/job/mindformers/run_mindformer.py", line 264, in main\n'
    "    trainer.train()\n"
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 5; 79.35 GiB total capacity; "
    "76.80 GiB already allocated)\n"
)


def simulated_run(base: Path, run: str) -> Path:
    """200 steps of a simulated 8-rank run named `run`, written 10 minutes ago, plus a
    pipeline stage rank that printed no loss and nothing for an hour."""
    logs = write_simulated(base, run_config(ranks=8, steps=1000), run=run, until_slot=200)
    pipeline_stage = logs / f"worker_{PIPELINE_STAGE_RANK}.log"
    pipeline_stage.write_text(
        "[INFO] 2026-06-09 10:20:33 [mindformers/tools/logger.py:52] Running MindFormers in PYNATIVE_MODE.\n"
        "[INFO] 2026-06-09 10:20:40 [mindformers/core/context/build_context.py:312] pipeline stage 0 of 2: "
        "the last stage prints the loss\n")
    now = time.time()
    for path in logs.iterdir():
        written = now - (3600 if path == pipeline_stage else 600)
        os.utime(path, (written, written))
    return logs


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as log:
        log.write(text)


HUNG_RANK = "6"  # prints nothing more in the incident run


def write_incidents(healthy: Path, incident: Path) -> None:
    """Fresh steps on every loss-printing rank of the healthy run. In the incident run: a NaN
    loss on rank 3, an OOM on rank 5, rank 6 hung, and a loss-scaled rank 0."""
    for rank in range(8):
        append(healthy / f"worker_{rank}.log", pynative_step(201, "2.190113"))
        if str(rank) not in ("3", "5", HUNG_RANK):
            append(incident / f"worker_{rank}.log", pynative_step(201, "2.190113"))
    append(incident / "worker_3.log", pynative_step(201, "nan", grad_norm="nan"))
    append(incident / "worker_5.log", OOM_TRACEBACK)
    # A step line carrying a numeric field beyond the known ones (-> training_metric).
    append(incident / "worker_0.log", pynative_step(202, "2.190113").replace(" }", ", loss_scale: 32768.0 }"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[PrometheusServer]:
    base = tmp_path_factory.mktemp("dashboards")
    healthy, incident = simulated_run(base, HEALTHY_RUN), simulated_run(base, INCIDENT_RUN)
    settings = load_settings(log_dir=[healthy, incident], web_listen_address="127.0.0.1:0", node="node-0",
                             state_file=None)
    exporter = Exporter(settings)
    exporter.start()
    # A stand-in rule so that ALERTS has a firing Training* series (the shipped rules wait minutes).
    rules = base / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-test", "rules": [
        {"alert": "TrainingOutOfMemory", "expr": 'training_errors_total{kind="oom"} > 0',
         "labels": {"severity": "critical"}},
    ]}]}))
    try:
        # The shipped rules too: the dashboards read their run-level recording rules.
        with PrometheusServer(base / "prometheus", [f"127.0.0.1:{exporter.http.port}"],
                              rule_files=[rules, SHIPPED_RULES]) as prometheus:
            # A few scrapes of the state before the incident, so increase() sees it happen.
            prometheus.wait_for_result(f'count_over_time(training_step{{run="{INCIDENT_RUN}", rank="3"}}[1m]) >= 3')
            write_incidents(healthy, incident)
            prometheus.wait_for_result(f'training_step{{run="{HEALTHY_RUN}", rank="7"}} == 201')
            prometheus.wait_for_result(f'training_anomalies_total{{run="{INCIDENT_RUN}", kind="loss_nonfinite"}} > 0')
            prometheus.wait_for_result(
                f'ALERTS{{alertname="TrainingOutOfMemory", alertstate="firing", run="{INCIDENT_RUN}"}}')
            prometheus.wait_for_result(f'training_metric{{run="{INCIDENT_RUN}", name="loss_scale"}}')
            yield prometheus
    finally:
        exporter.stop()


_LABEL_VALUES = re.compile(r"^label_values\((?P<match>.+),\s*(?P<label>\w+)\)$")


def grafana_regex_escape(value: str) -> str:
    """How Grafana puts a multi-value variable's value into a PromQL regex string."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def resolve_variables(dashboard: dict, prometheus: PrometheusServer, run: str, pick_all: bool) -> dict[str, str]:
    """Run each query variable's label_values() like Grafana, in order; "All" or the first value."""
    values = dict(BUILTIN_VARIABLES)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        found = _LABEL_VALUES.match(variable["query"])
        assert found, f"variable {variable['name']}: not a label_values() query"
        options = prometheus.label_values(found["label"], substitute(found["match"], values))
        assert options, f"variable {variable['name']} has no values ({variable['query']})"
        if variable["name"] == "run":
            assert run in options
            values["run"] = run
        elif pick_all and variable.get("includeAll"):
            every_option = "(" + "|".join(map(grafana_regex_escape, options)) + ")"
            values[variable["name"]] = variable.get("allValue") or every_option
        else:
            values[variable["name"]] = grafana_regex_escape(options[0])
    return values


@pytest.mark.parametrize("pick_all", [True, False], ids=["all-ranks", "first-rank"])
@pytest.mark.parametrize("run", [HEALTHY_RUN, INCIDENT_RUN])
@pytest.mark.parametrize("name", sorted(committed()))
def test_every_query_is_valid_promql_that_returns_data(stack, name, run, pick_all):
    dashboard = committed()[name]
    values = resolve_variables(dashboard, stack, run, pick_all)
    problems = []
    for title, expr in queries(dashboard):
        concrete = substitute(expr, values)
        answer = stack.answer(concrete)
        if answer.get("status") != "success":
            problems.append(f"{title}: invalid: {concrete}: {answer.get('error')}")
        elif not answer["data"]["result"] and (title not in INCIDENT_ONLY or run == INCIDENT_RUN and pick_all):
            problems.append(f"{title}: no data: {concrete}")
    assert problems == []


def loss_printed_query() -> str:
    ranks_table = panel_by_title(committed()["training-ranks.json"], "Per-rank state")
    return next(target["expr"] for target in ranks_table["targets"] if target["legendFormat"] == "loss printed")


def test_pipeline_stage_rank_is_labelled_as_printing_no_loss(stack):
    values = {"run": HEALTHY_RUN, "node": ".*", "rank": ".+"}
    printed = {sample["metric"]["rank"]: sample["value"][1]
               for sample in stack.query(substitute(loss_printed_query(), values))}
    assert printed[PIPELINE_STAGE_RANK] == "0"
    assert {printed[str(rank)] for rank in range(8)} == {"1"}
    mapping = panel_by_title(committed()["training-ranks.json"], "Per-rank state")["fieldConfig"]["overrides"]
    texts = [prop["value"][0]["options"]["0"]["text"] for override in mapping for prop in override["properties"]
             if prop["id"] == "mappings"]
    assert texts == ["no loss (pipeline stage that prints none)"]


def test_first_stalled_rank_is_the_hung_one_not_the_pipeline_stage(stack):
    # The pipeline stage's log is older still, but it never printed a step.
    panel = panel_by_title(committed()["training-ranks.json"], "First stalled rank")
    expr = substitute(panel["targets"][0]["expr"], {"run": INCIDENT_RUN, "node": ".*", "rank": ".+"})
    (sample,) = stack.query(expr)
    assert sample["metric"]["rank"] == HUNG_RANK


def test_silence_is_coloured_against_each_rank_s_own_stall_threshold(stack):
    # The silence history's colour is the share of the rank's learned threshold (training_stall_threshold_seconds,
    # never below the floor), not a fixed number of seconds: the hung rank, silent ten minutes, is past its own;
    # the ranks that printed a moment ago are far below theirs.
    panel = next(panel for panel in panels(committed()["training-ranks.json"])
                 if panel["title"].startswith("Silence: ") and panel["type"] == "status-history")
    assert "training_stall_threshold_seconds" in panel["targets"][0]["expr"]
    steps = [(step["value"], step["color"]) for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert steps == [(None, "green"), (0.5, "yellow"), (1.0, "red")]
    expr = substitute(panel["targets"][0]["expr"], {"run": INCIDENT_RUN, "node": ".*", "rank": ".+"})
    share = {sample["metric"]["rank"]: float(sample["value"][1]) for sample in stack.query(expr)}
    assert share[HUNG_RANK] >= 1.0, share
    assert share["0"] < 0.5, share
