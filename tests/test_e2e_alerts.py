"""End to end: `simulate` injects an incident, the exporter follows, a real Prometheus alerts.

Each drill is a live simulated run with one incident. Prometheus scrapes the exporter
every second and evaluates the shipped rules, in a copy whose windows and `for`
durations are shortened by TEST_VALUES (the shipped file is untouched). For each drill,
exactly the expected alerts must fire, on exactly the expected ranks, and no other
alert may even be pending for the run except its documented co-alerts; the healthy
runs must raise nothing at all.
"""

from __future__ import annotations

import re

import pytest

from tests.support.drill_rules import shorten_rules
from tests.support.drills import INCIDENT_RULES, SHIPPED_RULES, Drill, FireDrills, SeenAlert, seen_alert
from tests.support.net import eventually
from tests.support.prometheus import require_binary

# One test value per key of the THRESHOLDS table of deploy/prometheus/rules/trainlog-alerts.yml
# (a new key there fails the drills until it gets one here). Drill runs last about 15 s with
# a step every 0.25 s: windows become seconds, `for` durations (nearly) vanish, and the
# plateau needs fewer steps. Ratios and counts are kept.
TEST_VALUES = {
    "counter_window": "1m",          # 10m: the alert stays firing for a minute after the incident
    "stall_floor_seconds": "5",      # 120 (with the exporter's --stall-floor-seconds, below): 20 steps of silence
    "plateau_steps": "12",           # 2000: with the exporter's plateau window of 10 steps (below)
    "plateau_for": "1s",             # 15m
    "straggler_smoothing": "30s",    # 5m
    "straggler_factor": "1.5",
    "straggler_min_ranks": "3",
    "straggler_for": "0s",           # 10m
    "jitter_window": "4s",           # 15m: shorter than its `for`, as there (one long step cannot fire it)
    "jitter_min_samples": "3",
    "jitter_cv": "0.3",
    "jitter_for": "5s",              # 30m
    "throughput_baseline": "30s",    # 1h
    "throughput_ratio": "0.7",
    "throughput_for": "5s",          # 10m
    "missing_window": "30s",         # 10m
    "missing_for": "5s",             # 20m
    "process_exit_for": "0s",        # 2m (no --process-pattern here: never fires)
    "exporter_job_regex": ".*trainlog.*",
    "exporter_down_for": "5s",       # 5m
    "exporter_vanished_lookback": "1m",  # 1h
    "divergence_window": "30s",      # 10m
    "divergence_settle": "3s",       # 1m: three scrapes
    "divergence_lookback": "33s",    # 11m: window + settle
    "divergence_max_share": "0.5",
}
# Likewise for deploy/prometheus/rules/trainlog-incidents.yml.
INCIDENT_TEST_VALUES = {
    "slowdown_window": "1m",         # 10m
    "restart_loop_window": "2m",     # 1h
    "restart_loop_count": "3",
    "restart_loop_lag": "2s",        # 2m: a run that trains on is above its step of 2 s ago
    "goodput_window": "2m",          # 6h
    "goodput_ratio": "0.5",
    # 3600: a drill accounts a minute at most, and a resume replaying most of a short run is
    # below half for a while; goodput is left to the promtool tests (tests/rules/incidents.yml).
    "goodput_min_seconds": "100000",
    "goodput_for": "1s",             # 30m
}
RULE_TEST_VALUES = {SHIPPED_RULES: TEST_VALUES, INCIDENT_RULES: INCIDENT_TEST_VALUES}
STALL_SECONDS = float(TEST_VALUES["stall_floor_seconds"])
# The plateau tracker over a 60-step run (docs/detectors.md): a window of 10 steps and a
# memory of ~5 steps. Healthy 60-step runs then never go more than ~6 steps without
# improving; a loss flat from step 8 stops improving by step ~30.
# The stall threshold's floor as the rules' copy has it (a step every 0.25 s learns a threshold below it).
EXPORTER_OPTIONS = ("--plateau-window-steps", "10", "--plateau-alpha", "0.2",
                    "--stall-floor-seconds", TEST_VALUES["stall_floor_seconds"])

ALL_RANKS = frozenset({"0", "1", "2", "3"})
NO_RANK = frozenset({""})  # run-level alerts carry no rank label
# Co-alerts. A rank that dies leaves the others stuck in the next collective: the whole
# run goes silent, so the stall alerts follow the error alert. TrainingFirstStalledRank
# goes by log time: it names the survivors that stopped in the same instant (they print
# nothing after their last step, the dying rank prints its error after it), unless they
# print later themselves (NCCL watchdog): then the dying rank.
RUN_GOES_SILENT = {"TrainingStalled": NO_RANK, "TrainingFirstStalledRank": ALL_RANKS}


