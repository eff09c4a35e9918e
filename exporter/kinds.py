"""Every kind of thing the exporter reports, defined once: anomalies, errors, scheduler events, findings.

A kind's entry says how a person reads it, how bad it is, whether it follows another
rank's failure rather than causing one, and which alert pages on it (whose runbook is
``docs/runbooks/<alert>.md``). The counters created at 0, the status page's words and
runbook links, ``analyze``'s findings, OTLP and ``trainlog_kind_info`` (which the alert
rules join on, so a new kind needs no rule of its own) all derive from this table.
``tests/test_kinds.py`` fails when a kind lacks wording, an alert or a runbook.

Nothing here imports the rest of the package: parse/, state/, export/ and analyze/ all read it.
"""

from __future__ import annotations

from typing import NamedTuple

ANOMALY, ERROR, SCHEDULER, FINDING = "anomaly", "error", "scheduler", "finding"
FAMILIES = (ANOMALY, ERROR, SCHEDULER, FINDING)
SEVERITIES = ("critical", "warning", "info")


class Kind(NamedTuple):
    """One kind of event (a NamedTuple: 25 constants, cheaper to define at every start than a dataclass)."""

    name: str
    family: str  # ANOMALY: a step detector's; ERROR: a failure line's; SCHEDULER: scheduler.log's; FINDING: analysis
    words: str  # how a person reads it: "out of memory"
    severity: str  # as the alert's severity label says, when one pages
    # The alert that pages on it; None only with ``quiet`` saying why nothing pages.
    alert: str | None = None
    quiet: str = ""
    # It follows another rank's failure (a collective timeout, a launcher's summary of a
    # child's death) rather than causing one: never the root cause while a primary is there.
    follower: bool = False
    # An anomaly that breaks a run (a NaN, a hang): the cause model (state/cause.py) weighs it among the
    # failures. Every error kind and node_timeout is one without the flag.
    incident: bool = False


