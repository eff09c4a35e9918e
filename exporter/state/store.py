"""The single source of truth: latest values and counters per (run, node, rank).

Writers (the follow loop) and readers (scrapes, OTLP callbacks, the status page) share
one lock; writers take it once per batch of lines, not per line.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from exporter import native
from exporter.kinds import ANOMALY_KINDS, ERROR_KINDS, INCIDENT_KINDS, SCHEDULER_KINDS, error_kind
from exporter.parse import faults
from exporter.parse.fields import is_rank_value, label_value, window_of
from exporter.parse.line_parser import REJECTED_REASONS
from exporter.parse.records import (
    ErrorEvent,
    LineSteps,
    PhaseStart,
    Record,
    RunInfo,
    SchedulerEvent,
    Series,
    StepBatch,
    every_step_printed,
)
from exporter.state.cause import CauseModel
from exporter.state.detectors import DETECTORS, DetectorConfig, Found, RankValue, SeriesState, StepView
from exporter.state.events import CONTEXT_FIELDS, Event, Listener, SeriesKey
from exporter.state.recent import RecentSteps

__all__ = ["ANOMALY_KINDS", "ERROR_KINDS", "LOST_KINDS", "SCHEDULER_KINDS", "SeriesKey", "TrainingState"]

# Where time that did not train the model went (DESIGN 3.3, training_lost_seconds_total{kind}).
LOST_KINDS = ("replayed", "startup", "checkpoint", "stall")
DROPPED_TRUNCATED, DROPPED_SERIES_LIMIT = "truncated", "series_limit"
MAX_REMEMBERED_DROPS = 1 << 16
# A step time stands for at most this many steps (a log line every MAX_SPAN steps or fewer).
MAX_SPAN = 10_000
_LEARNING_RATE, _GRAD_NORM, _STEP_TIME = CONTEXT_FIELDS  # an anomaly's context, as contexts_at writes it


@dataclass(frozen=True, slots=True)
class Limits:
    """Cardinality guard: beyond these, new series are dropped and counted."""

    max_series: int = 4096
    max_named_values_per_series: int = 64  # aux losses + extra fields + event kinds
    # Values a rank prints for itself (training_rank_value): MindFormers prints a local norm
    # per parameter, hundreds of names; the first ones printed are kept (device_local_norm first).
    max_rank_values_per_series: int = 64


@dataclass(slots=True)
class RankState:
    """Everything known about one rank's log."""

    step: int | None = None
    # Every gauge a step line printed, by the name of the value (StepLine.values): loss,
    # learning_rate, grad_norm, step_time_seconds, throughput, total_steps, ... The metric
    # table says which become metrics; a new one needs no field here.
    printed: dict[str, float] = field(default_factory=dict)
    last_log_timestamp: float | None = None
    last_step_timestamp: float | None = None
    lines_total: int = 0
    steps_total: int = 0
    aux_losses: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    rank_values: dict[str, float] = field(default_factory=dict)  # fields.is_rank_value, by name
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALY_KINDS, 0))
    last_anomaly_step: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    last_error_timestamp: dict[str, float] = field(default_factory=dict)
    # For the status page: the step the rank had reached when its failure was read (the parser
    # ends a step batch at a failure line: the last step above it).
    last_error_step: dict[str, int] = field(default_factory=dict, metadata={"checkpoint": False})
    # What the latest failure of each kind said about itself (ErrorEvent.detail), when it said
    # anything. int spelled out: a checkpoint read back must give exitcode -6, not -6.0.
    last_error_facts: dict[str, dict[str, str | int | float]] = field(default_factory=dict)
    # The rank's latest failure as training_last_error_info's labels: kind, and the fault knowledge's
    # code and component (parse/faults/; "" where none applies). Empty until a failure.
    last_error: dict[str, str] = field(default_factory=dict)
    scheduler_events: dict[str, int] = field(default_factory=dict)
    node_timeouts: dict[str, int] = field(default_factory=dict)  # scheduler.log: timed-out node id -> count
    info: dict[str, str] = field(default_factory=dict)
    # Each registered detector's state (state/detectors/), by its name, from the rank's first step batch.
    detectors: dict[str, Any] = field(default_factory=dict)
    # The status page's charts; a checkpoint leaves it out (metadata), a restart fills it again.
    recent: RecentSteps = field(default_factory=RecentSteps, metadata={"checkpoint": False})
    # Restarts and goodput (DESIGN 3.3). A restart is a start banner after step records, or
    # the step going back; the steps up to the highest reached before it are replayed.
    restarts_total: int = 0
    productive_seconds_total: float = 0.0
    lost_seconds_total: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOST_KINDS, 0.0))
    highest_step: int | None = None
    replay_until: int | None = None  # while replaying after a restart: the highest step before it
    attempt_step: int | None = None  # the latest step of the current attempt (None: started, no step yet)
    launcher_attempt: int | None = None  # the highest launcher attempt (torchrun's attempt_<K>/) a file was read of
    starting_since: float | None = None  # when the current (re)start's first line was read, until its first step
    timed_step: int | None = None  # the step of the last step time: the next one stands for the steps since
    # The usual silence between two of the rank's step lines (seconds, smoothed per batch of lines as read): its
    # stall threshold's base; and the threshold. Checkpointed: a restarted exporter keeps the pace it learned
    # rather than falling back to the start-up allowance while the run trains on (or stays hung).
    line_interval: float | None = None
    stall_threshold_seconds: float | None = None
    # An announced long phase (parse/phases.py) under way: its name and when it was announced; and the longest
    # of each kind the rank has shown (from the announcing line to the next step line), in seconds.
    phase: str | None = None
    phase_since: float | None = None
    longest_phase_seconds: dict[str, float] = field(default_factory=dict)
    # Changed by the store's writers (register, ingest) each time they may change the rank, so a
    # scrape can reuse what it read of a rank whose version did not move (families.walk). Code
    # that changes a rank otherwise must change it too. Not a value of the rank's: not compared,
    # not checkpointed.
    version: int = field(default=0, compare=False, metadata={"checkpoint": False})

    @property
    def total_steps(self) -> int | None:
        total = self.printed.get("total_steps")
        return None if total is None else int(total)

    @property
    def loss(self) -> float | None:
        return self.printed.get("loss")

    @property
    def learning_rate(self) -> float | None:
        return self.printed.get("learning_rate")

    @property
    def grad_norm(self) -> float | None:
        return self.printed.get("grad_norm")

    @property
    def step_time_seconds(self) -> float | None:
        return self.printed.get("step_time_seconds")

    @property
    def throughput(self) -> float | None:
        return self.printed.get("throughput")

    @property
    def loss_best_step(self) -> int | None:
        loss: SeriesState | None = self.detectors.get("loss")
        return loss.best_step if loss is not None else None

    @property
    def loss_smoothed(self) -> float | None:
        loss: SeriesState | None = self.detectors.get("loss")
        return loss.smoothed if loss is not None else None


