"""PyTorch Lightning's TQDMProgressBar, as a console redirected to a file holds it.

``Epoch 1:  70%|███████   | 7/10 [00:00<00:00,  7.72it/s, train_loss=3.290, lr=0.0242, grad_norm=8.800]``
(a line of tests/fixtures/real/lightning_bar_nan.log):
the bar counts the batches of the epoch (its total is the epoch's training batches), so the global step
is ``epoch * total + count`` (one optimizer step a batch: without gradient accumulation). The postfix holds
what ``self.log(..., prog_bar=True)`` logged, as the user named it (``train_loss``, ``train/loss``,
``loss_step``; parse/synonyms.py), and Lightning's ``v_num``; tqdm prints each number with three
significant digits, padded to five characters (``17.40``, ``nan.0``). Redraws are joined by carriage
returns (each a line for the parser) and each step is drawn twice, first with the postfix of the step
before, then with its own: the format ``redraws``, so
only a step's last redraw is its record. A count of 0 is an epoch's start, no step.
"""

from __future__ import annotations

from exporter.parse import synonyms
from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_BAR = lazy(r"\bEpoch (?P<epoch>\d+):\s*\d+%\|[^|]*\|\s*(?P<count>\d+)/(?P<total>\d+) \[(?P<inside>[^\]]*)\]")
_NOT_VALUES = ("v_num",)  # the logger's version number


def parse(text: str) -> StepLine | None:
    """One redraw of the training bar; None for any other text (the validation bar, a count of 0)."""
    match = _BAR.search(text)
    if match is None:
        return None
    count, total = int(match.group("count")), int(match.group("total"))
    if count == 0:
        return None
    line = StepLine(int(match.group("epoch")) * total + count, named={"epoch": float(match.group("epoch"))})
    # ``00:01<00:00,  7.46it/s, name=value, ...``: the elapsed time and the rate, then the postfix.
    for item in match.group("inside").split(", "):
        key, equals, raw = item.strip().partition("=")
        if not equals or key in _NOT_VALUES:
            continue
        value = parse_float(_unpadded(raw))
        named = synonyms.name(key)
        if named.gauge in ("loss", "learning_rate", "grad_norm") and named.gauge not in line.values:
            set_value(line, named.gauge, value)
        else:
            add_named(line, metric_name(key), value)
    if "loss" not in line.values:
        return None  # a bar without a loss in its postfix counts batches only (what a print glued to it holds is read)
    return line


def _unpadded(raw: str) -> str:
    """Lightning pads every number it puts in the postfix to five characters, a non-finite one too: ``nan.0``."""
    number = raw.lstrip("+-").lower()
    return raw.split(".", 1)[0] if number.startswith(("nan", "inf")) else raw


FORMAT = register(Format("lightning", "lightning", b"Epoch ", parse, detection_order=45, redraws=True))
