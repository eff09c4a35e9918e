"""The cause model: which event of which rank broke a run, from the events of all its ranks.

When one rank of a synchronous job fails, the others fail after it: their collectives time
out or lose their peer, the launcher SIGTERMs them and summarises a child's death, their
grad norms turn NaN after the all-reduce of one rank's NaN loss. Each of those is an event
of its own on its own rank (state/events.py). The model keeps the events of the run's
current incident and names one primary event, the root cause, and the followers it
explains:

- Which kinds follow and which cause comes from the table of kinds (``follower`` and
  ``incident`` in exporter/kinds.py): a kind added there plugs in without code here. A plain
  traceback on a rank whose collective failed is that failure's exception: a follower too.
- Primaries are ordered by the lines' own times, then the step each rank had reached, then
  the order they were read in (byte order within a file, where a line has no time).
  On one rank and step, a named failure (an OOM) is the cause rather than the traceback
  that carried it.
- A hang has no line of its own: the culprit printed nothing. When only followers are there
  (the others timed out waiting), the rank that failed nothing and is behind (a lower step,
  or its last line before every failing rank's) is the primary, a ``hang`` event at its
  last step; where the followers' collectives name the peer they waited for (MindSpore's
  CPU ring does), the quiet rank they name. When no rank of the run printed anything for
  longer than its stall threshold, the rank that stopped first is.
- The incident ends when the run trains on (a step past the incident's) or starts again.

``serve`` feeds it from the state's events and exposes the cause as
``training_incident_info``; ``analyze`` marks the same cause ``root_cause`` and lists what it
``explains``. One engine, so the two cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter import kinds
from exporter.state.events import Event, SeriesKey

# The anomaly kinds the model itself tells (no step detector does).
TOLD_KINDS = ("hang",)
# A follower-only incident live: the followers must be this old before the rank behind is named (a primary
# read a moment later, from another file, would otherwise lose to a hang).
FOLLOWER_SETTLE_SECONDS = 5.0
# Live, a silent run's hang is named this long (at most half the threshold) before the rank's threshold is
# reached: the alert rules judge the stall on the same threshold, and the hang must be scraped by then so
# that TrainingStalled names the rank from its first evaluation.
HANG_LEAD_SECONDS = 30.0
# A silent run's rank that stopped first is named only this much before every other rank's last line (or at a
# lower step): ranks that stopped together (a kill, an exit without a word) have no culprit to name.
STOPPED_FIRST_MARGIN_SECONDS = 1.0
# A step this far past the incident's highest step: the run trains on, the incident is over.
TRAINS_ON_STEPS = 1


@dataclass(slots=True)
class _Progress:
    """How far one rank got, as the model needs it to tell who is behind."""

    run: _Run  # its run's incidents
    step: int | None = None
    line_at: float | None = None  # the time of its last line
    read: int = 0  # the order its last line was read in (byte order within a file)


@dataclass(slots=True)
class Cause:
    """The root cause of a run's incident: the primary event, the followers it explains, and why it was named."""

    event: Event
    followers: list[Event]
    evidence: str
    # A primary event (a failure, a NaN, a hang), not the earliest of followers alone: only such a cause is served
    # live. One exporter per node sees its own ranks: a node whose ranks only timed out waiting for another node's
    # must not name one of them, or the run would page twice (analyze, which sees every node, names it anyway).
    primary: bool = True


@dataclass(slots=True)
class _Incident:
    events: list[tuple[int, Event]] = field(default_factory=list)  # the first of each (rank, kind), as read
    seen: set[tuple[SeriesKey, str]] = field(default_factory=set)
    highest_step: int | None = None  # the highest step of its events, continued ones included
    hang: Event | None = None


# Past incidents of a run kept for ``analyze`` (a run that crashed and resumed has one per attempt).
MAX_PAST_INCIDENTS = 64


