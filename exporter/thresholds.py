"""The alert rules' thresholds that the package itself uses: one table, read by analyze, the status page
and the dashboards' generator.

Prometheus rule files have no variables: ``deploy/prometheus/rules/trainlog-alerts.yml``
writes each number in its THRESHOLDS table and its rules, and ``tests/test_rules.py``
fails when a value here differs from the value there.
"""

from __future__ import annotations

# Silence after which a run is stalled: TrainingStalled, the status page's stale rows.
STALL_SECONDS = 600
# Steps without improvement of the smoothed loss that are a plateau: TrainingLossPlateau, analyze's finding.
PLATEAU_STEPS = 2000
# A rank's step time over the run's median by this factor, among at least this many ranks: TrainingStraggler.
STRAGGLER_FACTOR = 1.5
STRAGGLER_MIN_RANKS = 3

# The rules' THRESHOLDS table keys of the values above.
RULE_KEYS = {"stall_seconds": STALL_SECONDS, "plateau_steps": PLATEAU_STEPS, "straggler_factor": STRAGGLER_FACTOR,
             "straggler_min_ranks": STRAGGLER_MIN_RANKS}