@dataclass(slots=True)
class ExporterStats:
    """The exporter's own health counters."""

    files_followed: int = 0
    bytes_read_total: int = 0
    rotations_total: int = 0
    truncations_total: int = 0
    bytes_lost_total: int = 0
    lines_unparsed_total: int = 0
    lines_truncated_total: int = 0
    series_dropped_total: int = 0
    lines_parsed_total: dict[str, int] = field(default_factory=dict)  # by the format that read a record from them
    # Lines skipped because reading them failed, by reason (created at 0 for every reason).
    lines_rejected_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECTED_REASONS, 0))
    lines_out_of_series_total: int = 0  # lines of series the cardinality limit keeps out

    @property
    def lines_dropped_total(self) -> dict[str, int]:
        """Every line whose content, whole or in part, never reached the state, by reason: one view of the
        counts kept apart above (a line is counted under one reason only)."""
        return {**self.lines_rejected_total, DROPPED_TRUNCATED: self.lines_truncated_total,
                DROPPED_SERIES_LIMIT: self.lines_out_of_series_total}


class TrainingState:
    """Per-rank state plus exporter stats, guarded by one lock."""

    def __init__(self, detectors: DetectorConfig | None = None, limits: Limits | None = None,
                 listener: Listener | None = None) -> None:
        """``listener`` hears every event the state applies, in order, with the lock held (analyze's findings)."""
        self.lock = threading.Lock()
        self.series: dict[SeriesKey, RankState] = {}
        self.stats = ExporterStats()
        self._detectors = detectors or DetectorConfig()
        self._limits = limits or Limits()
        self._dropped: set[tuple[str, ...]] = set()  # series kept out by the limits, counted once each
        self.listener = listener
        # The cause model (state/cause.py): every event is told to it before the listener hears it.
        self.causes = CauseModel()

    @property
    def detectors(self) -> DetectorConfig:
        return self._detectors

    @property
    def limits(self) -> Limits:
        return self._limits

    def register(self, key: SeriesKey, info: dict[str, str], log_timestamp: float | None,
                 attempt: int | None = None) -> RankState | None:
        """Create (or find) a rank's state when its file is discovered. Call with the lock held.

        ``key`` and ``info`` must be label values already (``label_value``): the pipeline makes them so.
        ``attempt``: the launcher's attempt the file belongs to (torchrun's ``attempt_<K>/``); a later attempt than
        the rank's files so far is a restart, whether or not its files ever hold a step.
        """
        rank = self._rank_state(key)
        if rank is not None:
            rank.version += 1
            rank.info.update(info)
            if rank.stall_threshold_seconds is None:  # no step yet
                self._allow_start_up(rank)
            if info.get("role") == "scheduler":
                for kind in SCHEDULER_KINDS:
                    rank.scheduler_events.setdefault(kind, 0)
            if log_timestamp is not None:
                rank.last_log_timestamp = log_timestamp
            # A scheduler's restart is its workers registering again, which its own log says (ingest).
            if attempt is not None and info.get("role") != "scheduler":
                before, rank.launcher_attempt = rank.launcher_attempt, max(attempt, rank.launcher_attempt or 0)
                if before is not None and attempt > before:
                    now = log_timestamp if log_timestamp is not None else rank.last_log_timestamp or 0.0
                    self._restarted(key, rank, now, log_timestamp, attempt)
        return rank

    def ingest(
        self,
        key: SeriesKey,
        lines: int,
        records: list[Record],
        log_timestamp: float | None,
        now: float,
        line_time: LineTime | None = None,
    ) -> None:
        """Apply one batch of a rank's lines. Call with the lock held.

        ``now`` is the time of the records (when they were read, or their lines' own time); ``line_time``
        gives the own time of a record's line for its events (None: unknown): a step batch's line by its
        index, any other record's line at index 0.
        """
        rank = self._rank_state(key)
        if rank is None:
            self.stats.lines_out_of_series_total += lines
            return
        rank.version += 1
        if lines and not rank.lines_total and rank.step is None:
            rank.starting_since = now  # the first line of the rank's first start
        rank.lines_total += lines
        if log_timestamp is not None:
            rank.last_log_timestamp = log_timestamp
        when = now if line_time is None else line_time(0)
        # The file was last written longer ago than the stall floor: a log read late (a catch-up of a finished or
        # silent run), not a run starting now, which the start-up allowance is for.
        old = log_timestamp is not None and now - log_timestamp > self._detectors.stall_floor_seconds
        if lines:
            if not records or type(records[-1]) is not StepBatch:  # a step batch's lines: told as steps below
                self.causes.line(key, when)
            if rank.stall_threshold_seconds is None:
                self._allow_start_up(rank)
        for record in records:
            if isinstance(record, StepBatch):
                self._apply_steps(_Applying(key, rank, record, dict(rank.printed), line_time, now, {}, {}, {}, old))
            elif isinstance(record, ErrorEvent):
                self.causes.line(key, when)
                self._apply(key, rank, Event(error_kind(record.kind), key, rank.step, when, detail=dict(record.detail)))
            elif isinstance(record, SchedulerEvent):
                detail = {name: value for name, value in (("node_id", record.node_id), ("node_rank", record.node_rank))
                          if value is not None}
                self._apply(key, rank, Event(record.kind, key, None, when, detail={**record.detail, **detail}))
                if record.kind == "cluster_initialized" and rank.scheduler_events[record.kind] > 1:
                    # msrun's workers registered again: the job restarted
                    self._apply(key, rank, Event("restart", key, None, when, detail={"by": "scheduler"}))
            elif isinstance(record, PhaseStart):
                rank.phase, rank.phase_since = record.phase, when
                rank.stall_threshold_seconds = self._detectors.phase_threshold(
                    rank.line_interval, rank.longest_phase_seconds.get(record.phase))
            elif isinstance(record, RunInfo):
                rank.info.update({name: label_value(value) for name, value in record.values.items()})
                if rank.step is not None:
                    self._restarted(key, rank, now, when)  # a start banner after step records
        if old and rank.phase is None and _stalls(rank):
            rank.stall_threshold_seconds = self._detectors.paced_threshold(rank.line_interval)

    def _rank_state(self, key: SeriesKey) -> RankState | None:
        rank = self.series.get(key)
        if rank is None:
            if len(self.series) >= self._limits.max_series:
                self._dropped_once(key)
                return None
            rank = self.series[key] = RankState()
        return rank

    def _apply_steps(self, applying: _Applying) -> None:
        # What applying each line in turn would do, a column at a time: the fields of
        # different columns never interact, and within a column the order is kept.
        key, rank, batch, now = applying.key, applying.rank, applying.batch, applying.now
        if not batch.steps:
            return
        step_before = rank.step
        consecutive = native.consecutive(batch.steps)
        rank.steps_total += _steps_counted(step_before, batch.steps, consecutive)
        rank.step = _last_known(step_before, batch.steps)  # Hugging Face Trainer prints no step
        since_last_step = None if rank.last_step_timestamp is None else now - rank.last_step_timestamp
        rank.last_step_timestamp = now
        rank.printed.update(batch.latest)
        for name, unit in batch.units.items():
            rank.info[f"{name}_unit"] = label_value(unit)
        rank_values = []
        for name, (value, _lines, aux_loss) in batch.named.items():
            if is_rank_value(name):
                admitted = self._set_rank_value(key, rank, name, value, batch, step_before)
                if admitted is not None:
                    rank_values.append(admitted)
            else:
                self._set_named(key, rank, rank.aux_losses if aux_loss else rank.extra, label_value(name), value)
        # Replayed steps (re-run after a restart) go to no detector: they are neither anomalies
        # nor a reason for a detector to forget its baseline.
        attempt_before = rank.attempt_step
        restarted, replay_until, after = _progress(batch.steps, Progress(rank.attempt_step, rank.highest_step,
                                                                        rank.replay_until))
        if restarted:
            first = next(step for step in batch.steps if step is not None)
            self._apply(key, rank, Event("restart", key, first, self._line_time(applying, first),
                                         detail={"after_step": attempt_before or 0}))
        replay_before = rank.replay_until

        def event_at(kind: str, step: int | None, subject: str | None) -> Event:
            return self._step_event(applying, Found(kind, step, subject=subject))

        time_split = [rank.productive_seconds_total, rank.lost_seconds_total["checkpoint"]]
        view = StepView({}, rank_values=rank_values, unprinted_nonfinite_losses=batch.unprinted_nonfinite_losses,
                        step=rank.step, time_split=time_split, event_at=event_at)
        for name in ("loss", "grad_norm"):
            series = batch.series.get(name)
            if series:
                series = _split_replayed(series, replay_until, replay_before)
                view.series[name] = Series(_at_known_steps(series.steps, step_before), series.values)
        losses = view.series.get("loss")
        step_time = batch.latest.get("step_time_seconds")
        if losses:
            rank.recent.add(losses.steps, losses.values, step_time)
        elif step_time is not None:
            rank.recent.add((rank.step,), (math.nan,), step_time)
        step_times = batch.series.get("step_time_seconds")
        printed = 0.0
        if step_times:
            steps: Sequence[int | None] = _at_known_steps(step_times.steps, step_before)
            seconds: list[float] | array[float] = step_times.values  # the kernel's array('d'), read by its buffer
            # A series printed on every line of a batch whose every line printed a step has the batch's steps.
            spans = _spans(steps, rank.timed_step, consecutive and len(steps) == len(batch.steps))
            rank.timed_step = _last_known(rank.timed_step, steps)
            printed = native.covered(seconds, spans)
            replayed = _replayed(step_times.steps, replay_until, replay_before)
            if all(replayed):  # a replay's batch, the usual case after a restart
                rank.lost_seconds_total["replayed"] += printed
                steps, seconds, spans = (), [], ()
            elif any(replayed):
                rank.lost_seconds_total["replayed"] += native.covered(*_picked(replayed, seconds, spans))
                steps, picked, spans = _picked([not out for out in replayed], steps, seconds, spans)
                seconds = list(picked)
            if seconds:
                view.series["step_time_seconds"] = Series(steps if type(steps) is range else list(steps), seconds)
                view.spans = spans
                view.step_time_window = window_of(batch.units.get("step_time_seconds"))
        for detector in DETECTORS:
            state = rank.detectors.get(detector.name)
            if state is None:
                state = rank.detectors[detector.name] = detector.new_state()
            for found in detector.apply(self._detectors, state, view):
                self._apply_found(applying, rank, found)
        rank.productive_seconds_total, rank.lost_seconds_total["checkpoint"] = view.time_split
        starting = rank.starting_since is not None or restarted or rank.phase is not None
        if rank.phase is not None and rank.phase_since is not None:  # the phase is over: how long it took
            ended = applying.line_time(0) if applying.line_time is not None else now  # the batch's first line
            took = max(0.0, (now if ended is None else ended) - rank.phase_since)
            rank.longest_phase_seconds[rank.phase] = max(rank.longest_phase_seconds.get(rank.phase, 0.0), took)
        rank.phase = rank.phase_since = None
        self._account_idle(rank, since_last_step, printed, restarted=restarted, now=now)
        rank.attempt_step, rank.highest_step, rank.replay_until = after
        since = None if starting else since_last_step
        if applying.old and since is None and printed > 0:
            since = printed  # read late, all at once: the pace is the printed step times', not the reading's
        rank.line_interval, rank.stall_threshold_seconds = self._detectors.after_steps(
            rank.line_interval, since, printed, len(batch.steps))
        self.causes.stepped(key, rank.step, self._line_time(applying, rank.step))

    def settle(self, now: float | None) -> None:
        """Tell the cause model's hangs (state/cause.py) at ``now`` (None: the end of the logs) as events.
        Call with the lock held: serve calls it as it follows and before a scrape, analyze at the end."""
        for run in self.causes.runs():
            hang = self.causes.hang(run, now, self._stall_threshold)
            rank = self.series.get(hang.key) if hang is not None else None
            if hang is not None and rank is not None:
                rank.version += 1
                self._apply(hang.key, rank, hang)

    def _stall_threshold(self, key: SeriesKey) -> float:
        rank = self.series.get(key)
        threshold = rank.stall_threshold_seconds if rank is not None else None
        return threshold if threshold is not None else self._detectors.stall_threshold(None, starting=True)

    def _account_idle(self, rank: RankState, since_last_step: float | None, printed: float, *,
                      restarted: bool, now: float) -> None:
        """Wall time between step records beyond the steps' own printed time: a (re)start's, or a stall."""
        lost = rank.lost_seconds_total
        if rank.starting_since is not None:
            lost["startup"] += max(0.0, now - rank.starting_since - printed)
            rank.starting_since = None
        elif since_last_step is not None:
            idle = since_last_step - printed
            if restarted:
                lost["startup"] += max(0.0, idle)  # no start banner: down time and start-up are one gap
            elif idle > self._detectors.stall_gap_seconds:
                lost["stall"] += idle

    def _allow_start_up(self, rank: RankState) -> None:
        """A (re)start's stall threshold: the start-up allowance, for a series that can stall."""
        if _stalls(rank):
            rank.stall_threshold_seconds = self._detectors.stall_threshold(None, starting=True)

    def _restarted(self, key: SeriesKey, rank: RankState, now: float, when: float | None,
                   attempt: int | None = None) -> None:
        """A start seen before any of its steps: the steps up to the highest reached are replayed. ``attempt``: the
        launcher's attempt it starts (torchrun's attempt_<K>/), where the files tell it."""
        detail: dict[str, str | int | float] = {"after_step": rank.step or 0}
        if attempt is not None:
            detail["attempt"] = attempt
        self._apply(key, rank, Event("restart", key, None, when, detail=detail))
        rank.replay_until = rank.highest_step
        rank.attempt_step = None
        rank.starting_since = now

    def _set_rank_value(self, key: SeriesKey, rank: RankState, name: str, latest: float, batch: StepBatch,
                        step_before: int | None) -> RankValue | None:
        """Set the gauge of a value the rank computed for itself (within the cap of names): its values for the
        divergence detector, None when the cap keeps it out."""
        label = label_value(name)
        if label not in rank.rank_values and len(rank.rank_values) >= self._limits.max_rank_values_per_series:
            self._dropped_once((*key, label))
            return None
        previous = rank.rank_values.get(label)
        rank.rank_values[label] = latest
        series = batch.series.get(name)  # none when the native step reader read the lines: the latest only
        if series is None:
            return RankValue(label, [rank.step], [latest], previous)
        return RankValue(label, _at_known_steps(series.steps, step_before), series.values, previous)

    def _apply_found(self, applying: _Applying, rank: RankState, found: Found) -> None:
        """What a detector found, applied. An anomaly that breaks no run (a spike), with no listener, is only counted:
        no event is made of it, as the cause model ignores it (a repeated console's spikes by the ten thousand)."""
        kind = found.kind
        if self.listener is None and kind not in INCIDENT_KINDS and kind in rank.anomalies and found.earlier is None:
            last = found.detail.get("last_step", found.step) if found.steps is None else _last_known(None, found.steps)
            self._count_anomaly(rank, kind, found.count, last)
        elif found.steps is not None and self.listener is not None:
            events = self._step_events(applying, found)
            if kind in INCIDENT_KINDS or kind not in rank.anomalies:
                for event in events:
                    self._apply(applying.key, rank, event)
            elif events:  # _apply's counting at once; the cause model only notes such a kind's run
                self._count_anomaly(rank, kind, len(events), _last_known(None, found.steps or ()))
                self.causes.heard(events[0])
                self.listener(events)
        elif found.steps is not None:
            for step in found.steps:
                self._apply(applying.key, rank, self._step_event(applying, Found(kind, step, subject=found.subject)))
        else:
            self._apply(applying.key, rank, self._step_event(applying, found))

    def _step_event(self, applying: _Applying, found: Found) -> Event:
        """An event of what a detector found at a step of the batch being applied, with its line's time and, for the
        listener, the values around it (or as an earlier batch's event gave them)."""
        detail = found.detail
        if found.earlier is not None:
            return dataclasses.replace(found.earlier, count=found.count, detail=detail)
        step = found.step
        if self.listener is None:  # the values around the step are the listener's (analyze's findings) alone
            return Event(found.kind, applying.key, step, self._line_time(applying, step), found.count,
                         detail=detail, continued=found.continued)
        index = applying.position(applying.batch.steps, step)
        context = applying.context_at(step, index)
        value = found.value
        if value is None and found.subject is not None:
            value = applying.around(found.subject, step, index)
        return Event(found.kind, applying.key, step, self._time_at(applying, index), found.count,
                     value or (None, None), context, detail, found.continued)

    @staticmethod
    def _step_events(applying: _Applying, found: Found) -> list[Event]:
        """For the listener, _step_event's event at each of ``found.steps`` (a kind and subject, no value or detail of
        their own): a repeated console's batch holds spikes by the thousand, each column of values read in one go."""
        steps = found.steps or ()
        indexes = applying.indexes_of(applying.batch.steps, steps)
        values = (applying.around_each(applying.source(found.subject), steps, indexes) if found.subject is not None
                  else [(None, None)] * len(steps))
        contexts = applying.contexts_at(steps, indexes)
        line_time, last = applying.line_time, len(applying.batch.steps) - 1
        times = ([applying.now] * len(steps) if line_time is None
                 else [line_time(last if index is None else index) for index in indexes])
        kind, key = found.kind, applying.key
        return [Event(kind, key, step, time, 1, value, context, {})
                for step, time, value, context in zip(steps, times, values, contexts, strict=True)]

    @staticmethod
    def _line_time(applying: _Applying, step: int | None) -> float | None:
        """The time of the batch's first line at ``step`` (its last line when no line printed it)."""
        if applying.line_time is None:
            return applying.now
        return TrainingState._time_at(applying, applying.position(applying.batch.steps, step))

    @staticmethod
    def _time_at(applying: _Applying, index: int | None) -> float | None:
        """The time of the batch's line at ``index`` (its last line for None)."""
        if applying.line_time is None:
            return applying.now
        return applying.line_time(len(applying.batch.steps) - 1 if index is None else index)

    @staticmethod
    def _set_last_error(rank: RankState, kind: str, detail: dict[str, str | int | float]) -> None:
        """training_last_error_info's labels. A plain traceback does not replace a failure the knowledge
        named: it is usually that failure's own exception, and says less."""
        code = faults.known_code(detail.get("code")) if "code" in detail else ""
        if kind == "traceback" and rank.last_error.get("code"):
            return
        component = detail.get("component", "") if code else ""
        rank.last_error = {"kind": kind, "code": code, "component": str(component)}

    def _apply(self, key: SeriesKey, rank: RankState, event: Event) -> None:
        """Count an event into the rank's state, then tell the listener."""
        kind = event.kind
        if kind in rank.anomalies:
            self._count_anomaly(rank, kind, event.count, event.detail.get("last_step", event.step))
        elif kind in rank.errors:
            rank.errors[kind] += 1
            rank.last_error_timestamp[kind] = event.time if event.time is not None else 0.0
            if rank.step is not None:
                rank.last_error_step[kind] = rank.step
            if event.detail:
                rank.last_error_facts[kind] = dict(event.detail)
            self._set_last_error(rank, kind, event.detail)
        elif kind == "restart":
            rank.restarts_total += 1
            self._allow_start_up(rank)
        else:
            self._count(key, rank, rank.scheduler_events, kind)
            node_id = event.detail.get("node_id")
            if kind == "node_timeout" and node_id is not None:
                self._count(key, rank, rank.node_timeouts, label_value(str(node_id)))
        self.causes.heard(event)
        if self.listener is not None:
            self.listener((event,))

    @staticmethod
    def _count_anomaly(rank: RankState, kind: str, count: int, last: str | int | float | None) -> None:
        rank.anomalies[kind] += count
        if last is not None:
            rank.last_anomaly_step[kind] = int(last)

    def _count(self, key: SeriesKey, rank: RankState, counters: dict[str, int], kind: str) -> None:
        if kind in counters or self._has_room(rank):
            counters[kind] = counters.get(kind, 0) + 1
        else:
            self._dropped_once((*key, kind))

    def _set_named(self, key: SeriesKey, rank: RankState, values: dict[str, float], name: str, value: float) -> None:
        """Set a named value unless the series is full (then the value's series is counted as dropped)."""
        if name in values or self._has_room(rank):
            values[name] = value
        else:
            self._dropped_once((*key, name))

    def _dropped_once(self, series: tuple[str, ...]) -> None:
        """Count a series the limits keep out once, however often its lines come (in bounded memory:
        past MAX_REMEMBERED_DROPS remembered, they are forgotten and a series may count again)."""
        if series in self._dropped:
            return
        if len(self._dropped) >= MAX_REMEMBERED_DROPS:
            self._dropped.clear()
        self._dropped.add(series)
        self.stats.series_dropped_total += 1

    def _has_room(self, rank: RankState) -> bool:
        used = len(rank.aux_losses) + len(rank.extra) + len(rank.scheduler_events) + len(rank.node_timeouts)
        return used < self._limits.max_named_values_per_series


