"""The analysis: the serve pipeline run over finished files, plus what only a whole log tells.

Lines go through ``LineParser`` and ``TrainingState.ingest`` exactly as ``serve`` sends them
(the same formats, ranks, error signatures and detectors), with each line's own time as the
state's clock. Every finding comes from an event the state emits (state/events.py): an
anomaly of a step detector, a failure, a scheduler event, a restart; ``analyze`` has no
detector of its own. On top of the events this module adds what needs the whole log: the
first stopped rank, the root cause among failures on several ranks, the loss's normal range
and a plateau at the end. Memory is bounded by the number of ranks and findings, never by
the log's length: blocks are dropped once read, series are kept only as short windows.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from exporter import kinds, native
from exporter.analyze import wording
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
from exporter.follow.discover import PidRanks, plog_pid, unnamed_pid
from exporter.follow.stream import STDIN, SourceError, file_mtime, read_blocks, read_log
from exporter.follow.tailer import ReadBatch, read_ahead
from exporter.parse import LineParser, ParsedBlock, faults
from exporter.parse.csv_rows import CsvRows, is_table
from exporter.parse.formats import FormatSelection, msrun_console
from exporter.parse.records import Record, StepBatch, StepRows
from exporter.parse.signatures import worker_pid
from exporter.state import DetectorConfig, SeriesKey, TrainingState
from exporter.state.events import Event
from exporter.thresholds import PLATEAU_STEPS

SERIES_FIELDS = ("loss", "grad_norm", "learning_rate", "step_time_seconds", "throughput")
NORMAL_WINDOW = 100  # finite losses per rank the normal range is taken over
# first_stopped_rank: the ranks' last lines spread over more than this, or five median step times.
STOP_SPREAD_SECONDS = 60.0
STOP_SPREAD_STEPS = 5

# A batch's step lines: (run, node, rank), each line's step, its time and its values.
RowSink = Callable[[SeriesKey, Sequence[int | None], list[float | None], StepRows], None]
PointSink = Callable[[SeriesKey, str, Sequence[int | None], Sequence[float]], None]  # a gauge's values of a batch


@dataclass(slots=True)
class _Track:
    """What analyze keeps per (run, node, rank) beside the state's RankState: the whole log's summary."""

    role: str
    files: list[str] = field(default_factory=list)
    first_line_time: float | None = None
    last_line_time: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    last_step_time: float | None = None  # the time of the last step line
    last_line_timed: bool = False  # the last line read printed its own timestamp
    errors: dict[str, Finding] = field(default_factory=dict)  # kind -> its first occurrence, counting the rest
    open_nonfinite: dict[str, Finding] = field(default_factory=dict)  # a run of non-finite values still going
    losses: deque[float] = field(default_factory=lambda: deque(maxlen=NORMAL_WINDOW))
    losses_frozen: bool = False  # the window stops at the rank's first loss anomaly
    first_anomaly_step: int | None = None  # of the batch being applied
    first_loss: float | None = None
    last_loss: float | None = None
    loss_min: float = math.inf
    loss_max: float = -math.inf
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


class Analysis:
    """Feed sources in, then ``report()``."""

    def __init__(self, detectors: DetectorConfig | None = None, *, rows: RowSink | None = None,
                 points: PointSink | None = None, max_line_bytes: int = 1 << 20,
                 formats: FormatSelection | None = None) -> None:
        self._state = TrainingState(detectors, listener=self._heard)
        self._formats = formats or FormatSelection()
        self._rows = rows
        self._points = points
        self._max_line_bytes = max_line_bytes
        self._tracks: dict[SeriesKey, _Track] = {}
        self._findings: dict[str, list[Finding]] = {}  # by run
        # id of the event a finding was made of -> that event (kept alive, so that its id is no later event's) and
        # the finding
        self._finding_of: dict[int, tuple[Event, Finding]] = {}
        self._left_out: set[SeriesKey] = set()  # ranks beyond the series limit (their lines are not read)
        # The ranks' own worker logs (path -> series), whose records' pids name the worker a launcher saw exit.
        self._workers: dict[str, SeriesKey] = {}
        self._pid_ranks = PidRanks()
        self.warnings: list[str] = []
        self.bytes_read = 0

    def add(self, source: Source, stdin: BinaryIO | None = None,
            progress: Callable[[str, int], None] | None = None) -> bool:
        """Read one source to its end (``stdin``: the stream of the source ``-``); False when it failed before
        a line could be read (a warning says why). ``progress`` hears of every block: (source, the bytes this
        analysis read so far)."""
        # Each line's own values when the CSV wants them (a row per step line).
        # The file's formats as serve chooses them: scheduler.log is read as msrun's scheduler log, by its role.
        parser = LineParser(self._formats.candidates(), forced=self._formats.forced(source.name, source.role.role),
                            line_offsets=True, series_fields=SERIES_FIELDS, step_rows=self._rows is not None)
        key = (source.run, source.node, source.role.rank)
        self._track(key, source.role.role).files.append(source.name)
        self._state.register(key, {"file": source.name, "role": source.role.role}, None, attempt=source.role.attempt)
        keys: dict[int | None, SeriesKey] = {None: key}
        role = source.role
        if role.role == "worker" and not role.rankless and plog_pid(source.name) is None:
            # The oldest generation a process's first records are in, unless compressed (PidRanks reads bytes).
            plain = [generation for generation in source.generations if not generation.endswith(".gz")]
            if plain and plain[0] != STDIN:
                self._workers[plain[0]] = key
        read_any = broken = False
        track = self._tracks[key]
        lines = False
        rows = CsvRows() if is_table(source.name) else None  # read whole, from its header: no rewrite seen here
        mtime, clock = None, LineClock(None)
        for generation in source.generations:
            mtime = None if generation == STDIN else file_mtime(generation)
            clock = LineClock(_year_of(mtime))
            try:
                for batch, coming in read_ahead(self._blocks(generation, stdin)):
                    read_any = True
                    lines = lines or bool(batch.data)
                    if rows is None:
                        for later in coming:
                            parser.prepare(later.data)
                    self._block(source, parser, keys, batch, clock, mtime, rows)
                    if progress is not None:
                        progress(source.name, self.bytes_read)
            except SourceError as error:
                self.warnings.append(str(error))
                broken = True
        ended = parser.finish()
        if ended is not None:
            self._piece(source, parser, keys, *ended, clock, mtime)
        if mtime is not None:  # the last generation's
            rank = self._state.series.get(key)  # none when the series limit kept the rank out
            # The file's last line has no timestamp (a traceback on stderr, a launcher's words): the file's
            # own time is its time (DESIGN 3.6), unless the rank's lines elsewhere (torchrun's stdout.log beside
            # its stderr.log) ended later.
            if lines and not track.last_line_timed and rank is not None and rank.lines_total:
                latest = track.last_line_time
                track.last_line_time = mtime if latest is None else max(mtime, latest)
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
               clock: LineClock, mtime: float | None, rows: CsvRows | None = None) -> None:
        self.bytes_read += len(batch.data)
        for piece in parser.pieces(rows.lines(batch.data) if rows is not None else batch.data):
            self._piece(source, parser, keys, piece, parser.parse_block(piece), clock, mtime)

    def _piece(self, source: Source, parser: LineParser, keys: dict[int | None, SeriesKey], data: bytes,
               parsed: ParsedBlock, clock: LineClock, mtime: float | None) -> None:
        """A parsed piece of a read (LineParser.pieces) into the state and the tracks."""
        own = keys[None]
        # The state's clock is the lines' own time (its start-up and stall time are measured by it).
        first = clock.first_in(data)
        # A record may name a rank no line of the block is prefixed with (torchrun's ChildFailedError summary,
        # its agent's line): it has that rank's series, as in serve (pipeline.lines_read).
        named = {record.rank: 0 for record in parsed.records if record.rank not in parsed.lines_by_rank}
        for rank, lines in {**parsed.lines_by_rank, **named}.items():
            key = keys.get(rank)
            if key is None:
                key = keys[rank] = (source.run, source.node, str(rank))
                files = self._track(key, source.role.role).files
                if source.name not in files:  # a rank's own file that also prefixes its lines with its rank
                    files.append(source.name)
                self._state.register(key, {"file": source.name, "role": source.role.role}, None)
            if key not in self._state.series:  # the series limit keeps it out: the report says how many
                self._left_out.add(key)
            elif lines:
                self._state.ingest(key, lines, [], mtime, first or 0.0)
        track = self._tracks[own]
        if track.first_line_time is None:
            track.first_line_time = first
        last = clock.last_in(data)
        if last is not None:
            track.last_line_time = last
        if data:
            track.last_line_timed = clock.at(data, data.rfind(b"\n", 0, len(data) - 1) + 1) is not None
        # In the order of the lines: a failure is applied after the steps above it (the parser ends a
        # rank's step batch at its failure), so its step is the one the rank failed after.
        launcher = parser.format is msrun_console.FORMAT
        for record, offset in zip(parsed.records, parsed.offsets or [], strict=True):
            if launcher and not msrun_console.launcher_record(record):
                continue  # a copy of a worker's line (msrun's console tails them), read in the worker's own file
            exited = self._exited_worker(record, source.name) if launcher else None
            key = exited or keys.get(record.rank, own)
            if key not in self._state.series:
                continue
            if isinstance(record, StepBatch):
                self._steps(key, self._tracks[key], record, data, clock)
                continue
            when = clock.at(data, offset)
            track = self._tracks[key]
            if when is None:
                when = track.last_line_time
            elif exited is None:  # not for msrun's report of a worker: that is no line of the worker's own
                track.first_line_time = track.first_line_time or when
                track.last_line_time = max(track.last_line_time or when, when)
            self._state.ingest(key, 0, [record], None, when or 0.0, line_time=_at(when))

    def _exited_worker(self, record: Record, console: str) -> SeriesKey | None:
        """The series of the worker a launcher reports exiting by pid, as serve finds it (pipeline.Pipeline)."""
        pid = worker_pid(record)
        if pid is None:
            return None
        path = self._pid_ranks.path_of(pid, list(self._workers))
        if path is None:
            self.warnings.append(unnamed_pid(pid, console))
            return None
        return self._workers[path]

    def _steps(self, key: SeriesKey, track: _Track, batch: StepBatch, data: bytes, clock: LineClock) -> None:
        starts = batch.line_starts
        # Every line's time when the rows want them (one search of the block), else a line's when an event asks.
        times = clock.times(data, starts) if starts and self._rows is not None and batch.rows is not None else None

        def time_of_line(index: int) -> float | None:
            if times is not None:
                return times[index]
            return clock.at(data, starts[index]) if starts else None

        last_time = time_of_line(len(batch.steps) - 1)
        track.first_anomaly_step = None
        self._state.ingest(key, 0, [batch], None, last_time or 0.0, line_time=time_of_line)
        self._note_losses(track, batch)
        series = batch.series.get("step_time_seconds")
        if series:  # the deque keeps its last maxlen: only those are read out of the kernel's array
            track.step_times.extend(series.values[-(track.step_times.maxlen or 0):])
        last_step = next((step for step in reversed(batch.steps) if step is not None), None)
        if last_step is not None:
            if track.first_step is None:
                track.first_step = next(step for step in batch.steps if step is not None)
            track.last_step = last_step
        if last_time is not None:
            track.last_step_time = last_time
            track.first_line_time = track.first_line_time or last_time
            track.last_line_time = max(track.last_line_time or last_time, last_time)
        if self._points is not None:
            for name, points in batch.series.items():
                self._points(key, name, points.steps, points.values)
        if self._rows is not None and batch.rows is not None:
            self._rows(key, batch.steps, times if times is not None else [None] * len(batch.steps), batch.rows)

    def _note_losses(self, track: _Track, batch: StepBatch) -> None:
        series = batch.series.get("loss")
        if not series or not series.values:
            return
        values = series.values
        # Every value finite (the usual batch) when their sum is, told at C speed; a sum overflowing costs the filter.
        finite = values if math.isfinite(sum(values)) else list(filter(math.isfinite, values))
        track.last_loss = values[-1]
        extent = native.extent(finite)  # min() and max() of two million values: a float object each
        if extent is not None:
            track.first_loss = finite[0] if track.first_loss is None else track.first_loss
            track.loss_min = min(track.loss_min, extent[0])
            track.loss_max = max(track.loss_max, extent[1])
        if not track.losses_frozen:
            anomaly = track.first_anomaly_step
            if anomaly is None:
                track.losses.extend(finite[-(track.losses.maxlen or 0):])
            else:
                track.losses.extend(value for step, value in zip(series.steps, values, strict=True)
                                    if (step is None or step < anomaly) and math.isfinite(value))
            track.losses_frozen = anomaly is not None

    # ----- events to findings

    def _heard(self, events: Sequence[Event]) -> None:
        """The state's events (Listener): a detector's anomalies at many steps of a batch (spikes) as findings at once,
        each other event by _event."""
        first = events[0]
        name = first.kind
        kind = kinds.KINDS.get(name)
        track = self._tracks.get(first.key)
        if (len(events) == 1 or kind is None or kind.family != kinds.ANOMALY or name in kinds.INCIDENT_KINDS
                or name.endswith("_nonfinite") or track is None or any(event.continued for event in events)):
            for event in events:
                self._event(event)
            return
        if name.startswith("loss"):
            for event in events:
                _note_anomaly_step(track, event.step)
        run, node, rank = first.key
        self._run_findings(run).extend([_finding(event, kinds.ANOMALY, rank, node, None) for event in events])

    def _event(self, event: Event) -> None:
        """A finding for each event a person should read about; repeats merged into the first."""
        name = event.kind
        kind = kinds.KINDS.get(name)
        if kind is None or (kind.family == kinds.SCHEDULER and kind.alert is None):
            return  # a worker registering, the cluster forming: no finding
        track = self._tracks.get(event.key)
        if track is None:
            return
        run, node, rank = event.key
        family, step, detail = kind.family, event.step, event.detail
        if family == kinds.ANOMALY:
            if name.startswith("loss"):
                _note_anomaly_step(track, step)
            running = track.open_nonfinite.get(name) if event.continued else None
            if running is not None:
                running.count += event.count
                running.last_step = _last_step(event)
                return
        elif family == kinds.ERROR:
            seen = track.errors.get(name)
            if seen is not None:
                seen.count += 1
                seen.last_step = step
                return
        if name == "node_timeout":  # scheduler.log's series has no rank: the finding is the timed-out rank's
            rank = str(detail.get("node_rank", ""))
        finding = _finding(event, family, rank, node, self._said(event, track) if name == "restart" else None)
        if name.endswith("_nonfinite"):
            track.open_nonfinite[name] = finding
        elif family == kinds.ERROR:
            track.errors[name] = finding
        self._run_findings(run).append(finding)
        if name in kinds.INCIDENT_KINDS:  # the cause model holds it: its finding is looked up by it
            self._finding_of[id(event)] = (event, finding)

    def _run_findings(self, run: str) -> list[Finding]:
        findings = self._findings.get(run)
        if findings is None:
            findings = self._findings[run] = []
        return findings

    @staticmethod
    def _said(event: Event, track: _Track) -> str | None:
        """A restart's finding's message, where the event's words are not all of it (its time without a step, which
        the rank's track knows now); None: worded when read."""
        if event.step is None or event.time is None or track.last_step_time is None:
            return None
        return (f"{wording.describe(event.kind, event.step, event.rank, event.value, event.detail)}, "
                f"{_duration(event.time - track.last_step_time)} without a step")

    def close(self) -> None:
        """Let go of the state: it holds this analysis's listener, a cycle that only the collector frees, by going
        over the whole heap (0.3 s at the exit of a 2,000,000-line analysis; freed here, 0.07 s)."""
        self._state.listener = None

    # ----- the report

    def report(self) -> Report:
        if self._left_out:
            limit = self._state.limits.max_series
            self.warnings.append(f"{len(self._left_out)} ranks left out: one analysis holds at most {limit} "
                                 "(run, node, rank) series, as the exporter's cardinality limit")
        runs = sorted({key[0] for key in self._tracks})
        return Report([self._run(run) for run in runs], self.warnings)

    def _run(self, run: str) -> RunReport:
        keys = [key for key in self._tracks if key[0] == run and key in self._state.series]
        for key in keys:  # the ranks' last lines as the whole files tell them (an untimed end: the file's time)
            self._state.causes.line(key, self._tracks[key].last_line_time)
        self._state.settle(None)  # a hang the events of the whole log show
        ranks = [self._rank(key) for key in keys]
        findings = list(self._findings.get(run, []))
        step_times = [time for key in keys for time in self._tracks[key].step_times]
        median_step_time = statistics.median(step_times) if step_times else None
        findings += self._plateaus(keys)
        stopped = _first_stopped(ranks, median_step_time)
        if stopped is not None:
            findings.append(stopped)
        self._mark_root_causes(run)
        findings.sort(key=finding_order)
        known_first = [rank.first_step for rank in ranks if rank.first_step is not None]
        known_last = [rank.last_step for rank in ranks if rank.last_step is not None]
        totals = [self._state.series[key].total_steps for key in keys]
        planned = max((total for total in totals if total is not None), default=None)
        return RunReport(run, min(known_first, default=None), max(known_last, default=None),
                         sum(rank.steps_total for rank in ranks), self._loss(keys, ranks), ranks, findings,
                         median_step_time, planned)

    def _rank(self, key: SeriesKey) -> RankReport:
        track, state = self._tracks[key], self._state.series[key]
        times = track.step_times
        return RankReport(key[1], key[2], track.role, track.files, state.lines_total, track.first_step,
                          track.last_step, state.steps_total, track.first_line_time, track.last_line_time,
                          track.last_loss, {kind: count for kind, count in state.errors.items() if count},
                          {kind: count for kind, count in state.anomalies.items() if count},
                          statistics.median(times) if times else None, state.restarts_total,
                          state.productive_seconds_total, dict(state.lost_seconds_total))

    def _mark_root_causes(self, run: str) -> None:
        """The cause model's root cause of each incident of the run (state/cause.py), and the findings it explains."""
        for cause in self._state.causes.history(run):
            finding = self._finding_for(cause.event)
            if finding is None:
                continue
            finding.root_cause = True
            explained = (self._finding_for(follower) for follower in cause.followers)
            finding.explains = sorted({id(found): found for found in explained if found is not None}.values(),
                                      key=finding_order)

    def _finding_for(self, event: Event) -> Finding | None:
        made = self._finding_of.get(id(event))
        return made[1] if made is not None and made[0] is event else None

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