@dataclass(slots=True)
class _Run:
    ranks: dict[SeriesKey, _Progress] = field(default_factory=dict)
    incident: _Incident | None = None
    past: list[Cause] = field(default_factory=list)  # the causes of its incidents that are over, oldest first
    attempt: int | None = None  # the latest launcher attempt a rank was seen to start (torchrun's attempt_<K>/)
    # The incident the latest restart ended (its cause is ``past[-1]``) and the ranks seen to start again since: a
    # rank not among them is still in the attempt before, and its failures read now are that incident's.
    ended: _Incident | None = None
    started_again: set[SeriesKey] = field(default_factory=set)


class CauseModel:
    """The current incident of each run and its root cause. Not thread-safe: the state's lock guards it."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._ranks: dict[SeriesKey, _Progress] = {}  # every run's ranks, by key: one lookup per batch
        self._read = 0

    # ----- what the state tells it

    def heard(self, event: Event) -> None:
        """An event the state applied (any kind: those that break no run are ignored)."""
        run = self._run(event.run)
        if event.kind == "restart":
            attempt = event.detail.get("attempt")
            if type(attempt) is int:
                if run.attempt is not None and attempt <= run.attempt:
                    run.started_again.add(event.key)
                    return  # another rank of an attempt already started: that attempt's incident goes on
                run.attempt = attempt
            if run.incident is not None and run.incident.events:
                run.ended, run.started_again = run.incident, set()
            run.started_again.add(event.key)
            self._close(event.run)  # a new attempt: what broke the last one is over
            return
        if event.kind not in kinds.INCIDENT_KINDS:
            return
        self._read += 1
        if self._before_its_restart(event, run):
            return
        incident = run.incident
        if incident is not None and self._breaks_anew(event, incident):
            self._close(event.run)
            incident = None
        if incident is None:
            if event.continued:
                return  # more of an incident the run already trained past
            incident = run.incident = _Incident()
            run.ended = None
        self._take(incident, event)

    def _before_its_restart(self, event: Event, run: _Run) -> bool:
        """A failure of a rank the latest restart has not reached yet, at a step of the incident it ended: that
        incident's (its cause named again). In one console of two attempts (``>>``) a rank's traceback is read
        when its next line comes, which may be after another rank's first lines of the resumed attempt."""
        ended = run.ended
        if (ended is None or event.key in run.started_again or event.step is None or ended.highest_step is None
                or event.step > ended.highest_step):
            return False
        self._take(ended, event)
        cause = self._cause_of(ended)
        if cause is not None and run.past:
            run.past[-1] = cause
        return True

    def _take(self, incident: _Incident, event: Event) -> None:
        """Add an event to the incident: the first of each (rank, kind), its step, a hang."""
        if incident.hang is not None and event.key == incident.hang.key and not self._follows(event, incident):
            # The rank named hung printed its own failure after all (read late, from another file): that is the cause.
            incident.events = [(read, held) for read, held in incident.events if held is not incident.hang]
            incident.seen.discard((event.key, "hang"))
            incident.hang = None
        step = _last_step(event)
        if step is not None:
            incident.highest_step = step if incident.highest_step is None else max(incident.highest_step, step)
        if event.kind == "hang":
            incident.hang = event
        identity = (event.key, event.kind)
        if identity not in incident.seen:
            incident.seen.add(identity)
            incident.events.append((self._read, event))

    def line(self, key: SeriesKey, time: float | None) -> None:
        """The rank printed a line at ``time`` (None: unknown). On the hot path: every batch of lines."""
        progress = self._ranks.get(key) or self._progress(key)
        self._read += 1
        progress.read = self._read
        if time is not None and (progress.line_at is None or time > progress.line_at):
            progress.line_at = time

    def stepped(self, key: SeriesKey, step: int | None, time: float | None) -> None:
        """The rank printed step lines up to ``step``, the last at ``time``. On the hot path: every step batch."""
        progress = self._ranks.get(key) or self._progress(key)
        self._read += 1
        progress.read = self._read
        if time is not None and (progress.line_at is None or time > progress.line_at):
            progress.line_at = time
        if step is None:
            return
        progress.step = step
        incident = progress.run.incident
        if incident is not None:
            highest = incident.highest_step
            if highest is not None and step > highest + TRAINS_ON_STEPS:
                self._close(key[0])  # the run trains on

    # ----- what it tells

    def runs(self) -> list[str]:
        return sorted(self._runs)

    def hang(self, run: str, now: float | None, threshold: Callable[[SeriesKey], float] | None = None) -> Event | None:
        """The ``hang`` event the run's ranks show at ``now`` (None: at the end of the logs), if no cause is known.

        Followers without a primary: the rank behind that failed nothing. No event at all: with
        ``threshold`` (a rank's stall threshold), the first rank to stop once every rank is silent past its own.
        """
        state = self._runs.get(run)
        if state is None:
            return None
        incident = state.incident
        workers = {key: progress for key, progress in state.ranks.items() if progress.step is not None}
        if incident is not None:
            if incident.hang is not None or any(not self._follows(event, incident) for _, event in incident.events):
                return None
            failing = {event.key for _, event in incident.events}
            followed_at = [event.time for _, event in incident.events if event.time is not None]
            if now is not None and followed_at and now - min(followed_at) < FOLLOWER_SETTLE_SECONDS:
                return None
            quiet = {key: progress for key, progress in workers.items() if key not in failing}
            behind = _waited_for(incident, quiet)
            if behind is not None:
                evidence = "the rank the others' collectives waited for, printing no failure of its own"
            else:
                behind = _first_stopped(quiet)
                if behind is None or not _behind(quiet[behind], [workers[key] for key in failing if key in workers]):
                    return None
                evidence = "silent inside a step while the others waited"
        elif now is None:  # the end of the logs: no silence to judge, but a rank left behind by all the others
            behind = _first_stopped(workers)
            others = [progress for key, progress in workers.items() if key != behind]
            if behind is None or not others or not _behind_all(workers[behind], others):
                return None
            evidence = "its last step behind every other rank's, its last line first, when the logs end"
        else:
            if threshold is None or not workers:
                return None
            if any(progress.line_at is None or now - progress.line_at <= _named_at(threshold(key))
                   for key, progress in workers.items()):
                return None
            behind = _first_stopped(workers)
            others = [progress for key, progress in workers.items() if key != behind]
            if behind is None or not _behind(workers[behind], others, margin=STOPPED_FIRST_MARGIN_SECONDS):
                return None  # every rank stopped at the same step and moment: no rank to blame (an exit, a kill)
            evidence = "silent past its stall threshold, the first rank of the run to stop"
        progress = workers[behind]
        return Event("hang", behind, progress.step, progress.line_at,
                     detail={"evidence": evidence, "silent_since": progress.line_at or 0.0})

    def cause(self, run: str) -> Cause | None:
        """The root cause of the run's current incident, None when there is none."""
        state = self._runs.get(run)
        return self._cause_of(state.incident) if state is not None else None

    def _cause_of(self, incident: _Incident | None) -> Cause | None:
        if incident is None or not incident.events:
            return None
        ordered = [event for _, event in sorted(incident.events, key=_order)]
        primaries = [event for event in ordered if not self._follows(event, incident)]
        if primaries:
            cause = _named(primaries[0], primaries)
            evidence = ("the earliest failure of the run" if cause.kind != "hang"
                        else str(cause.detail.get("evidence", "silent")))
        else:
            cause = ordered[0]
            evidence = "the earliest of failures that each follow another rank's: no rank shows why"
        followers = [event for event in ordered if event.key != cause.key
                     and (self._follows(event, incident) or not _before(event, cause))]
        return Cause(cause, followers, evidence, primary=bool(primaries))

    def history(self, run: str) -> list[Cause]:
        """The causes of the run's incidents, oldest first, the current one last (analyze marks each)."""
        state = self._runs.get(run)
        if state is None:
            return []
        current = self.cause(run)
        return [*state.past, *([current] if current is not None else [])]

    def causes(self) -> dict[str, Cause]:
        """Each run's current root cause that is a primary event (what serve exposes)."""
        found = {run: self.cause(run) for run in self._runs}
        return {run: cause for run, cause in found.items() if cause is not None and cause.primary}

    # ----- a checkpoint of it (state/snapshot.py)

    def dump(self) -> dict[str, dict[str, Any]]:
        """Each run's current incident as plain data: its events in the order read, and its highest step."""
        return {run: {"events": [dataclasses.asdict(event) for _, event in state.incident.events],
                      "highest_step": state.incident.highest_step}
                for run, state in self._runs.items() if state.incident is not None and state.incident.events}

    def restore(self, progress: dict[SeriesKey, tuple[int | None, float | None]],
                incidents: dict[str, tuple[list[Event], int | None]]) -> None:
        """Start again from a checkpoint: how far each rank got (its step and last line's time) and each run's
        current incident (its events in the order read, its highest step). Past incidents are analyze's, not kept."""
        self._runs, self._ranks, self._read = {}, {}, 0
        for key, (step, line_at) in progress.items():
            ranked = self._progress(key)
            ranked.step, ranked.line_at = step, line_at
        for run, (events, highest_step) in incidents.items():
            for event in events:
                self.heard(event)
            incident = self._run(run).incident
            if incident is not None and highest_step is not None:
                incident.highest_step = max(highest_step, incident.highest_step or highest_step)

    # -----

    def _breaks_anew(self, event: Event, incident: _Incident) -> bool:
        """A failure that kills a process, on another rank than a cause that is a value going wrong (a NaN): a new
        incident. A NaN does not run another rank out of memory; it may make its own rank raise."""
        if event.kind not in kinds.FAILURE_KINDS or self._follows(event, incident):
            return False
        current = self.cause(event.run)
        return (current is not None and kinds.KINDS[current.event.kind].family == kinds.ANOMALY
                and current.event.kind != "hang" and current.event.key != event.key)

    def _follows(self, event: Event, incident: _Incident) -> bool:
        """A follower kind, a scheduler's node timeout once a worker had a named failure, or a plain traceback on a rank
        whose collective failed or that a launcher stopped (that failure's exception). Not a launcher's summary of
        the rank's death (``elastic``): it names the culprit. A plain failure of a series that printed no step (a
        scheduler's or launcher's own output) follows the workers' failures: it dies because they did."""
        if event.kind in kinds.FOLLOWER_KINDS:
            return True
        if event.kind == "node_timeout" and any(
                other.kind in kinds.FAILURE_KINDS and other.kind not in kinds.GENERIC_KINDS
                and other.kind not in kinds.FOLLOWER_KINDS and self._worker(other.key) for _, other in incident.events):
            # A worker process died of a named failure of its own (a kill, an OOM; msrun then kills the others): the
            # scheduler misses nodes after it, whichever it times out first, also when a finished run's files are
            # read at one moment. (A named kind follows nothing: one pass, no nested look at the others.)
            return True
        subject = _subject(event)
        if (event.kind in kinds.GENERIC_KINDS and not self._worker(subject)
                and any(self._worker(_subject(other)) for _, other in incident.events)):
            return True
        return event.kind in kinds.GENERIC_KINDS and any(
            other.key == subject and other.kind in kinds.FOLLOWER_KINDS and other.kind not in kinds.GENERIC_KINDS
            and kinds.KINDS[other.kind].family == kinds.ERROR for _, other in incident.events)

    def _worker(self, key: SeriesKey) -> bool:
        """The series printed a step: a worker's, not a scheduler's or launcher's."""
        progress = self._ranks.get(key)
        return progress is not None and progress.step is not None

    def _close(self, run: str) -> None:
        cause = self.cause(run)
        state = self._runs[run]
        if cause is not None:
            state.past = [*state.past, cause][-MAX_PAST_INCIDENTS:]
        state.incident = None

    def _run(self, run: str) -> _Run:
        state = self._runs.get(run)
        if state is None:
            state = self._runs[run] = _Run()
        return state

    def _progress(self, key: SeriesKey) -> _Progress:
        run = self._run(key[0])
        progress = run.ranks.get(key)
        if progress is None:
            progress = run.ranks[key] = self._ranks[key] = _Progress(run)
        return progress