# A whole run slowing down (a slow card or a shared cause): its throughput drops on every rank, and
# for a few seconds the step-time window holds both levels (jitter).
SLOWS_DOWN = {"TrainingThroughputDrop": ALL_RANKS, "TrainingStepTimeJitter": ALL_RANKS}
# Slowdown: the exporter needs 20 warm-up steps for the baseline, then 20 slow steps.
SLOW_FROM = 25
RESTART_AT = 50  # the job dies training step 50 and resumes from its start (checkpoints every 50 steps)


def dies_with_traceback(rank: str) -> dict[str, frozenset[str]]:
    """An OOM, NCCL or HCCL error inside a Python traceback also counts as a traceback
    (docs/formats-research.md), so TrainingProcessCrashed fires on that rank too."""
    return {**RUN_GOES_SILENT, "TrainingProcessCrashed": frozenset({rank})}


DRILLS = (
    Drill("healthy", (), {}),
    Drill("healthy-pp", (), {}, options=("--pp-stages", "2")),
    # A NaN run stops improving: ends before the plateau alert could follow (12 steps after the NaN).
    Drill("nan", ("nan@12",), {"TrainingLossNonFinite": ALL_RANKS}, steps=22),
    Drill("spike", ("spike:1@30",), {"TrainingLossSpike": frozenset({"1"})}),
    Drill("plateau", ("plateau@8",), {"TrainingLossPlateau": ALL_RANKS}),
    # Every rank waits for the straggler: all slow down alike, none stands out (no TrainingStraggler).
    Drill("straggler", (f"straggler:2@{SLOW_FROM}",), {"TrainingSlowdown": NO_RANK}, SLOWS_DOWN),
    Drill("slowdown", (f"slowdown@{SLOW_FROM}",), {"TrainingSlowdown": NO_RANK}, SLOWS_DOWN),
    # One 30x save: its step shows in the gauges for one step, which no alert's `for` outlasts.
    Drill("checkpoint", ("checkpoint@30",), {},
          may_pend=frozenset({"TrainingStepTimeJitter", "TrainingThroughputDrop"})),
    # A resume replaying 49 steps is no loss anomaly: the replay goes to no detector.
    Drill("restart", (f"restart@{RESTART_AT}",), {}),
    # Dies at step 20 four times; after three restarts the launcher gives up and the run is silent.
    Drill("restart-loop", ("restart-loop",), {"TrainingRestartLoop": NO_RANK}, RUN_GOES_SILENT),
    # The hung rank named by the exporter's cause model: the stall carries it (rank 1, root_cause).
    Drill("hang", ("hang:1@12",), {"TrainingStalled": frozenset({"1"}), "TrainingFirstStalledRank": frozenset({"1"})}),
    Drill("oom", ("oom:2@12",), {"TrainingOutOfMemory": frozenset({"2"})}, dies_with_traceback("2")),
    # The survivors of an NCCL failure time out in the watchdog: a communication error on every rank.
    Drill("nccl", ("nccl:1@12",), {"TrainingCommunicationError": ALL_RANKS}, dies_with_traceback("1")),
    Drill("hccl", ("hccl:3@12",), {"TrainingCommunicationError": frozenset({"3"})},
          dies_with_traceback("3")),
    Drill("crash", ("crash:1@12",), {"TrainingProcessCrashed": frozenset({"1"})}, RUN_GOES_SILENT),
    Drill("segfault", ("segfault:0@12",), {"TrainingProcessCrashed": frozenset({"0"})}, RUN_GOES_SILENT),
    Drill("node-timeout", ("node_timeout:2@12",), {"TrainingNodeTimedOut": NO_RANK}, RUN_GOES_SILENT),
    # A bad card: rank 1's own local norm jumps 12x; when every rank's triples together, nothing.
    Drill("diverge", ("diverge:1@40",), {"TrainingRankDivergence": frozenset({"1"})}),
    # The same in PyNative worker logs: TrainingStateMonitor values beside LossCallback records (issue 26).
    Drill("diverge-pynative", ("diverge:1@40",), {"TrainingRankDivergence": frozenset({"1"})},
          options=("--mode", "pynative")),
    Drill("norm-shift", ("norm_shift@40",), {}),
    # Ascend's cascade (parse/faults/): rank 1's NPU reports an HBM multi-bit ECC error and stops; the
    # others' HCCL notify waits time out. The device fault pages as hardware, the followers as communication.
    Drill("ecc", ("ecc:1@12",),
          {"TrainingHardwareError": frozenset({"1"}), "TrainingCommunicationError": frozenset({"0", "2", "3"})},
          RUN_GOES_SILENT),
    # The cascade: rank 2 runs out of memory, the others time out in the collective it never joins.
    Drill("oom-cascade", ("oom:2@12", "watchdog@12"),
          {"TrainingOutOfMemory": frozenset({"2"}), "TrainingCommunicationError": frozenset({"0", "1", "3"})},
          dies_with_traceback("2")),
)
# What Alertmanager, with the shipped inhibit rules, leaves active of each cascade: (alertname, rank).
CAUSES = {
    "oom-cascade": {("TrainingOutOfMemory", "2")},
    "crash": {("TrainingProcessCrashed", "1")},
    # The NCCL error says why rank 1 crashed: its crash and the others' watchdog timeouts are held back.
    "nccl": {("TrainingCommunicationError", "1")},
    # One page: the stall naming the hung rank; the first stalled rank is held back by it.
    "hang": {("TrainingStalled", "1")},
    # The HCCL error is the cause of its rank's crash (a named failure before the traceback carrying it).
    "hccl": {("TrainingCommunicationError", "3")},
    "segfault": {("TrainingProcessCrashed", "0")},
    "node-timeout": {("TrainingNodeTimedOut", "")},
    # The device fault is the incident: the others' HCCL timeouts (followers) are held back.
    "ecc": {("TrainingHardwareError", "1")},
}
INCIDENTS = [drill for drill in DRILLS if drill.alerts]
FIRE_BUDGET = 45  # seconds from the simulators' start until every expected alert fired
SETTLE = STALL_SECONDS + 3  # after the last run ended: long enough for a wrong stall alert to show


