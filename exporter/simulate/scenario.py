"""A simulated msrun run as a stream of time slots: pure and deterministic for a seed.

The run's timeline (``timeline``) says what each slot holds: start-up, a training step, a
pause (a long checkpoint save in progress, a dead job waiting to be restarted). Without
restarts or saves slot 0 is start-up and slot ``s`` is step ``s``; later slots carry what
happens after the last step (a watchdog or the scheduler noticing a dead peer). Each rank
draws its noise from its own generator, the same number of draws every step, so an
incident on one rank never changes the numbers another rank prints.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from exporter.simulate import texts
from exporter.simulate.incidents import Incident, check_incident

# The shape of a healthy run. Numbers are close to the repository's DeepSeek-MoE example.
INITIAL_LOSS = 10.4          # ~ln(vocabulary size) at step 0
FINAL_LOSS_FLOOR = 1.5
LOSS_DECAY_EXPONENT = 0.8    # power law: the loss keeps improving slowly until the end
LOSS_NOISE = 0.015           # relative, per step and rank
GRAD_NORM_FLOOR, GRAD_NORM_INITIAL = 0.8, 3.8
GRAD_NORM_NOISE = 0.05
GRAD_NORM_NOT_OBTAINED = 0.01  # chance per step that MindFormers prints "grad_norm: NaN"
PEAK_LR, MIN_LR, WARMUP_FRACTION = 1e-4, 1e-5, 0.05
STEP_MS, STEP_TIME_NOISE, THROUGHPUT = 850, 0.02, 12.34
CHECKPOINT_EVERY = 50
TOP_CELL_WARNING = 0.03      # chance per step of a harmless PyNative warning

# Incidents.
SPIKE_LOSS_FACTOR, SPIKE_GRAD_NORM_FACTOR = 10.0, 8.0
DIVERGE_FACTOR, NORM_SHIFT_FACTOR = 12.0, 3.0
LOCAL_NORM_NOISE = 0.05      # relative, per step and rank
_LOCAL_NORM_KINDS = ("diverge", "norm_shift")  # a run with either prints TrainingStateMonitor values
# Synchronous training waits for the slowest rank at every collective: a straggler slows
# every rank alike (its own step time is no different), a shared cause (storage, network) too.
STRAGGLER_FACTOR, SLOWDOWN_FACTOR = 2.5, 1.8
CHECKPOINT_SAVE_FACTOR = 30  # a synchronous save: one step ~30x longer
CHECKPOINT_SAVE_SLOTS = 4    # ... which takes that many slots of wall time when written live
RESTART_DOWN_SLOTS = 4       # a dead job's time until the launcher starts it again
RESTART_LOOP_RESTARTS = 3    # restart-loop: the launcher gives up after this many restarts
HANG_LEAD_STEPS = 3          # the hang's culprit stops this many steps before the others
TIMEOUT_SLOTS = 5            # slots until watchdogs and the scheduler notice a dead peer
RANKS_PER_NODE = 8
_DIES_WITH_ERROR = ("crash", "oom", "segfault", "nccl", "hccl", "ecc")
_RESTARTS = ("restart", "restart-loop")
_SILENCES = ("hang", *_DIES_WITH_ERROR, "node_timeout")
SCHEDULER_LOG = "scheduler.log"
MODES = (None, "pynative", "graph")


def worker_log(rank: int) -> str:
    return f"worker_{rank}.log"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What to simulate; ``check`` validates it."""

    ranks: int = 8
    steps: int = 1000
    incidents: tuple[Incident, ...] = ()
    pp_stages: int = 1
    seed: int = 0
    start: datetime = datetime(2026, 6, 9, 10, 20, 30)
    seconds_per_slot: float = STEP_MS / 1000
    # The records' layout: "pynative" (LossCallback), "graph" (MFLossMonitor and its progress bar), or
    # None: PyNative, but graph mode when TrainingStateMonitor values are printed (diverge, norm_shift),
    # the mode that callback was written for (the outputs the golden tests hold).
    mode: str | None = None

    def check(self) -> None:
        """Raise ValueError (SpecError for an incident) naming what does not fit."""
        if self.ranks < 1:
            raise ValueError(f"--ranks must be at least 1, got {self.ranks}")
        if self.steps < 1:
            raise ValueError(f"--steps must be at least 1, got {self.steps}")
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(mode for mode in MODES if mode)}, got {self.mode}")
        if self.pp_stages < 1 or self.ranks % self.pp_stages:
            raise ValueError(f"--pp-stages {self.pp_stages} must divide --ranks {self.ranks}")
        for incident in self.incidents:
            check_incident(incident, self.ranks, self.steps)
        kinds = {incident.kind for incident in self.incidents}
        if kinds & set(_RESTARTS) and kinds & set(_SILENCES):
            raise ValueError(f"--inject: {' and '.join(sorted(kinds & set(_RESTARTS)))} cannot be combined with "
                             f"{', '.join(sorted(kinds & set(_SILENCES)))} (a restart replays steps; those stop ranks "
                             "at a step)")
        if "restart-loop" in kinds and sum(incident.kind in _RESTARTS for incident in self.incidents) > 1:
            raise ValueError("--inject: restart-loop is the only restart of its run")

    def prints_loss(self, rank: int) -> bool:
        """With pipeline parallelism only the last stage prints step records."""
        return rank >= self.ranks - self.ranks // self.pp_stages


