"""Field naming shared by the format parsers: where a printed value lands."""

from __future__ import annotations

import re

from exporter.parse.records import StepLine

_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_NOT_NAME = re.compile(r"[^0-9a-z]+")


def metric_name(key: str) -> str:
    """'tokens per gpu per second (tgs)' -> 'tokens_per_gpu_per_second'; 'train/mfu' -> 'train_mfu'."""
    return _NOT_NAME.sub("_", _PARENTHESES.sub("", key).lower()).strip("_")


# A loss of the evaluation, not of the training step: NeMo's val_loss, a jsonl eval_loss.
_EVALUATION_PREFIXES = ("val_", "valid_", "validation_", "eval_", "test_")


def is_aux_loss(name: str) -> bool:
    """A named value called ``*_loss`` is an auxiliary loss (MoE load balancing, MTP, z-loss), else a plain gauge.

    Not auxiliary: an evaluation loss (``val_loss``), and the training loss as one rank or
    micro-batch saw it (MindFormers' ``micro_local_loss``, ``device_accum_local_loss``), a
    per-rank copy of the main loss that the rank-divergence view reads as a plain value.
    """
    return name.endswith("_loss") and not name.startswith(_EVALUATION_PREFIXES) and "local_loss" not in name


def set_value(line: StepLine, name: str, value: float | None) -> None:
    """The gauge ``name`` as the line printed it; None (not a number) unsets what the line had."""
    if value is None:
        line.values.pop(name, None)
    else:
        line.values[name] = value


def add_named(line: StepLine, name: str, value: float | None) -> None:
    """A named value of the line; None (not a number) adds nothing."""
    if value is not None:
        line.named[name] = value
