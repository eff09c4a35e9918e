"""The one table of the names training code gives the values it prints, and what each name is.

Read by the formats that take names as users write them: Lightning's progress-bar postfix
(``self.log("train_loss", ...)``), ``key=value`` lines and the generic reader of lines no format
names. A name is made canonical first: lower case, ``_`` for spaces, dashes and slashes, the
``train``/``training`` qualifier before or after it left out (``train/loss``, ``loss_train``,
``Train Loss``), Lightning's ``_step`` suffix of a value logged per step too. A name qualified as
the evaluation's (``val``, ``valid``, ``validation``, ``eval``, ``test``, before or after) is
never a training gauge.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from exporter.parse.patterns import lazy

# gauge -> the canonical names that print it. Step times in milliseconds are named apart (below).
GAUGE_NAMES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "lm_loss", "total_loss", "loss_step", "avg_loss", "mean_loss", "reduced_loss"),
    "learning_rate": ("lr", "learning_rate", "lr_0"),
    "grad_norm": ("grad_norm", "gnorm", "grad_norm_total", "gradient_norm", "global_norm", "total_norm", "norm",
                  "grad_norm_step"),
    "step_time_seconds": ("step_time", "iter_time", "iteration_time", "time_per_step", "time_per_iter",
                          "time_per_iteration", "time_iter", "time_step", "s_step", "s_iter", "s_it", "sec_it",
                          "sec_step", "dt", "batch_time", "elapsed_time_per_iteration"),
    "throughput": ("throughput", "tok_s", "tokens_s", "tok_sec", "tokens_sec", "tokens_per_sec", "tokens_per_second",
                   "tps", "samples_s", "samples_per_second", "samples_per_sec"),
}
# Names whose value is a step time in milliseconds (``ms/step``), unless the value carries its own unit.
MILLISECOND_NAMES = ("ms_step", "ms_iter", "ms_it", "ms_per_step", "ms_per_iter", "step_time_ms", "iter_time_ms",
                     "time_ms", "dt_ms", "elapsed_time_per_iteration_ms")
# The step counter, as loops and trainers name it.
STEP_NAMES = ("step", "iter", "iteration", "it", "global_step", "update", "updates", "num_updates", "train_step",
              "trainer_global_step")
TRAIN_QUALIFIERS = ("train", "training")
EVALUATION_QUALIFIERS = ("val", "valid", "validation", "eval", "evaluation", "test", "dev")

_GAUGE_OF = {name: gauge for gauge, names in GAUGE_NAMES.items() for name in names}
_GAUGE_OF.update(dict.fromkeys(MILLISECOND_NAMES, "step_time_seconds"))
_SEPARATORS = lazy(r"[\s/\-.]+")


class Name(NamedTuple):
    """What a printed name stands for."""

    canonical: str  # lower case, ``_``-joined, without the train qualifier
    gauge: str | None  # the gauge it sets, None for any other value
    evaluation: bool  # qualified as the evaluation's: never a training value
    step: bool  # the step counter
    milliseconds: bool  # a step time printed in ms when the value carries no unit


@functools.lru_cache(maxsize=4096)  # the same few names, line after line
def name(printed: str) -> Name:
    """What ``printed`` names (``train/loss``, ``Grad Norm``, ``val_loss``, ``ms/step``, ``iter``)."""
    words = [word for word in _SEPARATORS.sub("_", printed.strip().lower()).split("_") if word]
    evaluation = bool(words) and (words[0] in EVALUATION_QUALIFIERS or words[-1] in EVALUATION_QUALIFIERS)
    if len(words) > 1 and words[0] in TRAIN_QUALIFIERS:
        words = words[1:]
    elif len(words) > 1 and words[-1] in TRAIN_QUALIFIERS:
        words = words[:-1]
    canonical = "_".join(words)
    if evaluation:
        return Name(canonical, None, True, False, False)
    return Name(canonical, _GAUGE_OF.get(canonical), False, canonical in STEP_NAMES, canonical in MILLISECOND_NAMES)
