"""The analysis: every source through the exporter's own parse and state, plus what only a whole log tells.

Lines go through ``LineParser`` and ``TrainingState.ingest`` exactly as ``serve`` sends them
(the same formats, ranks, error signatures and detectors: the two never disagree on what a
line means or where a spike is). Step batches keep every value of every gauge here
(``series_fields``) and where each line starts, so a finding gets its step, its line's own
time and the lr, grad norm and step time around it. On top of the state this module adds
what needs the whole log: the first stopped rank, the root cause among errors on several
ranks, restarts and slowdowns. Memory is bounded by the number of ranks and findings, never
by the log's length: blocks are dropped once read, series are kept only as short windows.
"""

from __future__ import annotations

import bisect
import math
import operator
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from exporter.analyze.report import (
    CONTEXT_FIELDS,
    Finding,
    LossSummary,
    RankReport,
    Report,
    RunReport,
    finding_order,
)
from exporter.analyze.sources import Source
from exporter.analyze.timestamps import LineClock
from exporter.follow.stream import STDIN, SourceError, file_mtime, read_blocks, read_log
from exporter.follow.tailer import ReadBatch
from exporter.parse import LineParser
from exporter.parse.records import ErrorEvent, Record, RunInfo, SchedulerEvent, StepBatch
from exporter.state import ERROR_KINDS, DetectorConfig, SeriesKey, TrainingState
from exporter.state.detectors import SpikeDetector, check_series
from exporter.state.store import RankState

SERIES_FIELDS = ("loss", "grad_norm", "learning_rate", "step_time_seconds", "throughput")
# The alert's default (deploy/prometheus/rules: training_step - training_loss_best_step > 2000).
PLATEAU_STEPS = 2000
NORMAL_WINDOW = 100  # finite losses per rank the normal range is taken over
# A slowdown: this many consecutive steps this much slower than the rank's own usual step time.
SLOWDOWN_FACTOR = 1.5
SLOWDOWN_STEPS = 10
SLOWDOWN_WARMUP = 20
# first_stopped_rank: the ranks' last lines spread over more than this, or five median step times.
STOP_SPREAD_SECONDS = 60.0
STOP_SPREAD_STEPS = 5
# Errors that follow another rank's failure rather than cause it: the collective's timeout.
FOLLOWER_ERRORS = ("nccl_timeout",)
ERROR_WORDS = {"oom": "out of memory", "nccl": "NCCL error", "nccl_timeout": "NCCL collective timeout",
               "hccl": "HCCL error", "cuda": "CUDA error", "segfault": "segmentation fault",
               "traceback": "Python traceback", "elastic": "torchrun ChildFailedError", "other": "error"}

StepRow = tuple[str, str, str, int | None, float | None, dict[str, float], dict[str, float]]
RowSink = Callable[[StepRow], None]  # (run, node, rank, step, time, gauges, aux losses) per step line
PointSink = Callable[[SeriesKey, str, list[int | None], list[float]], None]  # a gauge's values of a batch


@dataclass(slots=True)
class _Track:
    """What analyze keeps per (run, node, rank) beside the state's RankState."""

    role: str
    files: list[str] = field(default_factory=list)
    first_line_time: float | None = None
    last_line_time: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    last_step_time: float | None = None  # the time of the last step line
    previous: dict[str, float] = field(default_factory=dict)  # the latest loss and CONTEXT_FIELDS before a batch
    errors: dict[str, Finding] = field(default_factory=dict)  # kind -> its first occurrence, counting the rest
    open_nonfinite: dict[str, Finding] = field(default_factory=dict)  # a run of non-finite values still going
    pending_restart: float | None = None  # a start banner after steps, at this time: the next step restarted
    losses: deque[float] = field(default_factory=lambda: deque(maxlen=NORMAL_WINDOW))
    losses_frozen: bool = False  # the window stops at the rank's first loss anomaly
    first_loss: float | None = None
    last_loss: float | None = None
    loss_min: float = math.inf
    loss_max: float = -math.inf
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    usual_step_times: deque[float] = field(default_factory=lambda: deque(maxlen=200))  # not slow ones
    slow_run: list[tuple[int | None, float]] = field(default_factory=list)  # (step, time) of the current slow run
    slow_context: dict[str, list[float | None]] = field(default_factory=dict)  # at the run's first step
    slow_started: float | None = None  # the time of the run's first step
    slow_reported: bool = False


