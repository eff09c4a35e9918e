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
from exporter.parse.formats.registry import Format, SegmentShape, nothing_filtered, register
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


# A postfix pair as the block-wise reader takes it (native.bar_records): any other sends its redraws to parse().
_PAIR = lazy(rb", (?P<key>[^,=\]]+)=(?P<value>[0-9A-Za-z.+-]{1,64})")
_GAUGES = ("loss", "learning_rate", "grad_norm")


def bar_shape(segment: bytes) -> SegmentShape | None:
    """The shape of a redraw of the training bar (its postfix's keys in their order), read a block at a time by
    native.bar_records with the values ``parse`` gives (parse/redraws.py); None for a redraw ``parse`` reads
    otherwise: a postfix without a loss, two keys of one value or of the epoch, a pair not ``, key=value``."""
    segment = segment.rstrip(b" \t\x0b\x0c")
    match = _BAR.match(segment.decode("utf-8", "replace"))
    opening = segment.find(b" [")
    if match is None or not segment.endswith(b"]") or opening < 0 or b"\r" in segment or b"\n" in segment:
        return None
    pairs = list(_PAIR.finditer(segment, opening, len(segment) - 1))
    if not pairs or pairs[-1].end() != len(segment) - 1 or any(
            later.start() != earlier.end() for earlier, later in zip(pairs, pairs[1:], strict=False)):
        return None
    targets, seen = [], {("epoch", False)}
    for pair in pairs:
        key = pair.group("key").decode("ascii", "replace").strip()
        gauge = synonyms.name(key).gauge
        target = ((True, gauge) if gauge in _GAUGES and (gauge, True) not in seen
                  else (False, "" if key in _NOT_VALUES else metric_name(key)))
        if target[1] and (target[1], target[0]) in seen:
            return None
        seen.add((target[1], target[0]))
        targets.append(target)
    if (True, "loss") not in targets or b"=" in segment[opening:pairs[0].start()]:
        return None
    cuts = [pairs[0].start(), *(edge for pair in pairs for edge in pair.span("value")), len(segment)]
    pieces = tuple(segment[begin:end] for begin, end in zip(cuts[::2], cuts[1::2], strict=True))
    return SegmentShape(pieces, b" [", tuple(targets), nothing_filtered, lead=FORMAT.prefilter)


def _unpadded(raw: str) -> str:
    """Lightning pads every number it puts in the postfix to five characters, a non-finite one too: ``nan.0``."""
    number = raw.lstrip("+-").lower()
    return raw.split(".", 1)[0] if number.startswith(("nan", "inf")) else raw


FORMAT = register(Format("lightning", "lightning", b"Epoch ", parse, detection_order=45, redraws=True,
                         bar_shape=bar_shape))
