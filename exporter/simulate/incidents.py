"""The ``--inject`` grammar: ``KIND[:RANK][@STEP]``, parsed strictly.

A fire drill that silently ignores a typo tests nothing, so every malformed or
out-of-range spec is an error that names the spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class SpecError(ValueError):
    """A bad ``--inject`` spec, worded for the user."""


class Target(Enum):
    OPTIONAL = "optional"
    REQUIRED = "required"
    NONE = "none"  # the whole job


@dataclass(frozen=True, slots=True)
class KindRule:
    """What a kind of incident takes: a rank (or node id) and a step."""

    target: Target
    step_required: bool
    help: str
    default_step: int = 1


# The rank of `hang` names the culprit (the rank that stops first); the target of
# `node_timeout` is msrun's node id, which is the worker's rank on a standard launch.
KINDS: dict[str, KindRule] = {
    "nan": KindRule(Target.OPTIONAL, True, "loss and grad_norm print nan from STEP on (all ranks, or RANK)"),
    "spike": KindRule(Target.OPTIONAL, True, "loss jumps ~10x (grad_norm ~8x) at STEP for one step"),
    "plateau": KindRule(Target.OPTIONAL, True, "loss stays flat from STEP on"),
    "hang": KindRule(Target.OPTIONAL, True, "all ranks stop at STEP, RANK (default: the last) 3 steps earlier"),
    "crash": KindRule(Target.REQUIRED, True, "RANK dies with a Python traceback at STEP, the others hang"),
    "oom": KindRule(Target.REQUIRED, True, "RANK dies with an NPU out-of-memory error at STEP, the others hang"),
    "segfault": KindRule(Target.REQUIRED, True, "RANK dies with a segmentation fault at STEP, the others hang"),
    "nccl": KindRule(Target.REQUIRED, True,
                     "RANK dies with an NCCL error at STEP, the others time out in the watchdog"),
    "hccl": KindRule(Target.REQUIRED, True,
                     "RANK dies with an HCCL link failure (RDMA completion error, EI9999) at STEP, the others hang"),
    "ecc": KindRule(Target.REQUIRED, True,
                    "RANK's NPU reports an HBM multi-bit ECC error at STEP and stops; the others time out in HCCL "
                    "(notify wait, EI0002) a few steps later"),
    "node_timeout": KindRule(Target.REQUIRED, True,
                             "worker NODE goes silent at STEP; scheduler.log reports it timed out"),
    "watchdog": KindRule(Target.OPTIONAL, True,
                         "the ranks still running at STEP (all, or RANK) time out in NCCL's watchdog a few steps later "
                         "(after oom, crash or hang: the cascade)"),
    "diverge": KindRule(Target.REQUIRED, True,
                        "RANK's device_local_norm (TrainingStateMonitor) is ~12x its own level from STEP on"),
    "norm_shift": KindRule(Target.OPTIONAL, True,
                           "every rank's (or RANK's) device_local_norm triples from STEP on, together"),
    "straggler": KindRule(Target.REQUIRED, False,
                          "from STEP (default 1) on RANK is slow and every rank waits for it at each collective: "
                          "every rank's steps take ~2.5x longer"),
    "slowdown": KindRule(Target.NONE, True, "from STEP on every rank's steps take ~1.8x longer (a shared cause)"),
    "checkpoint": KindRule(Target.NONE, True, "a synchronous checkpoint save makes step STEP ~30x longer"),
    "restart": KindRule(Target.NONE, True,
                        "the job dies while training STEP, is started again and resumes from its latest checkpoint "
                        "(every 50 steps), replaying the steps after it"),
    "restart-loop": KindRule(Target.NONE, False,
                             "the job dies at STEP (default 20) every time it is started again; the launcher gives up "
                             "after 3 restarts", default_step=20),
}

_SPEC = re.compile(r"^(?P<kind>[a-z_-]+)(?::(?P<target>\d+))?(?:@(?P<step>\d+))?$")
_FORM = "KIND[:RANK][@STEP], e.g. nan@120, oom:3@200 or straggler:5"


@dataclass(frozen=True, slots=True)
class Incident:
    """One injected incident; ``rank`` None means every rank (or the default culprit)."""

    kind: str
    rank: int | None
    step: int

    @property
    def spec(self) -> str:
        target = "" if self.rank is None else f":{self.rank}"
        return f"{self.kind}{target}@{self.step}"


def parse_incident(spec: str) -> Incident:
    """Parse one spec; raises SpecError naming it."""
    match = _SPEC.match(spec.strip())
    if match is None:
        raise SpecError(f"--inject {spec!r}: expected {_FORM}")
    kind = match.group("kind")
    rule = KINDS.get(kind)
    if rule is None:
        raise SpecError(f"--inject {spec!r}: unknown incident {kind!r}; known: {', '.join(KINDS)}")
    target, step = match.group("target"), match.group("step")
    if target is None and rule.target is Target.REQUIRED:
        raise SpecError(f"--inject {spec!r}: {kind} needs a rank, e.g. {kind}:3@{step or 100}")
    if target is not None and rule.target is Target.NONE:
        raise SpecError(f"--inject {spec!r}: {kind} happens to the whole job, not to a rank: {kind}@{step or 100}")
    if step is None and rule.step_required:
        raise SpecError(f"--inject {spec!r}: {kind} needs a step, e.g. {spec}@100")
    return Incident(kind, None if target is None else int(target), rule.default_step if step is None else int(step))


def check_incident(incident: Incident, ranks: int, steps: int, spec: str | None = None) -> None:
    """Raise SpecError when the incident does not fit a run of ``ranks`` x ``steps``."""
    spec = spec or incident.spec
    if incident.rank is not None and incident.rank >= ranks:
        raise SpecError(f"--inject {spec!r}: rank {incident.rank} does not exist with --ranks {ranks} "
                        f"(ranks 0-{ranks - 1})")
    if not 1 <= incident.step <= steps:
        raise SpecError(f"--inject {spec!r}: step {incident.step} is outside the run (steps 1-{steps})")


def describe_kinds() -> str:
    """The grammar and the kinds, for --help."""
    return f"{_FORM}. Kinds: " + "; ".join(f"{kind}: {rule.help}" for kind, rule in KINDS.items())
