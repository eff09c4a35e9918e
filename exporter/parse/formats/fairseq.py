"""fairseq's plain progress records (fairseq/logging/progress_bar.py, SimpleProgressBar).

``| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05, wps=52922, ups=0.5,
wpb=104928, bsz=5325, num_updates=445, lr=8.90889e-05, gnorm=1.543, clip=0%, oom=0,
loss_scale=2.000, wall=882, train_wall=756`` (newer versions put a logger prefix such as
``2021-03-02 10:00:00 | INFO | train_inner |`` in front). The ``450 / 1891`` counts batches
within the epoch; ``num_updates`` is the step. ``wps`` (words per second) is the throughput.
``--log-format json`` records are read by ``jsonl``.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_ANCHOR = lazy(r"\bepoch (\d+):\s+\d+ / \d+ (?=loss=)")
_PAIR = lazy(r"(\w+)=([^,\s]+)")
_UPDATES = lazy(r"\bnum_updates=(\d+)")
_GAUGES = {"loss": "loss", "lr": "learning_rate", "gnorm": "grad_norm", "wps": "throughput"}


def parse(text: str) -> StepLine | None:
    """One progress record with its update count; None otherwise."""
    match = _ANCHOR.search(text)
    if match is None:
        return None
    updates = _UPDATES.search(text, match.end())
    if updates is None:  # fairseq before 0.6: no update count, no step (docs/formats.md)
        return None
    line = StepLine(int(updates.group(1)), named={"epoch": int(match.group(1))})
    for key, raw in _PAIR.findall(text, match.end()):
        value = parse_float(raw)
        if key in _GAUGES:
            set_value(line, _GAUGES[key], value)
        elif key != "num_updates":
            add_named(line, metric_name(key), value)
    if "throughput" in line.values:
        line.units["throughput"] = "words/s"
    return line


FORMAT = register(Format("fairseq", "fairseq", b" loss=", parse, detection_order=65))
