"""Field naming shared by the format parsers: where a printed value lands, and what a label may hold."""

from __future__ import annotations

import functools

from exporter.native.step_fields import normalised_name
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine


def metric_name(key: str) -> str:
    """'tokens per gpu per second (tgs)' -> 'tokens_per_gpu_per_second'; 'train/mfu' -> 'train_mfu'."""
    # A format's few keys come back on every step line (two regular expressions a key: a fifth of a Megatron line).
    return _known_metric_name(key) if len(key) <= MAX_CACHED_KEY_CHARS else normalised_name(key)


MAX_CACHED_KEY_CHARS = 128  # a longer key is no field's name: not kept
# The step-field kernel's normalising of a name (its segments grammar): one rule for every parser.
_known_metric_name = functools.lru_cache(maxsize=4096)(normalised_name)


# Longer label values are cut: a name or a log field is never legitimately this long, and each
# value is held per series and sent with every scrape.
MAX_LABEL_CHARS = 256


@functools.lru_cache(maxsize=8192)  # the same few names, asked once per file, batch or record
def label_value(text: str) -> str:
    """``text`` made fit to be a label value: valid UTF-8 and at most MAX_LABEL_CHARS characters.

    A file name that is not UTF-8 arrives with its bytes as lone surrogates (os.fsdecode), a
    JSON log field may hold lone surrogates of its own: either way, what is not UTF-8 becomes
    U+FFFD, so that /metrics, the status page and OTLP can encode every label.
    """
    if len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS]
    if text.isascii():
        return text
    try:
        encoded = text.encode("utf-8", "surrogateescape")  # the original bytes of a file name
    except UnicodeEncodeError:
        encoded = text.encode("utf-8", "surrogatepass")  # other lone surrogates: invalid UTF-8, replaced below
    return encoded.decode("utf-8", "replace")


# A loss of the evaluation, not of the training step: NeMo's val_loss, a jsonl eval_loss.
_EVALUATION_PREFIXES = ("val_", "valid_", "validation_", "eval_", "test_")


def is_aux_loss(name: str) -> bool:
    """A named value called ``*_loss`` is an auxiliary loss (MoE load balancing, MTP, z-loss), else a plain gauge.

    Not auxiliary: an evaluation loss (``val_loss``), and the training loss as one rank or
    micro-batch saw it (MindFormers' ``micro_local_lm_loss``, ``device_accum_local_lm_loss``), a
    per-rank copy of the main loss that the rank-divergence view reads as a plain value.
    """
    return name.endswith("_loss") and not name.startswith(_EVALUATION_PREFIXES) and not is_rank_value(name)


# What a rank's own value's name holds (is_rank_value). MindFormers 2.1's TrainingStateMonitor names its losses by
# the loss's tag (``micro_local_{tag}_loss``, ``device_accum_local_{tag}_loss``: callback.py), earlier versions
# ``micro_local_loss``.
RANK_VALUE_PARTS = ("local_norm", "local_loss", "micro_local_", "accum_local_")


def is_rank_value(name: str) -> bool:
    """A value the rank computed for itself, not for the whole model (MindFormers' TrainingStateMonitor:
    ``device_local_norm``, ``local_norm/<parameter>``, ``micro_local_lm_loss``, ``device_accum_local_lm_loss``):
    exported as ``training_rank_value`` and watched for rank divergence."""
    return any(part in name for part in RANK_VALUE_PARTS)


# A step time that is the mean of the last N steps (MMEngine's LogProcessor, window_size 10 by default): its
# unit says so (training_info's step_time_seconds_unit), and the slowdown rule counts a slow run N - 1 steps longer.
WINDOW_UNIT = "s, mean of {steps} steps"
_WINDOW = lazy(r"s, mean of (\d+) steps")


def window_of(unit: str | None) -> int:
    """How many steps a step time of this unit is the mean of (1: the step's own)."""
    match = _WINDOW.fullmatch(unit) if unit else None
    return int(match.group(1)) if match else 1


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