def test_the_copy_of_the_rules_waits_seconds_not_minutes():
    shipped = SHIPPED_RULES.read_text(encoding="utf-8")
    rules = [rule for group in shorten_rules(shipped, TEST_VALUES)["groups"] for rule in group["rules"]]
    waits = {rule["alert"]: rule["for"] for rule in rules if "for" in rule}
    assert waits and all(re.fullmatch(r"[0-5]s", wait) for wait in waits.values()), waits
    silence = next(rule["expr"] for rule in rules
                   if rule.get("record") == "trainlog:rank:silence_over_threshold_seconds")
    assert "_seconds{rank!=\"\"}, 120)" in shipped and ", 120)" not in silence
    assert f"_seconds{{rank!=\"\"}}, {TEST_VALUES['stall_floor_seconds']})" in silence
    # A threshold added to the shipped table needs a test value before the drills run.
    with pytest.raises(ValueError, match="missing \\['stall_floor_seconds'\\]"):
        shorten_rules(shipped, {key: value for key, value in TEST_VALUES.items() if key != "stall_floor_seconds"})


@pytest.fixture(scope="module")
def drills(tmp_path_factory):
    require_binary("prometheus")
    with FireDrills(tmp_path_factory.mktemp("drills"), DRILLS, RULE_TEST_VALUES, EXPORTER_OPTIONS) as running:
        yield running


def _firing_ranks(seen: set[SeenAlert], name: str) -> set[str]:
    return {alert.rank for alert in seen if alert.name == name and alert.state == "firing"}


@pytest.mark.parametrize("drill", INCIDENTS, ids=lambda drill: drill.run)
def test_expected_alerts_fire_on_their_ranks(drills, drill):
    """Through /api/v1/alerts: each expected alert fires, on exactly the expected ranks."""
    def all_fired(seen: set[SeenAlert]) -> bool:
        return all(_firing_ranks(seen, name) >= ranks for name, ranks in drill.alerts.items())

    seen = drills.wait_for_alerts(drill.run, all_fired, FIRE_BUDGET,
                                  what=f"{dict(drill.alerts)} firing for run {drill.run}")
    for name, ranks in drill.alerts.items():
        assert _firing_ranks(seen, name) == ranks, f"{name} fired on ranks {sorted(_firing_ranks(seen, name))}"


@pytest.mark.parametrize("drill", DRILLS, ids=lambda drill: drill.run)
def test_no_other_alert_over_the_whole_drill(drills, drill):
    """Once every run ended: no alert but the expected ones (and co-alerts) fired; a healthy run
    never had an alert even pending.

    Incident runs may have other alerts pending: TrainingMetricsMissing is pending for a
    moment one missing_window after a crash, when the window still holds the error lines
    printed after the last step but no longer the step; its `for` keeps it from firing.
    """
    drills.wait_until_settled(SETTLE, budget=FIRE_BUDGET + 15)
    if not drill.alerts:  # quiet, but not because Prometheus never saw the run
        assert drills.prometheus.query(f'trainlog:run:finished{{run="{drill.run}"}}'), f"run {drill.run} never finished"
    ever = drills.alerts_ever(drill.run)
    judged = ("firing",) if drill.alerts else ("pending", "firing")
    allowed = {**drill.co_alerts, **drill.alerts}
    unexpected = [labels for labels in ever if labels["alertstate"] in judged
                  and labels.get("rank", "") not in allowed.get(labels["alertname"], ())
                  and not (labels["alertstate"] == "pending" and labels["alertname"] in drill.may_pend)]
    assert not unexpected, f"run {drill.run} raised alerts it must not: {unexpected}"
    for name, ranks in drill.alerts.items():
        raised = {labels.get("rank", "") for labels in ever if labels["alertname"] == name}
        assert raised == ranks, f"{name} was pending or firing on ranks {sorted(raised)}, expected {sorted(ranks)}"