def _at(when: float | None) -> Callable[[int], float | None]:
    """The line time of a record's one line."""
    return lambda _line: when


def _note_anomaly_step(track: _Track, step: int | None) -> None:
    """A loss anomaly at ``step`` of the batch being applied: its losses from the earliest such step on stay out of
    the normal range (_note_losses)."""
    if track.first_anomaly_step is None or (step or 0) < track.first_anomaly_step:
        track.first_anomaly_step = step


def _finding(event: Event, family: str, rank: str, node: str, said: str | None) -> Finding:
    """The finding of an event of a kind of ``family``, at ``rank`` on ``node``; ``said``: its message, where the
    event's words are not all of it."""
    step, detail = event.step, event.detail
    # Positional: a repeated console's spikes make findings by the ten thousand (keywords take twice as long).
    return Finding(event.kind, step, rank, node, event.time, said, False,
                   _context(event) if family == kinds.ANOMALY else {}, event.count,
                   _last_step(event) if detail else step, (),
                   _fault(detail) if family == kinds.ERROR else None, event.value, detail)


def _context(event: Event) -> dict[str, tuple[float | None, float | None]]:
    """The values around an anomaly's step, for each of CONTEXT_FIELDS (the state's own dict where it has them all:
    the anomalies of one step share it, and nothing changes it)."""
    context = event.context
    if context.keys() == _CONTEXT_KEYS:
        return context
    return {name: context.get(name, (None, None)) for name in CONTEXT_FIELDS}


_CONTEXT_KEYS = frozenset(CONTEXT_FIELDS)


def _last_step(event: Event) -> int | None:
    last = event.detail.get("last_step", event.step)
    return int(last) if isinstance(last, (int, float)) else None


def _first_stopped(ranks: list[RankReport], median_step_time: float | None) -> Finding | None:
    """The rank whose last line is the earliest, when the ranks' last lines are spread out."""
    # Only ranks that printed steps: a launcher's console (torchrun's agent lines, a tee'd banner) stops
    # printing when the job starts, and a pipeline stage that prints no loss is no stopped rank (DESIGN 3.4).
    workers = [rank for rank in ranks
               if rank.role == "worker" and rank.last_line_time is not None and rank.last_step is not None]
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


def _fault(detail: dict[str, str | int | float]) -> dict[str, str]:
    """An error's code, component and advice from the fault knowledge; "" where none applies."""
    code = faults.known_code(detail.get("code")) if "code" in detail else ""
    fault = (faults.knowledge().by_id.get(str(detail.get("fault_id", ""))) or faults.describe(code)) if code else None
    component = str(detail.get("component", "")) if code else ""
    return {"code": code, "component": component or (fault.component if fault else ""),
            "advice": fault.advice if fault else ""}


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