def _subject(event: Event) -> SeriesKey:
    """The rank an event is about: its own, or the worker a scheduler's event names (``node_rank``)."""
    named = event.detail.get("node_rank")
    return (event.key[0], event.key[1], str(named)) if type(named) is int else event.key


def _last_step(event: Event) -> int | None:
    last = event.detail.get("last_step", event.step)
    return int(last) if isinstance(last, (int, float)) and math.isfinite(last) else None


def _order(item: tuple[int, Event]) -> tuple[float, float, int]:
    """By the line's time, then the step the rank had reached, then the order read (byte order in a file)."""
    read, event = item
    return (math.inf if event.time is None else event.time, math.inf if event.step is None else event.step, read)


def _before(event: Event, cause: Event) -> bool:
    """The event is known to come before the cause (an earlier time, or an earlier step where times are unknown)."""
    if event.time is not None and cause.time is not None:
        return event.time < cause.time
    return event.step is not None and cause.step is not None and event.step < cause.step


def _named(first: Event, primaries: list[Event]) -> Event:
    """On the first primary's rank and step, a named failure rather than the traceback or summary carrying it."""
    if first.kind not in kinds.GENERIC_KINDS:
        return first
    return next((event for event in primaries if event.key == first.key and event.step == first.step
                 and event.kind not in kinds.GENERIC_KINDS), first)


