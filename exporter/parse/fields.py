"""Field naming shared by the format parsers: where a printed value lands in a StepRecord."""

from __future__ import annotations

import re

from exporter.parse.records import StepRecord

_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_NOT_NAME = re.compile(r"[^0-9a-z]+")


def metric_name(key: str) -> str:
    """'tokens per gpu per second (tgs)' -> 'tokens_per_gpu_per_second'; 'train/mfu' -> 'train_mfu'."""
    return _NOT_NAME.sub("_", _PARENTHESES.sub("", key).lower()).strip("_")


def add_named(record: StepRecord, name: str, value: float | None) -> None:
    """A named extra value: ``*_loss`` is an auxiliary loss, anything else a plain gauge."""
    if value is None:
        return
    if name.endswith("_loss"):
        record.aux_losses[name] = value
    else:
        record.extra[name] = value