class Analysis:
    """Feed sources in, then ``report()``."""

    def __init__(self, detectors: DetectorConfig | None = None, *, rows: RowSink | None = None,
                 points: PointSink | None = None, max_line_bytes: int = 1 << 20) -> None:
        self._state = TrainingState(detectors)
        self._detectors = self._state.detectors
        self._rows = rows
        self._points = points
        self._max_line_bytes = max_line_bytes
        self._tracks: dict[SeriesKey, _Track] = {}
        self._findings: dict[str, list[Finding]] = {}  # by run
        self.warnings: list[str] = []
        self.bytes_read = 0

    def add(self, source: Source, stdin: BinaryIO | None = None,
            progress: Callable[[str, int], None] | None = None) -> bool:
        """Read one source to its end (``stdin``: the stream of the source ``-``); False when it failed before
        a line could be read (a warning says why). ``progress`` hears of every block: (source, bytes so far)."""
        # A batch per line when every step's aux losses are wanted (the CSV): the kernel keeps the latest only.
        parser = LineParser(rows_per_batch=1 if self._rows else None, line_offsets=True, series_fields=SERIES_FIELDS)
        key = (source.run, source.node, source.role.rank)
        self._track(key, source.role.role).files.append(source.name)
        self._state.register(key, {"file": source.name, "role": source.role.role}, None)
        keys: dict[int | None, SeriesKey] = {None: key}
        read_any = broken = False
        for generation in source.generations:
            mtime = None if generation == STDIN else file_mtime(generation)
            clock = LineClock(_year_of(mtime))
            try:
                for batch in self._blocks(generation, stdin):
                    read_any = True
                    self._block(source, parser, keys, batch, clock, mtime)
                    if progress is not None:
                        progress(source.name, self.bytes_read)
            except SourceError as error:
                self.warnings.append(str(error))
                broken = True
            if mtime is not None and generation == source.generations[-1]:
                track = self._tracks[key]
                if track.last_line_time is None and self._state.series[key].lines_total:
                    track.last_line_time = mtime  # no line had a timestamp: the file's own time for its last
        return read_any or not broken

    def _blocks(self, generation: str, stdin: BinaryIO | None) -> Iterator[ReadBatch]:
        if generation == STDIN:
            if stdin is None:
                raise SourceError("-: no standard input to read")
            return read_blocks(stdin, self._max_line_bytes)
        return read_log(generation, self._max_line_bytes)

    def _track(self, key: SeriesKey, role: str) -> _Track:
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(role)
        return track

    def _block(self, source: Source, parser: LineParser, keys: dict[int | None, SeriesKey], batch: ReadBatch,
               clock: LineClock, mtime: float | None) -> None:
        data = batch.data
        self.bytes_read += len(data)
        parsed = parser.parse_block(data)
        own = keys[None]
        # The state's clock is the lines' own time (its start-up and stall time are measured by it).
        first = clock.first_in(data)
        for rank, lines in parsed.lines_by_rank.items():
            key = keys.get(rank)
            if key is None:
                key = keys[rank] = (source.run, source.node, str(rank))
                self._track(key, source.role.role).files.append(source.name)
                self._state.register(key, {"file": source.name, "role": source.role.role}, None)
            self._state.ingest(key, lines, [], mtime, first or 0.0)
        track = self._tracks[own]
        if track.first_line_time is None:
            track.first_line_time = first
        last = clock.last_in(data)
        if last is not None:
            track.last_line_time = last
        # A block's step batch is handed on at its end, after the events between its lines: the events go
        # first, each at the step of the last step line above it, then the steps (as the state applies them).
        batches: dict[SeriesKey, list[StepBatch]] = {}
        events = []
        for record, offset in zip(parsed.records, parsed.offsets or [], strict=True):
            key = keys.get(record.rank, own)
            if isinstance(record, StepBatch):
                batches.setdefault(key, []).append(record)
            else:
                events.append((key, record, offset))
        for key, record, offset in events:
            self._event(key, record, data, offset, clock, _step_above(batches.get(key, []), offset))
        for key, key_batches in batches.items():
            for step_batch in key_batches:
                self._steps(key, self._tracks[key], step_batch, data, clock)

    def _event(self, key: SeriesKey, record: Record, data: bytes, offset: int, clock: LineClock,
               step_above: int | None) -> None:
        track = self._tracks[key]
        step = track.last_step if step_above is None else step_above
        when = clock.at(data, offset)
        if when is None:
            when = track.last_line_time
        else:
            track.first_line_time = track.first_line_time or when
            track.last_line_time = max(track.last_line_time or when, when)
        self._state.ingest(key, 0, [record], None, when or 0.0)
        if isinstance(record, ErrorEvent):
            self._error(key, track, record, when, step)
        elif isinstance(record, SchedulerEvent) and record.kind == "node_timeout":
            who = record.node_rank if record.node_rank is not None else record.node_id
            self._add(key, Finding("node_timeout", None, "" if record.node_rank is None else str(record.node_rank),
                                   key[1], when, f"the scheduler timed out node {record.node_id} (rank {who}): "
                                   "it stopped answering without a word in its own log"))
        elif isinstance(record, RunInfo) and track.last_step is not None:
            track.pending_restart = when

    # ----- steps

    def _steps(self, key: SeriesKey, track: _Track, batch: StepBatch, data: bytes, clock: LineClock) -> None:
        state = self._state.series[key]
        starts = batch.line_starts or []

        def time_of_line(index: int) -> float | None:
            return clock.at(data, starts[index]) if starts else None

        last_time = time_of_line(len(batch.steps) - 1)
        self._restarts(key, track, batch, time_of_line)
        before = dict(state.anomalies)
        spikes_before = {name: (detector.state if detector is not None else None)
                         for name, detector in (("loss", state.loss_spikes), ("grad_norm", state.grad_norm_spikes))}
        self._state.ingest(key, 0, [batch], None, last_time or 0.0)
        # A slowdown is reported by analyze's own look at the step times (_slowdown), at its first slow
        # step; the state counts the same slowdown once the slow steps have lasted (its detector's run).
        changed = [kind for kind, count in state.anomalies.items() if count != before[kind] and kind != "slowdown"]
        first_anomaly = None
        for kind in changed:
            found = self._anomalies(key, track, state, batch, kind, spikes_before, time_of_line)
            if found is not None and (first_anomaly is None or found < first_anomaly):
                first_anomaly = found
        self._close_nonfinite(track, batch)
        self._note_losses(track, batch, first_anomaly)
        self._slowdown(key, track, batch, time_of_line)
        for name in ("loss", *CONTEXT_FIELDS):
            series = batch.series.get(name)
            if series and series.values:
                track.previous[name] = series.values[-1]
        known = [step for step in batch.steps if step is not None]
        if known:
            track.first_step = known[0] if track.first_step is None else track.first_step
            track.last_step = known[-1]
        if last_time is not None:
            track.last_step_time = last_time
            track.first_line_time = track.first_line_time or last_time
            track.last_line_time = max(track.last_line_time or last_time, last_time)
        if self._points is not None:
            for name, series in batch.series.items():
                self._points(key, name, series.steps, series.values)
        if self._rows is not None:
            aux = {name: named.value for name, named in batch.named.items() if named.aux_loss}
            self._rows((*key, batch.steps[-1], time_of_line(0), batch.latest, aux))

    def _restarts(self, key: SeriesKey, track: _Track, batch: StepBatch,
                  time_of_line: Callable[[int], float | None]) -> None:
        """A start banner after steps, or the step going back: the rank started over."""
        previous = track.last_step
        if track.pending_restart is None and _ascending_from(previous, batch.steps):
            return  # the usual case, without a Python operation per line
        for index, step in enumerate(batch.steps):
            if step is None:
                continue
            if previous is not None and (step < previous or track.pending_restart is not None):
                when = time_of_line(index)
                lost = previous - step + 1 if step <= previous else 0
                stopped = time_of_line(index - 1) if index > 0 else track.last_step_time
                gap = when - stopped if when is not None and stopped is not None else None
                message = (f"rank {key[2] or '?'} started over: step {step} after step {previous}"
                           f"{f' ({lost} steps done again)' if lost else ''}"
                           f"{f', {_duration(gap)} without a step' if gap is not None else ''}")
                self._add(key, Finding("restart", step, key[2], key[1], track.pending_restart or when, message))
                track.pending_restart = None
            previous = step

    def _anomalies(self, key: SeriesKey, track: _Track, state: RankState, batch: StepBatch, kind: str,
                   spikes_before: dict[str, tuple | None], time_of_line: Callable[[int], float | None]) -> int | None:
        """Findings for an anomaly kind the state counted in this batch; the index of the first in the series."""
        gauge = "loss" if kind.startswith("loss") else "grad_norm"
        series = batch.series.get(gauge)
        if kind.endswith("nonfinite"):
            if series is None or all(map(math.isfinite, series.values)):
                # Megatron-LM's "number of nan iterations": counted at the line's step, the loss not printed.
                self._anomaly(key, track, batch, kind, state.step, None, time_of_line,
                              f"{gauge} was not finite at step {state.step} (the line counts it, without a value)")
                return None
            first = None
            for index, value in enumerate(series.values):
                if math.isfinite(value):
                    track.open_nonfinite.pop(kind, None)
                    continue
                first = index if first is None else first
                step = series.steps[index]
                running = track.open_nonfinite.get(kind)
                if running is not None:
                    running.count += 1
                    running.last_step = step
                    continue
                running = self._anomaly(key, track, batch, kind, step, index, time_of_line,
                                        f"{gauge} became {value} at step {step}")
                track.open_nonfinite[kind] = running
            return first
        before = spikes_before.get(gauge)
        if series is None:
            return None
        first = None
        for index, step in enumerate(_spike_steps(self._detectors, before, series.steps, series.values)):
            previous = track.previous.get(gauge) if index == 0 else None
            where = series.steps.index(step)
            earlier = series.values[where - 1] if where > 0 else previous
            was = f"from {earlier:.4g} " if earlier is not None else ""
            self._anomaly(key, track, batch, kind, step, where, time_of_line,
                          f"{gauge} jumped {was}to {series.values[where]:.4g} at step {step}")
            first = where if first is None else first
        return first

    def _anomaly(self, key: SeriesKey, track: _Track, batch: StepBatch, kind: str, step: int | None,
                 index: int | None, time_of_line: Callable[[int], float | None], message: str) -> Finding:
        line = batch.steps.index(step) if step in batch.steps else len(batch.steps) - 1
        finding = Finding(kind, step, key[2], key[1], time_of_line(line), message,
                          context=_context(track, batch, step), last_step=step)
        self._add(key, finding)
        return finding

    def _close_nonfinite(self, track: _Track, batch: StepBatch) -> None:
        for kind in list(track.open_nonfinite):
            series = batch.series.get("loss" if kind.startswith("loss") else "grad_norm")
            if series and series.values and math.isfinite(series.values[-1]):
                del track.open_nonfinite[kind]

    def _note_losses(self, track: _Track, batch: StepBatch, first_anomaly: int | None) -> None:
        series = batch.series.get("loss")
        if not series or not series.values:
            return
        values = series.values
        finite = list(filter(math.isfinite, values))
        track.last_loss = values[-1]
        if finite:
            track.first_loss = finite[0] if track.first_loss is None else track.first_loss
            track.loss_min = min(track.loss_min, min(finite))
            track.loss_max = max(track.loss_max, max(finite))
        if not track.losses_frozen:
            before = values if first_anomaly is None else values[:first_anomaly]
            track.losses.extend(filter(math.isfinite, before))
            track.losses_frozen = first_anomaly is not None

    def _slowdown(self, key: SeriesKey, track: _Track, batch: StepBatch,
                  time_of_line: Callable[[int], float | None]) -> None:
        """A sustained run of steps well above the rank's own usual step time (the median of its recent ones)."""
        series = batch.series.get("step_time_seconds")
        if not series:
            return
        track.step_times.extend(series.values)
        if track.slow_reported:
            return
        usual = track.usual_step_times
        warmup = max(0, SLOWDOWN_WARMUP - len(usual))  # the first values only set what is usual
        usual.extend(series.values[:warmup])
        steps, values = series.steps[warmup:], series.values[warmup:]
        if not values:
            return
        limit = SLOWDOWN_FACTOR * statistics.median(usual)
        if max(values) <= limit:  # the usual case, at C speed
            usual.extend(values)
            track.slow_run.clear()
            return
        for step, value in zip(steps, values, strict=True):
            if value <= limit:
                track.slow_run.clear()
                usual.append(value)
                continue
            track.slow_run.append((step, value))
            if len(track.slow_run) == 1:  # its context now: the batch at hand may end before the run is long enough
                track.slow_context = _context(track, batch, step)
                track.slow_started = time_of_line(batch.steps.index(step) if step in batch.steps else 0)
            if len(track.slow_run) >= SLOWDOWN_STEPS:
                first = track.slow_run[0][0]
                slow = statistics.median(value for _, value in track.slow_run)
                baseline = limit / SLOWDOWN_FACTOR
                self._add(key, Finding(
                    "slowdown", first, key[2], key[1], track.slow_started,
                    f"step time {slow:.3g} s from step {first} on, {slow / baseline:.1f}x the rank's usual "
                    f"{baseline:.3g} s", context=track.slow_context))
                track.slow_reported = True
                return

    # ----- errors

    def _error(self, key: SeriesKey, track: _Track, event: ErrorEvent, when: float | None, step: int | None) -> None:
        kind = event.kind if event.kind in ERROR_KINDS else "other"
        seen = track.errors.get(kind)
        if seen is not None:
            seen.count += 1
            seen.last_step = step
            return
        detail = ", ".join(str(value) for name, value in event.detail.items() if name in ("exception", "code"))
        at = f" after step {step}" if step is not None else " before the first step"
        finding = Finding(kind, step, key[2], key[1], when,
                          f"{ERROR_WORDS[kind]}{f' ({detail})' if detail else ''}{at}", last_step=step)
        track.errors[kind] = finding
        self._add(key, finding)

    def _add(self, key: SeriesKey, finding: Finding) -> None:
        self._findings.setdefault(key[0], []).append(finding)

    # ----- the report

    def report(self) -> Report:
        runs = sorted({key[0] for key in self._tracks})
        return Report([self._run(run) for run in runs], self.warnings)

    def _run(self, run: str) -> RunReport:
        keys = [key for key in self._tracks if key[0] == run]
        ranks = [self._rank(key) for key in keys]
        findings = list(self._findings.get(run, []))
        step_times = [time for key in keys for time in self._tracks[key].step_times]
        median_step_time = statistics.median(step_times) if step_times else None
        findings += self._plateaus(keys)
        stopped = _first_stopped(ranks, median_step_time)
        if stopped is not None:
            findings.append(stopped)
        _mark_root_cause(findings)
        findings.sort(key=finding_order)
        known_first = [rank.first_step for rank in ranks if rank.first_step is not None]
        known_last = [rank.last_step for rank in ranks if rank.last_step is not None]
        return RunReport(run, min(known_first, default=None), max(known_last, default=None),
                         sum(rank.steps_total for rank in ranks), self._loss(keys, ranks), ranks, findings,
                         median_step_time)

    def _rank(self, key: SeriesKey) -> RankReport:
        track, state = self._tracks[key], self._state.series[key]
        times = track.step_times
        return RankReport(key[1], key[2], track.role, track.files, state.lines_total, track.first_step,
                          track.last_step, state.steps_total, track.first_line_time, track.last_line_time,
                          track.last_loss, {kind: count for kind, count in state.errors.items() if count},
                          {kind: count for kind, count in state.anomalies.items() if count},
                          statistics.median(times) if times else None, state.restarts_total,
                          state.productive_seconds_total, dict(state.lost_seconds_total))

    def _plateaus(self, keys: list[SeriesKey]) -> list[Finding]:
        found = []
        for key in keys:
            state = self._state.series[key]
            best = state.loss_best_step
            if best is not None and state.step is not None and state.step - best > PLATEAU_STEPS:
                found.append(Finding("loss_plateau", best, key[2], key[1], None,
                                     f"the smoothed loss has not improved since step {best} "
                                     f"({state.step - best} steps, more than {PLATEAU_STEPS})"))
        return found

    def _loss(self, keys: list[SeriesKey], ranks: list[RankReport]) -> LossSummary:
        tracks = [self._tracks[key] for key in keys]
        with_loss = [(rank, track) for rank, track in zip(ranks, tracks, strict=True) if track.first_loss is not None]
        if not with_loss:
            return LossSummary()
        earliest = min(with_loss, key=lambda pair: pair[0].first_step or 0)[1]
        latest = max(with_loss, key=lambda pair: pair[0].last_step or 0)[1]
        window = sorted(value for track in tracks for value in track.losses)
        normal = (_percentile(window, 0.05), _percentile(window, 0.95)) if window else None
        summary = LossSummary(earliest.first_loss, latest.last_loss, min(t.loss_min for _, t in with_loss),
                              max(t.loss_max for _, t in with_loss), normal)
        for rank, track in with_loss:
            last = track.last_loss
            if last is None:
                continue
            if not math.isfinite(last):
                summary.last_nonfinite_ranks.append(rank.rank)
            elif normal is not None and not _near(last, normal):
                summary.outside_ranks.append(rank.rank)
        return summary