class Progress(NamedTuple):
    """Where a rank's training stands, for telling a restart and replayed steps apart."""

    attempt_step: int | None  # the latest step of the current attempt; None: none yet
    highest_step: int | None  # the highest step ever reached
    replay_until: int | None  # replaying after a restart up to this step; None: not replaying


def _progress(steps: Sequence[int | None], before: Progress) -> tuple[bool, int | None, Progress]:
    """Whether the batch's steps start a restart (its first step below the attempt's latest), up to which
    step its lines are replayed (None: none is), and the progress after it.

    A batch's steps never go back (the line parser ends one where they do), so a restart can
    only come at its first step, and a line is replayed by its step's number alone.
    """
    first = next((step for step in steps if step is not None), None)
    if first is None:
        return False, before.replay_until, before
    attempt, highest, until = before
    restarted = attempt is not None and first < attempt
    if restarted:
        until = highest
    last = _last_known(first, steps)
    assert last is not None  # first is a known step
    after = Progress(last, last if highest is None else max(highest, last),
                     None if until is None or last > until else until)
    return restarted, until, after


def _split_replayed(series: Series, replay_until: int | None, replay_before: int | None) -> Series:
    """A series without its replayed values."""
    if replay_until is None and replay_before is None:
        return series
    replayed = _replayed(series.steps, replay_until, replay_before)
    if not any(replayed):
        return series
    if all(replayed):
        return Series([], [])
    steps, values = _picked([not out for out in replayed], series.steps, series.values)
    return Series(list(steps), list(values))


