"""PaddleNLP Trainer log lines (paddlenlp/trainer/trainer.py, ``logger.info`` of the logs dict).

``[    INFO] - loss: 2.00048828, learning_rate: 2.1e-06, global_step: 20, interval_runtime: 26.3106,
interval_samples_per_second: 6.081193361471736, interval_steps_per_second: 0.760149170183967,
epoch: 0.0014``. The interval figures are averages over the logging interval: the step time
is one over ``interval_steps_per_second``. (Its tqdm mode prints Hugging Face-style dicts
instead, read by ``hf_trainer``.)
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_ANCHOR = lazy(r"\bloss: \S+, learning_rate: .*?\bglobal_step: (\d+),")
_PAIR = lazy(r"(\w+): ([^,\s]+)")
_GAUGES = {"loss": "loss", "learning_rate": "learning_rate", "grad_norm": "grad_norm"}


def parse(text: str) -> StepLine | None:
    """One logs line; None when the line holds none."""
    match = _ANCHOR.search(text)
    if match is None:
        return None
    line = StepLine(int(match.group(1)))
    for key, raw in _PAIR.findall(text, match.start()):
        value = parse_float(raw)
        if key in _GAUGES:
            set_value(line, _GAUGES[key], value)
        elif key == "interval_steps_per_second":
            set_value(line, "step_time_seconds", 1 / value if value else None)
        elif key == "interval_samples_per_second":
            set_value(line, "throughput", value)
            line.units["throughput"] = "samples/s"
        elif key != "global_step":
            add_named(line, metric_name(key), value)
    return line


FORMAT = register(Format("paddlenlp", "paddlenlp", b"global_step: ", parse, detection_order=45))
