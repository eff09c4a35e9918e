"""JSON lines: one metrics dict per step, as custom training loops write them.

``{"step": 100, "loss": 2.345, "lr": 0.0001, "grad_norm": 1.2, "step_time": 0.85}``, possibly
behind a logger prefix. Python's ``json.dumps`` writes ``NaN``/``Infinity``, which
``json.loads`` reads back. A dict without a loss is not a step (an event, a checkpoint note).
Step aliases cover the trainers that write such files: LLaMA-Factory's ``trainer_log.jsonl``
(``current_steps``/``total_steps``) and fairseq's ``--log-format json`` (``num_updates``,
values as strings).

The same reading is a field table (the JSON grammar): runs of flat dicts are read by the
step-field kernel, which leaves to ``parse`` below every line it does not read alike (escapes,
nesting, two aliases of one value, a step that is no integer, a unitless ``throughput``).
MMEngine's ``scalars.json`` records are a format of their own (mmengine_scalars.py).
"""

from __future__ import annotations

import json

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import finite_int, parse_float
from exporter.parse.records import StepLine
from exporter.parse.step_table import Kind, StepField, StepTable

_STEP_KEYS = ("step", "iteration", "global_step", "current_steps", "num_updates")
_TOTAL_KEYS = ("total_steps", "total_iterations", "max_steps")
_LOSS_KEYS = ("loss", "train_loss")
_LR_KEYS = ("lr", "learning_rate")
_GRAD_NORM_KEYS = ("grad_norm", "gnorm")
_TIME_KEYS = ("step_time", "iteration_time")  # seconds
_THROUGHPUT_UNITS = {"throughput": None, "tokens_per_sec": "tokens/s", "tps": "tokens/s"}
_TRAIN_PREFIX = "train/"

RECORD = StepTable((
    StepField(_LOSS_KEYS[0], Kind.FLOAT, "loss", aliases=_LOSS_KEYS[1:]),
    StepField(_LR_KEYS[0], Kind.FLOAT, "learning_rate", aliases=_LR_KEYS[1:]),
    StepField(_GRAD_NORM_KEYS[0], Kind.FLOAT, "grad_norm", aliases=_GRAD_NORM_KEYS[1:]),
    StepField(_TIME_KEYS[0], Kind.FLOAT, "step_time_seconds", aliases=_TIME_KEYS[1:]),
    # One column a unit: the unitless ``throughput`` key's lines are parse's.
    StepField("tokens_per_sec", Kind.FLOAT, "throughput", aliases=("tps",), unit="tokens/s"),
), opener="", closer="", pair_separator=",", name_separator=":", step=_STEP_KEYS[0], step_aliases=_STEP_KEYS[1:],
    required=_LOSS_KEYS[0], json=True, total_names=_TOTAL_KEYS, dropped=_TRAIN_PREFIX,
    declines=("throughput",))


def parse(text: str) -> StepLine | None:
    """One metrics dict; None when the line holds none or it has no loss."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        loaded = json.loads(text[start:])
    except ValueError:  # truncated or not JSON at all
        return None
    if not isinstance(loaded, dict):
        return None
    values = {metric_name(str(key).removeprefix(_TRAIN_PREFIX)): _number(value) for key, value in loaded.items()}
    loss_key = next((key for key in _LOSS_KEYS if key in values), None)
    if loss_key is None:
        return None
    step = _first(values, _STEP_KEYS)
    total = _first(values, _TOTAL_KEYS)
    line = StepLine(finite_int(step))
    set_value(line, "total_steps", finite_int(total))
    set_value(line, "loss", values.pop(loss_key))
    set_value(line, "learning_rate", _first(values, _LR_KEYS))
    set_value(line, "grad_norm", _first(values, _GRAD_NORM_KEYS))
    set_value(line, "step_time_seconds", _first(values, _TIME_KEYS))
    for key, unit in _THROUGHPUT_UNITS.items():
        if values.get(key) is not None:
            set_value(line, "throughput", values.pop(key))
            if unit:
                line.units["throughput"] = unit
            else:
                line.units.pop("throughput", None)
    for name, value in values.items():
        add_named(line, name, value)
    return line


def _first(values: dict[str, float | None], keys: tuple[str, ...]) -> float | None:
    """The value of the first key present (popping every alias, so none becomes an extra)."""
    found = None
    for key in keys:
        value = values.pop(key, None)
        if found is None:
            found = value
    return found


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return parse_float(value) if isinstance(value, str) else None



# A convention many training loops follow, no framework's.
FORMAT = register(Format("jsonl", "", b'loss"', parse, detection_order=70, step_table=RECORD))
