"""The alert rules' thresholds that the package itself uses: one table, read by analyze, the status page
and the dashboards' generator.

Prometheus rule files have no variables: ``deploy/prometheus/rules/trainlog-alerts.yml``
writes each number in its THRESHOLDS table and its rules, and ``tests/test_rules.py``
fails when a value here differs from the value there.
"""

from __future__ import annotations

# The least silence after which a rank counts as stalled (its threshold is learned from its own pace above
# it, exporter/state/detectors/stall.py): the exporter's default --stall-floor-seconds, TrainingStalled's floor.
STALL_FLOOR_SECONDS = 120
# Steps without improvement of the smoothed loss that are a plateau: TrainingLossPlateau, analyze's finding.
PLATEAU_STEPS = 2000
# A rank's step time over the run's median by this factor, among at least this many ranks: TrainingStraggler.
STRAGGLER_FACTOR = 1.5
STRAGGLER_MIN_RANKS = 3

# The rules' THRESHOLDS table keys of the values above.
RULE_KEYS = {"stall_floor_seconds": STALL_FLOOR_SECONDS, "plateau_steps": PLATEAU_STEPS,
             "straggler_factor": STRAGGLER_FACTOR, "straggler_min_ranks": STRAGGLER_MIN_RANKS}