_KINDS = (
    # --- anomalies: the step detectors (state/detectors/), counted in training_anomalies_total{kind}
    Kind("loss_nonfinite", ANOMALY, "non-finite loss", "critical", "TrainingLossNonFinite", incident=True),
    Kind("loss_spike", ANOMALY, "loss spike", "warning", "TrainingLossSpike"),
    # After the all-reduce every rank's grad norm is NaN at the step one rank's loss went NaN: a follower
    # of that loss (the origin), the cause only where no loss was non-finite (a NaN filter printing a finite loss).
    Kind("grad_norm_nonfinite", ANOMALY, "non-finite grad norm", "warning",
         quiet="counted and shown beside the loss; a NaN loss pages as TrainingLossNonFinite",
         follower=True, incident=True),
    Kind("grad_norm_spike", ANOMALY, "grad norm spike", "info",
         quiet="context for a loss spike, which pages; a grad norm spike alone is common"),
    Kind("rank_divergence", ANOMALY, "rank divergence", "warning", "TrainingRankDivergence"),
    Kind("slowdown", ANOMALY, "slowdown", "warning", "TrainingSlowdown"),
    # The rank that went silent inside a step while the others waited in a collective (or the run's first
    # to stop, once every rank is silent past its stall threshold): the culprit of a hang, not the ranks
    # that timed out waiting for it. Told by the cause model, across ranks.
    Kind("hang", ANOMALY, "hang (silent inside a step)", "critical", "TrainingStalled", incident=True),
    # --- errors: failure lines (parse/signatures.py), counted in training_errors_total{kind}
    Kind("oom", ERROR, "out of memory", "critical", "TrainingOutOfMemory"),
    Kind("nccl", ERROR, "NCCL error", "critical", "TrainingCommunicationError"),
    Kind("nccl_timeout", ERROR, "NCCL collective timeout", "critical", "TrainingCommunicationError", follower=True),
    Kind("hccl", ERROR, "HCCL error", "critical", "TrainingCommunicationError"),
    # An HCCL collective (or the runtime task under it) that waited for a peer rank in vain: notify wait,
    # socket setup, stream sync timeouts (parse/faults/). It follows the peer's fault (a device ECC error,
    # a lost heartbeat, a crash): the cause's rank, not this one, is the incident.
    Kind("hccl_timeout", ERROR, "HCCL collective timeout", "critical", "TrainingCommunicationError", follower=True),
    # Collectives over the CPU (gloo, MindSpore's CPU ring): they fail when a peer dies (its connection
    # closed or reset) or stops (the wait times out), so they follow that peer's failure.
    Kind("collective", ERROR, "collective failed (peer connection lost)", "critical", "TrainingCommunicationError",
         follower=True),
    Kind("collective_timeout", ERROR, "collective timeout (gloo, MindSpore CPU)", "critical",
         "TrainingCommunicationError",
         follower=True),
    Kind("cuda", ERROR, "CUDA error", "critical", "TrainingProcessCrashed"),
    Kind("segfault", ERROR, "segmentation fault", "critical", "TrainingProcessCrashed"),
    Kind("traceback", ERROR, "Python traceback", "critical", "TrainingProcessCrashed"),
    Kind("elastic", ERROR, "worker failed (elastic agent)", "critical", "TrainingProcessCrashed", follower=True),
    Kind("killed", ERROR, "killed (SIGKILL)", "critical", "TrainingProcessCrashed"),
    Kind("hardware", ERROR, "hardware error", "critical", "TrainingHardwareError"),
    # A launcher's SIGTERM to the workers left after another one failed, or a stop from outside: it follows
    # any failure of the run, and is the cause only where nothing else is (a preemption).
    Kind("terminated", ERROR, "stopped by a signal from outside the job", "warning", follower=True,
         quiet="a stop from outside (a preemption, the scheduler, a user's Ctrl-C) is no failure of the training: "
               "counted and shown; an unplanned one pages by the silence after it (TrainingStalled)"),
    Kind("other", ERROR, "error", "info", quiet="an unclassified error line: exported, not paged"),
    # --- scheduler.log (msrun), counted in training_scheduler_events_total{kind}
    Kind("worker_registered", SCHEDULER, "worker registered", "info", quiet="the cluster forming: no failure"),
    Kind("cluster_initialized", SCHEDULER, "cluster initialized", "info",
         quiet="a (re)start of the job, counted as a restart (TrainingRestartLoop)"),
    Kind("node_timeout", SCHEDULER, "node timed out", "critical", "TrainingNodeTimedOut"),
    Kind("worker_exited", SCHEDULER, "worker exited", "info",
         quiet="a worker leaving: the end of a run, or of a failure that pages on its own"),
    # --- findings: what a whole log or the ranks together tell
    Kind("restart", FINDING, "restart", "critical", "TrainingRestartLoop"),
    Kind("loss_plateau", FINDING, "loss plateau", "info", "TrainingLossPlateau"),
    Kind("first_stopped_rank", FINDING, "first stopped rank", "warning", "TrainingFirstStalledRank"),
    Kind("slow", FINDING, "slow rank", "warning", "TrainingStraggler"),
)

KINDS: dict[str, Kind] = {kind.name: kind for kind in _KINDS}


def named(family: str) -> tuple[str, ...]:
    """The kinds of one family, in the table's order."""
    return tuple(kind.name for kind in _KINDS if kind.family == family)


ANOMALY_KINDS = named(ANOMALY)
ERROR_KINDS = named(ERROR)
SCHEDULER_KINDS = named(SCHEDULER)
FOLLOWER_KINDS = frozenset(kind.name for kind in _KINDS if kind.follower)
# The failures a root cause is chosen among: every error, and a node the scheduler timed out.
FAILURE_KINDS = frozenset((*ERROR_KINDS, "node_timeout"))
# Every kind the cause model weighs (state/cause.py): the failures and the anomalies that break a run.
INCIDENT_KINDS = FAILURE_KINDS | frozenset(kind.name for kind in _KINDS if kind.incident)
# Kinds that say only that the process died, not why: on the same rank and step, a named failure (an OOM
# inside the traceback it raised) is the cause's kind; on a rank whose collective failed, they follow that failure
# (a scheduler that timed out the node of a worker whose ring wait had failed: msrun's after a hang elsewhere).
GENERIC_KINDS = frozenset(("traceback", "other", "elastic", "node_timeout"))


def words(kind: str) -> str:
    """How a person reads a kind ("out of memory"); an unknown kind as it is."""
    entry = KINDS.get(kind)
    return entry.words if entry is not None else kind


def alert(kind: str) -> str | None:
    """The alert that pages on a kind (its runbook: docs/runbooks/<alert>.md), None when none does."""
    entry = KINDS.get(kind)
    return entry.alert if entry is not None else None


def error_kind(kind: str) -> str:
    """An error's kind as counted: a kind the table does not know is ``other``, never a crash."""
    entry = KINDS.get(kind)
    return kind if entry is not None and entry.family == ERROR else "other"