def _step_above(batches: list[StepBatch], offset: int) -> int | None:
    """The step of the last step line above ``offset`` in a block's batches of one rank (None: none is)."""
    found = None
    for batch in batches:
        starts = batch.line_starts or []
        index = bisect.bisect_left(starts, offset) - 1
        while index >= 0 and batch.steps[index] is None:
            index -= 1
        if index >= 0:
            found = batch.steps[index]
    return found


def _spike_steps(config: DetectorConfig, before: tuple | None, steps: list[int | None],
                 values: list[float]) -> list[int | None]:
    """The steps at which the state's spike detector counted a spike in this batch: the same detector
    replayed value by value from its state before the batch (only batches that had one get here)."""
    detector = SpikeDetector(before) if before is not None else None
    found = []
    for step, value in zip(steps, values, strict=True):
        if detector is None:
            if not math.isfinite(value):
                continue
            detector = SpikeDetector()
        spiked = check_series(config, detector, None, [step], [value])[2]
        if spiked:
            found.append(step)
    return found


def _context(track: _Track, batch: StepBatch, step: int | None) -> dict[str, list[float | None]]:
    """lr, grad norm and step time at the step before ``step`` and at it."""
    context: dict[str, list[float | None]] = {}
    for name in CONTEXT_FIELDS:
        series = batch.series.get(name)
        at = before = None
        if series is not None and step in series.steps:
            index = series.steps.index(step)
            at = series.values[index]
            before = series.values[index - 1] if index > 0 else track.previous.get(name)
        else:
            before = track.previous.get(name)
        context[name] = [before, at]
    return context