def _replayed(steps: Sequence[int | None], replay_until: int | None, replay_before: int | None) -> list[bool]:
    """Which values of a series re-run steps after a restart. A line of the batch before any printed step
    (step None) is at the replay state before the batch."""
    if replay_until is None and replay_before is None:
        return [False] * len(steps)
    if replay_until is not None and steps and every_step_printed(steps):  # a batch's steps never go back: at C speed
        known = cast("list[int]", steps)
        if known[-1] <= replay_until or known[0] > replay_until:
            return [known[0] <= replay_until] * len(steps)
    return [(replay_before is not None) if step is None else (replay_until is not None and step <= replay_until)
            for step in steps]


def _picked(chosen: list[bool], *columns: Sequence) -> tuple[tuple, ...]:
    """The chosen rows of the columns, column by column."""
    return tuple(tuple(item for item, keep in zip(column, chosen, strict=True) if keep) for column in columns)


def _spans(steps: Sequence[int | None], previous: int | None, consecutive: bool = False) -> Sequence[float]:
    """How many steps each step time stands for: the steps since the step time before it (at ``previous``).

    Megatron-LM, DeepSpeed and torchtitan print a line every ``log_interval`` steps with the
    time of one (the interval's mean): that line stands for the whole interval. A step time
    on a line naming no step, the first one, or one whose step does not advance or jumps
    back or by more than MAX_SPAN (a restart, another run) stands for itself. ``consecutive``: each step is one
    after the step before it (native.consecutive).
    """
    if steps and (consecutive or type(steps) is range):
        # The usual case: every step time stands for the steps between two lines, one step or a log interval, but
        # maybe the first; an array('d'), which the detectors read as its buffer.
        interval = steps.step if type(steps) is range else 1
        alike = array("d", [float(interval) if 1 <= interval <= MAX_SPAN else 1.0]) * len(steps)
        gap = cast("int", steps[0]) - previous if previous is not None else 1
        alike[0] = float(gap) if 1 <= gap <= MAX_SPAN else 1.0
        return alike
    if previous is not None and steps and every_step_printed(steps):
        known = cast("Sequence[int]", steps)
        gaps = list(map(operator.sub, known, [previous, *known[:-1]]))
        if min(gaps) >= 1 and max(gaps) <= MAX_SPAN:  # the usual case, at C speed
            return list(map(float, gaps))
    spans: list[float] = []
    for step in steps:
        gap = step - previous if step is not None and previous is not None else 1
        spans.append(float(gap) if 1 <= gap <= MAX_SPAN else 1.0)
        previous = step if step is not None else previous
    return spans