def _named_at(threshold: float) -> float:
    """The silence at which a hang is named live: a lead before the stall threshold."""
    return threshold - min(threshold / 2, HANG_LEAD_SECONDS)


def _waited_for(incident: _Incident, quiet: dict[SeriesKey, _Progress]) -> SeriesKey | None:
    """The quiet rank that the followers' timed-out collectives name as the peer they waited for (MindSpore's CPU
    ring names it: ``wait receiving [R,N] failed``), the most named first. Such a rank may print on after its peers
    died (MindSpore's TCP warnings), so its last line does not tell it."""
    named = Counter(str(event.detail["peer_rank"]) for _, event in incident.events
                    if type(event.detail.get("peer_rank")) is int)
    for rank, _ in named.most_common():
        for key in quiet:
            if key[2] == rank:
                return key
    return None


def _first_stopped(ranks: dict[SeriesKey, _Progress]) -> SeriesKey | None:
    """The rank with the lowest step, then the earliest last line, then the first read."""
    if not ranks:
        return None
    return min(ranks, key=lambda key: (ranks[key].step if ranks[key].step is not None else -1,
                                       -math.inf if ranks[key].line_at is None else ranks[key].line_at,
                                       ranks[key].read))


def _behind_all(candidate: _Progress, others: list[_Progress]) -> bool:
    """A lower step than every other rank, and its last line before all of theirs by more than the margin."""
    return candidate.step is not None and all(
        other.step is not None and candidate.step < other.step and candidate.line_at is not None
        and other.line_at is not None and candidate.line_at < other.line_at - STOPPED_FIRST_MARGIN_SECONDS
        for other in others)


def _behind(candidate: _Progress, failing: list[_Progress], margin: float = 0.0) -> bool:
    """Behind every rank that failed: a lower step than one of them, or its last line before all of theirs (by more
    than ``margin`` seconds)."""
    if not failing:
        return True  # the failures came from the launcher's series or the scheduler's: the workers all went quiet
    if candidate.step is not None and any(other.step is not None and candidate.step < other.step for other in failing):
        return True
    if candidate.line_at is None:
        return False
    return all(other.line_at is not None and candidate.line_at < other.line_at - margin for other in failing)