@dataclass(frozen=True, slots=True)
class Slot:
    """The lines written in one time slot, by file name, in writing order."""

    index: int
    lines: dict[str, list[str]]


@dataclass(slots=True)
class Plan:
    """Who stops when, and what is printed late, derived from the incidents."""

    stop_step: list[int]                       # per rank: first step it does not print
    fatal_error: dict[int, Incident]           # rank -> the error it prints at its stop step
    delayed: dict[int, list[tuple[str, int]]]  # step -> (kind, rank) of messages TIMEOUT_SLOTS slots after it
    last_step: int                             # the last step at which any rank writes
    hung: bool                                 # ranks went silent without any error: alive, stuck

    def finished(self, rank: int, steps: int) -> bool:
        return self.stop_step[rank] > steps


def plan_run(config: RunConfig) -> Plan:
    """Apply the incidents in step order: the first one to silence a rank wins."""
    stop = [config.steps + 1] * config.ranks
    fatal: dict[int, Incident] = {}
    delayed: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for incident in sorted(config.incidents, key=lambda incident: incident.step):
        kind, step = incident.kind, incident.step
        if kind == "hang":
            culprit = config.ranks - 1 if incident.rank is None else incident.rank
            stop = [min(s, step) for s in stop]
            stop[culprit] = min(stop[culprit], max(1, step - HANG_LEAD_STEPS))
        elif kind in (*_DIES_WITH_ERROR, "node_timeout"):
            rank = incident.rank
            assert rank is not None, f"parse_incident lets no {kind} without a rank through"
            if stop[rank] < step:
                continue  # already silent: a stuck or dead rank cannot fail again
            survivors = [other for other in range(config.ranks) if other != rank and stop[other] >= step]
            stop = [min(s, step) for s in stop]
            if kind == "node_timeout":
                delayed[step].append(("node_timeout", rank))
            else:
                fatal.setdefault(rank, incident)
            if kind == "nccl":
                delayed[step] += [("nccl_watchdog", other) for other in survivors]
            elif kind == "ecc":  # the device is gone: the others wait in HCCL's notify for it, in vain
                delayed[step] += [("hccl_timeout", other) for other in survivors]
    # After every rank's fate is known: a rank that died at the step does not time out as well.
    for incident in config.incidents:
        if incident.kind == "watchdog":
            waiting = [rank for rank in range(config.ranks) if incident.rank in (None, rank)
                       and rank not in fatal and stop[rank] >= incident.step]
            stop = [min(s, incident.step) if rank in waiting else s for rank, s in enumerate(stop)]
            delayed[incident.step] += [("nccl_watchdog", rank) for rank in waiting]
    writes = [s - 1 + (rank in fatal) for rank, s in enumerate(stop)]
    stopped_early = any(s <= config.steps for s in stop)
    timed_out = any(kind in ("node_timeout", "nccl_watchdog", "hccl_timeout")
                    for late in delayed.values() for kind, _ in late)
    return Plan(stop, fatal, dict(delayed), max(writes), hung=stopped_early and not (fatal or timed_out))