@pytest.mark.parametrize("run", sorted(CAUSES))
def test_alertmanager_shows_only_the_cause(drills, run):
    """Prometheus sends every alert to a real Alertmanager running deploy/alertmanager/alertmanager.yml:
    once every alert Prometheus fired for the run has arrived, only the cause is active, the rest inhibited."""
    drills.wait_until_settled(SETTLE, budget=FIRE_BUDGET + 15)
    fired = {(alert.name, alert.rank) for alert in map(seen_alert, drills.prometheus.api("alerts")["alerts"])
             if alert.run == run and alert.state == "firing"}
    assert CAUSES[run] <= fired, f"run {run}: Prometheus fires {sorted(fired)}"

    def all_arrived() -> list[dict] | None:
        alerts = drills.alertmanager.alerts(run=run)
        return alerts if {(a["labels"]["alertname"], a["labels"].get("rank", "")) for a in alerts} >= fired else None

    alerts = eventually(all_arrived, 20, interval=0.25, what=f"Alertmanager to hold the alerts {sorted(fired)}")
    active = {(a["labels"]["alertname"], a["labels"].get("rank", "")) for a in alerts
              if a["status"]["state"] == "active"}
    assert active == CAUSES[run], f"run {run}: active in Alertmanager {sorted(active)}"
    assert all(a["status"]["inhibitedBy"] for a in alerts if a["status"]["state"] != "active")


def test_every_rank_departing_together_is_counted_but_not_alerted(drills):
    """The quiet norm-shift drill is quiet because of the rule's cross-rank part: each rank's own
    departure did reach Prometheus (the exporter compares a rank only with itself)."""
    drills.wait_until_settled(SETTLE, budget=FIRE_BUDGET + 15)
    for run, ranks in (("norm-shift", ALL_RANKS), ("diverge", {"1"}), ("diverge-pynative", {"1"})):
        departed = drills.prometheus.query(f'training_anomalies_total{{kind="rank_divergence",run="{run}"}} > 0')
        assert {sample["metric"]["rank"] for sample in departed} == ranks, (run, departed)


def _by_rank(drills, query: str) -> dict[str, float]:
    return {item["metric"].get("rank", ""): float(item["value"][1]) for item in drills.prometheus.query(query)}


def test_a_resume_counts_one_restart_per_rank_and_its_replayed_steps(drills):
    """restart@50: steps 1..49 run twice; their printed step time (~0.85 s each) is lost, the rest productive."""
    drills.wait_until_settled(SETTLE, budget=FIRE_BUDGET + 15)
    run = 'run="restart"'
    # msrun's scheduler.log sees the workers register again: a restart of its own series (rank "").
    assert _by_rank(drills, f"training_restarts_total{{{run}}}") == dict.fromkeys([*ALL_RANKS, ""], 1.0)
    replayed = _by_rank(drills, f'training_lost_seconds_total{{{run},kind="replayed"}}')
    productive = _by_rank(drills, f"training_productive_seconds_total{{{run}}}")
    for rank in ALL_RANKS:
        assert replayed[rank] == pytest.approx((RESTART_AT - 1) * 0.85, rel=0.03)
        assert productive[rank] == pytest.approx(60 * 0.85, rel=0.03)
    assert _by_rank(drills, f'sum by (rank) (training_anomalies_total{{{run},rank!=""}})') == dict.fromkeys(ALL_RANKS,
                                                                                                         0.0)


def test_a_long_checkpoint_step_is_lost_time_and_no_slowdown(drills):
    drills.wait_until_settled(SETTLE, budget=FIRE_BUDGET + 15)
    run = 'run="checkpoint"'
    checkpoint = _by_rank(drills, f'training_lost_seconds_total{{{run},kind="checkpoint"}}')
    slowdowns = _by_rank(drills, f'training_anomalies_total{{{run},kind="slowdown",rank!=""}}')
    assert slowdowns == dict.fromkeys(ALL_RANKS, 0.0)
    for rank in ALL_RANKS:
        assert checkpoint[rank] == pytest.approx(29 * 0.85, rel=0.1)  # a 30x step, less one step's own time
