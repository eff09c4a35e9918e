"""Hugging Face Trainer log dicts (transformers ProgressCallback / PrinterCallback).

Current versions print formatted strings, ``{'loss': '0.466', 'grad_norm': '0.8123',
'learning_rate': '4.6e-05', 'epoch': '0.2'}``; older ones raw floats with bare ``nan``
(not a Python literal, hence a regular expression rather than ``ast.literal_eval``).
Transformers' dict holds no step: step and total come from a tqdm bar glued to the same
physical line by ``\\r`` (``40/1000 [00:52<20:48, ...]\\r...\\r{'loss': ...}``), the last bar
before the dict: a redirected file holds every redraw since the previous dict on that line, the
first of them the step of the previous dict (tqdm.write redraws the bar after the dict it writes).
The last one is the bar tqdm showed when the dict was written: the dict's step whenever a step takes
longer than tqdm's 0.1 s refresh (under it, tqdm may not have drawn the last steps yet). Trainers
modelled on it print the step inside the dict (PaddleNLP's ``'global_step': 150``, others
``'step'``): that one wins.
Evaluation dicts (``eval_loss``) and the final train summary are not training steps. A dict whose grad norm
is non-finite while its loss prints finite (the Trainer's NaN filter, TRL's trainers alike) counts one
non-finite loss that the line does not show, as Megatron-LM's ``number of nan iterations`` does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, SegmentShape, register
from exporter.parse.numbers import finite_int, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_DICT = lazy(r"\{'loss':[^{}]*\}")
_PAIR = lazy(r"'(?P<key>[^']+)':\s*'?(?P<value>[^,'}]*)'?")
_PROGRESS = lazy(r"(\d+)/(\d+) \[")


_GAUGES = {"loss": "loss", "learning_rate": "learning_rate", "grad_norm": "grad_norm"}
_STEP_KEYS = ("global_step", "step")


def parse(text: str) -> StepLine | None:
    """One training log dict; None when the line holds none."""
    match = _DICT.search(text)
    if match is None:
        return None
    line = StepLine(None)
    progress = _last(_PROGRESS.finditer(text, 0, match.start()))
    if progress is not None:
        line.step, line.values["total_steps"] = int(progress.group(1)), int(progress.group(2))
    for key, raw in _PAIR.findall(match.group(0)):
        value = parse_float(raw.strip())
        if key in _STEP_KEYS:
            line.step = finite_int(value) if value is not None else line.step  # 'step': None keeps the bar's
        elif key in _GAUGES:
            set_value(line, _GAUGES[key], value)
        else:
            add_named(line, metric_name(key), value)
    grad_norm, loss = line.values.get("grad_norm"), line.values.get("loss")
    if grad_norm is not None and not math.isfinite(grad_norm) and loss is not None and math.isfinite(loss):
        # The Trainer's NaN filter (logging_nan_inf_filter, on by default) prints the mean of the interval's
        # finite losses in place of a non-finite one: the grad norm is what says the step's loss was NaN.
        line.unprinted_nonfinite_losses = 1
    return line


# A pair as the block-wise reader takes it (native.segment_records), quoted or not: any other sends its line to parse().
_PLAIN_PAIR = lazy(rb"'(?P<key>[^']+)': (?P<quote>'?)(?P<value>[0-9A-Za-z.+-]{1,64})(?P=quote)(?:, |\}$)")


def segment_shape(segment: bytes) -> SegmentShape | None:
    """The shape of the segment's dict (from the dict on, without a terminal's padding): the same keys in the same
    order, printed as the Trainer prints them (``{'loss': '4.036', 'grad_norm': '0.3374', ...}``, every
    value quoted; older versions: none), read a block at a time with the values ``parse`` gives
    (parse/carriage.py); a step it names (PaddleNLP's ``'global_step': 150``) is the record's. None for a dict that
    names two steps or two values the same, or prints a value otherwise: those lines are read by ``parse``."""
    segment = segment[segment.find(FORMAT.prefilter):].rstrip(b" \t\x0b\x0c")
    try:
        text = segment.decode("ascii")
    except UnicodeDecodeError:
        return None
    if _DICT.fullmatch(text) is None:
        return None
    keys = [key for key, _ in _PAIR.findall(text)]
    steps = [index for index, key in enumerate(keys) if key in _STEP_KEYS]
    if len(steps) > 1:
        return None
    targets = tuple((False, "") if key in _STEP_KEYS else (True, _GAUGES[key]) if key in _GAUGES
                    else (False, metric_name(key)) for key in keys)
    if len(set(targets)) != len(targets):
        return None
    pairs, position = [], 1  # the pairs, one after the other from the brace to the end
    for pair in _PLAIN_PAIR.finditer(segment, 1):
        if pair.start() != position:
            break
        pairs.append(pair)
        position = pair.end()
    if position != len(segment) or [pair.group("key").decode() for pair in pairs] != keys:
        return None
    cuts = [0, *(edge for pair in pairs for edge in pair.span("value")), len(segment)]
    pieces = tuple(segment[begin:end] for begin, end in zip(cuts[::2], cuts[1::2], strict=True))
    return SegmentShape(pieces, b" [", targets, _filtered, steps[0] if steps else -1)


def _filtered(values: dict[str, list[float]]) -> list[int]:
    """The lines (indexes) whose loss is finite while their grad norm is not: ``parse``'s NaN-filter count."""
    grad_norms, losses = values.get("grad_norm"), values.get("loss")
    if grad_norms is None or losses is None or math.isfinite(sum(grad_norms)):
        return []
    return [line for line, (grad_norm, loss) in enumerate(zip(grad_norms, losses, strict=True))
            if not math.isfinite(grad_norm) and math.isfinite(loss)]


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    """The last of the matches, None when there is none."""
    last = None
    for last in matches:  # noqa: B007 - kept after the loop: the last one
        continue
    return last


FORMAT = register(Format("hf_trainer", "transformers", b"{'loss'", parse, detection_order=40, segment_context=True,
                           segment_shape=segment_shape))