@dataclass(frozen=True, slots=True)
class Moment:
    """What one slot of the timeline holds for the workers."""

    kind: str      # "start" (start-up lines), "step", "pause" (nothing: a save in progress, a dead job)
    step: int = 0  # the step of a "step" slot
    attempt: int = 0  # how many times the job was started before this one


def timeline(config: RunConfig) -> list[Moment]:
    """The workers' slots from the first start-up to the last step trained (before any late message).

    A restart (``restart@S``) kills the job while it trains step S for the first time; after
    RESTART_DOWN_SLOTS the launcher starts it again, and it resumes from its latest checkpoint
    (saved every CHECKPOINT_EVERY steps), replaying the steps after it. ``restart-loop@S`` dies
    at step S every time, and the launcher gives up after RESTART_LOOP_RESTARTS restarts. A
    long save (``checkpoint@S``) takes CHECKPOINT_SAVE_SLOTS slots before step S's line.
    """
    restarts = {incident.step for incident in config.incidents if incident.kind == "restart"}
    loop = next((incident.step for incident in config.incidents if incident.kind == "restart-loop"), None)
    saves = {incident.step for incident in config.incidents if incident.kind == "checkpoint"}
    moments, attempt, step = [Moment("start")], 0, 1
    while step <= config.steps:
        if step in restarts or step == loop:
            restarts.discard(step)
            if step == loop and attempt == RESTART_LOOP_RESTARTS:
                break  # the launcher gives up
            attempt += 1
            moments += [Moment("pause")] * RESTART_DOWN_SLOTS + [Moment("start", attempt=attempt)]
            step = (step - 1) // CHECKPOINT_EVERY * CHECKPOINT_EVERY + 1
            continue
        if step in saves:
            saves.discard(step)
            moments += [Moment("pause")] * (CHECKPOINT_SAVE_SLOTS - 1)
        moments.append(Moment("step", step, attempt))
        step += 1
    return moments


def _progress(step: float, steps: int) -> float:
    # Curves are functions of step / steps: a 100-step drill looks like a 100 000-step run.
    return 1 + step / max(1.0, steps / 40)


def expected_loss(step: float, steps: int) -> float:
    """A power law: fast at first, still improving slowly at the end."""
    return FINAL_LOSS_FLOOR + (INITIAL_LOSS - FINAL_LOSS_FLOOR) * _progress(step, steps) ** -LOSS_DECAY_EXPONENT


def expected_grad_norm(step: int, steps: int) -> float:
    return GRAD_NORM_FLOOR + (GRAD_NORM_INITIAL - GRAD_NORM_FLOOR) / _progress(step, steps)