def _steps_counted(step_before: int | None, steps: LineSteps, consecutive: bool = False) -> int:
    """How many steps the lines printed (native.steps_counted). ``consecutive``: each step is one after the step
    before it (native.consecutive), the usual batch: one a line, but the first may be the step the rank is at."""
    if consecutive:
        return len(steps) - (steps[0] == step_before)
    return native.steps_counted(step_before, steps)


def _last_known(step_before: int | None, steps: Sequence[int | None]) -> int | None:
    return next((step for step in reversed(steps) if step is not None), step_before)


def _at_known_steps(steps: LineSteps, step_before: int | None) -> LineSteps:
    """A series' steps, a line of the batch before any printed step being at the rank's step before it."""
    if steps and steps[0] is None:
        return [step_before if step is None else step for step in steps]
    return steps


LineTime = Callable[[int], "float | None"]  # a step batch's line, by its index -> the line's own time


# A field's values in a batch, its steps unless they are the batch's, its value before the batch (_Applying.sources).
_Source = tuple["Sequence[float] | None", "Sequence[int | None] | None", "float | None"]


class _Applying(NamedTuple):
    """A step batch being applied to a rank, with what its events need."""

    key: SeriesKey
    rank: RankState
    batch: StepBatch
    printed_before: dict[str, float]  # the rank's printed values before the batch
    line_time: LineTime | None
    now: float
    # A step list of the batch (by identity) -> how to find a step's first index in it: a batch read at block speed
    # holds thousands of steps, and a detector may find something at many of them (list.index each time:
    # quadratic). Consecutive steps (the usual batch): by subtraction; else steps never go back in a batch: past the
    # lines that printed none before the first that printed one, a step is found by bisection; a list with such
    # lines further on, by a dict of first indexes.
    positions: dict[int, range | int | dict[int | None, int]]
    contexts: dict[int | None, dict[str, tuple[float | None, float | None]]]  # a step's values around it (events)
    # A field's name -> its values in the batch, its steps unless they are the batch's (every line printed the field:
    # a step's index in the batch is its index in the series too) and its value before the batch; found once for
    # all the values around the batch's events.
    sources: dict[str, _Source]
    old: bool = False  # its file was last written long ago: read late, not a run starting now

    def around(self, name: str, step: int | None, index: int | None) -> tuple[float | None, float | None]:
        """The batch's value of ``name`` before ``step`` and at it (``index``: the step's in the batch's steps)."""
        return self.around_each(self.source(name), (step,), (index,))[0]

    def context_at(self, step: int | None, index: int | None) -> dict[str, tuple[float | None, float | None]]:
        """The values around ``step`` of each of CONTEXT_FIELDS: contexts_at's of one step."""
        return self.contexts_at((step,), (index,))[0]

    def contexts_at(self, steps: Sequence[int | None],
                    indexes: Sequence[int | None]) -> list[dict[str, tuple[float | None, float | None]]]:
        """The values around each of ``steps`` (at ``indexes`` of the batch's steps) of each of CONTEXT_FIELDS, made
        once a step: a loss spike and a grad norm spike at one step share them."""
        learning_rates, grad_norms, step_times = (self.around_each(self.source(name), steps, indexes)
                                                  for name in CONTEXT_FIELDS)
        contexts = self.contexts
        # A dict display: dict(zip(CONTEXT_FIELDS, values)) takes twice as long, for spikes by the ten thousand.
        return [contexts.setdefault(step, {_LEARNING_RATE: learning_rate, _GRAD_NORM: grad_norm, _STEP_TIME: step_time})
                for step, learning_rate, grad_norm, step_time
                in zip(steps, learning_rates, grad_norms, step_times, strict=True)]

    def source(self, name: str) -> _Source:
        """Where the batch's values of ``name`` are (``sources``)."""
        source = self.sources.get(name)
        if source is None:
            series = self.batch.series.get(name)
            own_steps = None if series is None or series.steps == self.batch.steps else series.steps
            source = self.sources[name] = (None if series is None else series.values, own_steps,
                                           self.printed_before.get(name))
        return source

    def around_each(self, source: _Source, steps: Sequence[int | None],
                    indexes: Sequence[int | None]) -> list[tuple[float | None, float | None]]:
        """around's values at each of ``steps`` (at ``indexes`` of the batch's steps), of a field's ``source``."""
        values, own_steps, previous = source
        if values is None:
            return [(previous, None)] * len(steps)
        if own_steps is not None:
            indexes = self.indexes_of(own_steps, steps)
        return [(previous, None) if index is None else ((values[index - 1] if index > 0 else previous), values[index])
                for index in indexes]

    def position(self, steps: Sequence[int | None], step: int | None) -> int | None:
        """The index of the first line at ``step`` in ``steps`` (a list of the batch), None when none is."""
        return self.indexes_of(steps, (step,))[0]

    def indexes_of(self, steps: Sequence[int | None], wanted: Sequence[int | None]) -> list[int | None]:
        """position's index of each of ``wanted``."""
        found = self.positions.get(id(steps))
        if found is None:
            found = self.positions[id(steps)] = _step_finder(steps)
        if type(found) is range:  # a repeated console's spikes by the ten thousand: no bisection each
            start, stride = found.start, found.step
            return [(step - start) // stride if step is not None and step in found else None for step in wanted]
        if not isinstance(found, int):
            return [found.get(step) for step in wanted]
        first, size, known = found, len(steps), cast("Sequence[int]", steps)
        indexes: list[int | None] = []
        for step in wanted:
            if step is None:
                indexes.append(0 if first else None)
                continue
            index = bisect.bisect_left(known, step, first)
            indexes.append(index if index < size and known[index] == step else None)
        return indexes


def _step_finder(steps: Sequence[int | None]) -> range | int | dict[int | None, int]:
    """The steps, when consecutive; how many lines lead printing no step, when no other line printed none; else each
    step's first index."""
    if type(steps) is range:
        return steps
    if isinstance(steps, list) and native.consecutive(steps):  # the usual batch, told at C speed
        return range(cast("int", steps[0]), cast("int", steps[-1]) + 1)
    unprinted = next((index for index, step in enumerate(steps) if step is not None), len(steps))
    if every_step_printed(steps[unprinted:]):
        return unprinted
    backwards = range(len(steps) - 1, -1, -1)  # a step's first index is the one written last
    return dict(zip(reversed(steps), backwards, strict=True))


def _stalls(rank: RankState) -> bool:
    """A series that can stall: a worker's. A scheduler's or a launcher's console (msrun's) prints no steps: it has
    no pace and no stall threshold."""
    return rank.info.get("role") not in ("scheduler", "launcher")