def _first_stopped(ranks: list[RankReport], median_step_time: float | None) -> Finding | None:
    """The rank whose last line is the earliest, when the ranks' last lines are spread out."""
    workers = [rank for rank in ranks if rank.role == "worker" and rank.last_line_time is not None]
    if len(workers) < 2:
        return None
    first = min(workers, key=lambda rank: rank.last_line_time or 0.0)
    last = max(rank.last_line_time or 0.0 for rank in workers)
    spread = last - (first.last_line_time or 0.0)
    limit = min(STOP_SPREAD_SECONDS, STOP_SPREAD_STEPS * median_step_time) if median_step_time else STOP_SPREAD_SECONDS
    if spread <= limit:
        return None
    where = f"rank {first.rank}" + (f" on {first.node}" if first.node else "")
    step = f" at step {first.last_step}" if first.last_step is not None else ""
    return Finding("first_stopped_rank", first.last_step, first.rank, first.node, first.last_line_time,
                   f"{where} stopped writing first{step}, {_duration(spread)} before the last rank's last line")


def _mark_root_cause(findings: list[Finding]) -> None:
    """The earliest failure from which later errors on other ranks follow (or the only failing rank's).

    Candidates are errors that cause rather than follow (an OOM, a crash, a segfault, not a
    collective's timeout) and the first stopped rank (a hang); collective timeouts only when
    nothing else is there. A tie in time goes to the error.
    """
    errors = [finding for finding in findings if finding.kind in ERROR_KINDS or finding.kind == "node_timeout"]
    if not errors:
        return
    causes = [finding for finding in errors if finding.kind not in FOLLOWER_ERRORS]
    stopped = [finding for finding in findings if finding.kind == "first_stopped_rank"]
    candidates = sorted(causes + stopped or errors, key=lambda f: (*finding_order(f), f.kind == "first_stopped_rank"))
    cause = candidates[0]
    failing_ranks = {(finding.node, finding.rank) for finding in errors}
    followers = [finding for finding in errors if (finding.node, finding.rank) != (cause.node, cause.rank)
                 and (cause.time is None or finding.time is None or finding.time >= cause.time)]
    if followers or failing_ranks <= {(cause.node, cause.rank)}:
        cause.root_cause = True


def _ascending_from(previous: int | None, steps: list[int | None]) -> bool:
    """True when the steps never go down, from ``previous`` on (a line printing no step: not known, False)."""
    if None in steps or (previous is not None and steps and steps[0] < previous):  # type: ignore[operator]
        return False
    return all(map(operator.le, steps, steps[1:]))  # type: ignore[arg-type]


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _near(value: float, bounds: tuple[float, float]) -> bool:
    """Inside the normal range, give or take half its width (noise at the end of a window)."""
    low, high = bounds
    slack = (high - low) / 2
    return low - slack <= value <= high + slack


def _duration(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _year_of(mtime: float | None) -> int | None:
    return time.localtime(mtime).tm_year if mtime is not None else None