def learning_rate(step: int, steps: int) -> float:
    """Linear warmup to the peak, then cosine decay to the minimum."""
    warmup = max(1, round(steps * WARMUP_FRACTION))
    if step <= warmup:
        return PEAK_LR * step / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return MIN_LR + (PEAK_LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass(slots=True)
class _RankEffects:
    """The incidents that change what one rank prints (not whether it prints)."""

    nan_from: float = math.inf
    plateau_from: float = math.inf
    local_norm_factors: list[tuple[int, float]] = field(default_factory=list)  # (from step, factor)
    slow_from: list[tuple[int, float]] = field(default_factory=list)  # (from step, factor): straggler, slowdown
    spikes: set[int] = field(default_factory=set)
    saves: set[int] = field(default_factory=set)

    def local_norm_factor(self, step: int) -> float:
        return math.prod(factor for start, factor in self.local_norm_factors if step >= start)


def _effects(config: RunConfig, rank: int) -> _RankEffects:
    effects = _RankEffects()
    for incident in config.incidents:
        # Every rank waits for a straggler: its step time is every rank's (its rank names the culprit).
        if incident.kind == "straggler":
            effects.slow_from.append((incident.step, STRAGGLER_FACTOR))
        elif incident.kind == "slowdown":
            effects.slow_from.append((incident.step, SLOWDOWN_FACTOR))
        elif incident.kind == "checkpoint":
            effects.saves.add(incident.step)
        if incident.rank not in (None, rank):
            continue
        if incident.kind == "nan":
            effects.nan_from = min(effects.nan_from, incident.step)
        elif incident.kind == "plateau":
            effects.plateau_from = min(effects.plateau_from, incident.step)
        elif incident.kind == "spike":
            effects.spikes.add(incident.step)
        elif incident.kind in _LOCAL_NORM_KINDS:
            factor = DIVERGE_FACTOR if incident.kind == "diverge" else NORM_SHIFT_FACTOR
            effects.local_norm_factors.append((incident.step, factor))
    return effects


class _Rank:
    """One worker: its noise generator and what it prints at a step."""

    def __init__(self, config: RunConfig, rank: int) -> None:
        self.config = config
        self.rank = rank
        self.pid = 2810 + rank
        self.effects = _effects(config, rank)
        # A string seed hashes the same in every process (unlike hash() of a str).
        self._random = random.Random(f"{config.seed}/{rank}")
        # TrainingStateMonitor values draw from their own generator: the other numbers stay as without them.
        self._state_monitor = (random.Random(f"{config.seed}/{rank}/state-monitor")
                               if any(incident.kind in _LOCAL_NORM_KINDS for incident in config.incidents) else None)

    def step_lines(self, step: int, when: datetime) -> list[str]:
        draw = self._random
        # Always the same draws per step, so the stream never depends on which ones are used.
        loss_noise, grad_noise, time_noise = draw.gauss(0, 1), draw.gauss(0, 1), draw.gauss(0, 1)
        grad_missing, chatter = draw.random(), draw.random()
        config, effects = self.config, self.effects
        lines = []
        if config.prints_loss(self.rank):
            loss = expected_loss(min(step, effects.plateau_from), config.steps) * (1 + LOSS_NOISE * loss_noise)
            expected_grad = expected_grad_norm(step, config.steps) * (1 + GRAD_NORM_NOISE * grad_noise)
            grad_norm: float | None = expected_grad
            if step in effects.spikes:
                loss, grad_norm = loss * SPIKE_LOSS_FACTOR, expected_grad * SPIKE_GRAD_NORM_FACTOR
            elif step == 1 or grad_missing < GRAD_NORM_NOT_OBTAINED:
                grad_norm = None
            if step >= effects.nan_from:
                loss = grad_norm = math.nan
            step_ms = STEP_MS * (1 + STEP_TIME_NOISE * time_noise)
            for slow_from, factor in effects.slow_from:
                if step >= slow_from:
                    step_ms *= factor
            if step in effects.saves:
                step_ms *= CHECKPOINT_SAVE_FACTOR
            record = (texts.graph_step_lines if self.graph_mode else self._pynative_step_line)(
                when, step, config.steps, loss, round(step_ms), learning_rate(step, config.steps), grad_norm,
                THROUGHPUT * STEP_MS / step_ms)
            lines += record
        if self._state_monitor is not None:
            lines.append(texts.state_monitor_line(when, step, config.steps, "device_local_norm",
                                                  self._local_norm(step, self._state_monitor.gauss(0, 1)),
                                                  pynative=not self.graph_mode))
        if step % CHECKPOINT_EVERY == 0 or step in effects.saves:
            lines.append(texts.checkpoint_line(when, step, self.rank))
        if chatter < TOP_CELL_WARNING:
            lines.append(texts.top_cell_warning(when, self.pid))
        return lines

    @property
    def graph_mode(self) -> bool:
        """MFLossMonitor records: asked for, or by default when TrainingStateMonitor values are printed (a
        callback of graph-mode training; with ``mode="pynative"`` they come beside LossCallback records)."""
        mode = self.config.mode
        return mode == "graph" or (mode is None and self._state_monitor is not None)

    @staticmethod
    def _pynative_step_line(*values) -> list[str]:
        return [texts.step_line(*values)]

    def _local_norm(self, step: int, noise: float) -> float:
        """This rank's share of the gradient norm: ranks of a sharded model hold different parts,
        so each prints its own level (0.3 to 0.6 of the global norm here)."""
        share = 0.3 + 0.3 * self.rank / max(1, self.config.ranks - 1)
        return (expected_grad_norm(step, self.config.steps) * share * (1 + LOCAL_NORM_NOISE * noise)
                * self.effects.local_norm_factor(step))

    def fatal_lines(self, incident: Incident, when: datetime) -> list[str]:
        kind = incident.kind
        if kind == "oom":
            return texts.oom_lines(request_bytes=4294967296 + 1048576 * self.rank)
        if kind == "segfault":
            return texts.segfault_lines()
        if kind == "nccl":
            return texts.nccl_error_lines()
        if kind == "hccl":
            return texts.hccl_error_lines(when, self.pid, self.rank, peer=(self.rank + 1) % self.config.ranks)
        if kind == "ecc":
            return texts.hbm_ecc_lines(when, self.pid, self.rank)
        return texts.crash_lines(self.rank)


def simulate(config: RunConfig) -> Iterator[Slot]:
    """The run, slot by slot. ``config`` must have passed ``check``."""
    plan = plan_run(config)
    moments = timeline(config)
    ranks = [_Rank(config, rank) for rank in range(config.ranks)]
    scheduler_pid = 2800
    slot_of_step = {0: 0} | {moment.step: index for index, moment in enumerate(moments) if moment.kind == "step"}
    delayed: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for step, late in plan.delayed.items():
        delayed[slot_of_step[step] + TIMEOUT_SLOTS] += late
    # A restart-loop's job never reaches its last step: it ends with its timeline.
    last_slot = max([slot_of_step.get(plan.last_step, len(moments) - 1), *delayed])
    finished = moments[-1].step == config.steps and all(plan.finished(rank, config.steps)
                                                        for rank in range(config.ranks))
    for index in range(last_slot + 1):
        when = config.start + timedelta(seconds=index * config.seconds_per_slot)
        moment = moments[index] if index < len(moments) else Moment("pause")
        lines: dict[str, list[str]] = {}
        if moment.kind == "start":
            lines[SCHEDULER_LOG] = _scheduler_startup(config, when, scheduler_pid)
            for rank in ranks:
                lines[worker_log(rank.rank)] = texts.startup_lines(when, rank.pid + 100 * moment.attempt,
                                                                   config.steps, config.pp_stages, config.ranks,
                                                                   rank.graph_mode)
        elif moment.kind == "step":
            for rank in ranks:
                printed = _rank_lines(rank, plan, moment.step, when)
                if printed:
                    lines[worker_log(rank.rank)] = printed
        for kind, target_rank in delayed.get(index, ()):
            if kind == "node_timeout":
                lines.setdefault(SCHEDULER_LOG, []).append(
                    texts.scheduler_node_timed_out(when, scheduler_pid, target_rank))
            elif kind == "hccl_timeout":
                culprit = next(rank for rank, incident in plan.fatal_error.items() if incident.kind == "ecc")
                lines.setdefault(worker_log(target_rank), []).extend(
                    texts.hccl_notify_timeout_lines(when, ranks[target_rank].pid, target_rank, culprit))
            else:
                lines.setdefault(worker_log(target_rank), []).extend(
                    texts.nccl_watchdog_lines(when, target_rank, sequence=4 * index))
        if finished and index == len(moments) - 1:
            lines.setdefault(SCHEDULER_LOG, []).extend(
                texts.scheduler_unregistered(when, scheduler_pid, rank) for rank in range(config.ranks))
        yield Slot(index, lines)


def _rank_lines(rank: _Rank, plan: Plan, step: int, when: datetime) -> list[str]:
    stop = plan.stop_step[rank.rank]
    if step < stop:
        lines = rank.step_lines(step, when)
        if step == rank.config.steps:
            lines.append(texts.training_finished_line(when, step))
        return lines
    if step == stop and rank.rank in plan.fatal_error:
        return rank.fatal_lines(plan.fatal_error[rank.rank], when)
    return []


def _scheduler_startup(config: RunConfig, when: datetime, pid: int) -> list[str]:
    lines = [
        texts.scheduler_registered(when, pid, node, f"node-{node // RANKS_PER_NODE}",
                                   f"10.0.0.{1 + node // RANKS_PER_NODE}", node + 1, config.ranks)
        for node in range(config.ranks)
    ]
    return lines + texts.scheduler_initialized(when, pid)
