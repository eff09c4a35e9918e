"""/metrics in the Prometheus text format 0.0.4 or OpenMetrics 1.0, written straight from the walk's families.

prometheus-client's ``generate_latest`` walks one Sample object per value and escapes
every label of every sample: about 5 µs a sample, over 150 ms for the 30,000 samples of
1,024 ranks (docs/benchmarks.md). Here a series' label text is escaped once, and its
encoded lines are kept while the values they print stay the same: at 1,024 ranks nearly
every series is unchanged from one scrape to the next, so a scrape is mostly a join of
kept bytes. The output is what ``generate_latest`` prints for
the TrainingCollector's families (tests/test_text_format.py compares the two): both write
``families.walk``. The collector stays: the reference these bytes are tested against, and
the way to put the metrics in another registry.

OpenMetrics differs only in the family headers (a counter's family is named without
``_total``, an info family without ``_info`` and typed ``info``; HELP escapes quotes too)
and in the closing ``# EOF``. The sidecar's own ``process_*`` and ``python_info``
(prometheus-client's collectors, a handful of samples) follow, printed by
prometheus-client's writer for the same format.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from prometheus_client import CollectorRegistry, exposition
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.export.families import STATE_ONLY, Family, ScrapeTime, named_samples, walk
from exporter.export.metrics_table import COUNTER, INFO, MetricSpec
from exporter.state import Limits, TrainingState

CONTENT_TYPE = exposition.CONTENT_TYPE_PLAIN_0_0_4
OPENMETRICS_CONTENT_TYPE = openmetrics_exposition.CONTENT_TYPE_LATEST
_INVALID_LABEL_NAME_CHARACTER = re.compile(r"[^a-zA-Z0-9_]|^[0-9]")


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header asks for OpenMetrics, decided as prometheus-client decides it
    (Prometheus asks for OpenMetrics 1.0.0 first)."""
    _, content_type = exposition.choose_encoder(accept or "")
    return content_type.startswith("application/openmetrics-text")


def render(state: TrainingState, scrape_time: ScrapeTime = STATE_ONLY, *, openmetrics: bool = False,
           runtime: Collector | None = None) -> bytes:
    """The whole exposition, from one consistent snapshot of the state; ``runtime``'s families
    (the process and platform collectors) after it."""
    # Lines kept per series are joined once: no per-sample string, no copy of the whole text but the body.
    pieces: list[bytes] = []
    header = _openmetrics_header if openmetrics else _header
    for family in walk(state, _series_labels, scrape_time):
        pieces.append(header(family.spec))
        _append_family(pieces, family)
    if openmetrics:  # prometheus-client's writer closes with the # EOF line, also for no families
        pieces.append(openmetrics_exposition.generate_latest(runtime or _EMPTY))
    elif runtime is not None:
        pieces.append(exposition.generate_latest(runtime))
    return b"".join(pieces)


_EMPTY = CollectorRegistry(auto_describe=False)


def _append_family(pieces: list[bytes], family: Family[_SeriesLabels]) -> None:
    """The family's sample lines: those of the render before where it read the very same series and values.

    The walk gives a rank's values as the very objects of the scrape before until the rank changes
    (families._RankRows), so a family none of whose ranks changed is told in one C-level pass, with no
    Python step per series; the others go series by series (``_family_lines``). The kept entry holds
    the objects it compares (so none is freed and its id reused) and is one tuple, stored at once:
    renders on several server threads cannot mix two entries' halves.
    """
    spec = family.spec
    kept = _FAMILY_LINES.get(spec)
    if kept is not None and _same_objects(kept[0], family.series) and _same_objects(kept[1], family.values):
        pieces.extend(kept[3])
        return
    printed, lines = _family_lines(family, kept)
    _FAMILY_LINES[spec] = (family.series, family.values, printed, lines)
    pieces.extend(lines)


def _same_objects(kept: Sequence[object], new: Sequence[object]) -> bool:
    # The walk gives an unchanged family its very lists of the walk before: one identity test.
    return kept is new or (len(kept) == len(new) and all(map(operator.is_, kept, new)))


# Per family, the last render's series, values, what each series' lines print and the lines (one
# entry a series, b"" for a series without a value). Kept per family, not per series: a tuple and
# a slot per series and family would hold megabytes at a thousand ranks (docs/benchmarks.md, scale).
_FAMILY_LINES: dict[MetricSpec, tuple[Sequence[_SeriesLabels], Sequence[object], list[Any], list[bytes]]] = {}


def _family_lines(family: Family[_SeriesLabels], kept: tuple[Sequence[_SeriesLabels], Sequence[object], list[Any],
                                                              list[bytes]] | None) -> tuple[list[Any], list[bytes]]:
    """What each series prints and its lines: the render before's where the series at the same place is
    the very same and prints the same, else written anew.

    A number prints the same when it is the very object (the state holds the same object until it changes
    it; a number equal but not identical is written again, so -0.0 never takes 0.0's text); a family with
    a label, when its label values and numbers are the very objects, in the same order.
    """
    spec = family.spec
    name = _sample_name(spec)
    old_series, old_printed, old_lines = (kept[0], kept[2], kept[3]) if kept is not None else ((), [], [])
    reusable = len(old_series)
    printed: list[Any] = []
    lines: list[bytes] = []
    if spec.label is None:
        for index, (labels, value) in enumerate(zip(family.series, family.values, strict=True)):
            if value is None:
                line = b""
            elif index < reusable and old_printed[index] is value and old_series[index] is labels:
                line = old_lines[index]
            else:
                line = labels.sample_line(name, cast("float", value))
            printed.append(value)
            lines.append(line)
        return printed, lines
    for index, (labels, named) in enumerate(zip(family.series, cast("Sequence[Mapping[str, float]]", family.values),
                                                strict=True)):
        if not named:
            prints, line = None, b""
        elif index < reusable and old_series[index] is labels and _same_named(old_printed[index], named):
            prints, line = old_printed[index], old_lines[index]
        else:
            prints = (_interned(tuple(named)), tuple(named.values()))
            line = labels.named_lines(name, spec.label, named_samples(spec, named))
        printed.append(prints)
        lines.append(line)
    return printed, lines


def _same_named(kept: tuple[tuple[str, ...], tuple[float, ...]] | None, named: Mapping[str, float]) -> bool:
    """Whether the kept lines print the very label values and numbers of ``named``, in the same order."""
    if kept is None:
        return False
    names, numbers = kept
    return len(names) == len(named) and all(map(operator.is_, names, named)) and all(
        map(operator.is_, numbers, named.values()))


@functools.lru_cache(maxsize=1024)
def _interned(names: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple for every series' equal label values: a rank's kinds are every rank's."""
    return names


@functools.cache
def _sample_name(spec: MetricSpec) -> str:
    return f"{spec.name}_total" if spec.type == COUNTER else spec.name


@functools.cache
def _header(spec: MetricSpec) -> bytes:
    """0.0.4: counters named with _total, info families as gauges."""
    name = f"{spec.name}_total" if spec.type == COUNTER else spec.name
    kind = "counter" if spec.type == COUNTER else "gauge"
    documentation = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n".encode()


@functools.cache
def _openmetrics_header(spec: MetricSpec) -> bytes:
    """OpenMetrics: the family's name without the _total or _info its samples carry."""
    name = spec.name.removesuffix("_info") if spec.type == INFO else spec.name
    return f"# HELP {name} {_escape(spec.help)}\n# TYPE {name} {spec.type}\n".encode()


def _number(value: float) -> str:
    value = float(value)
    if -1e6 < value < 1e6:  # repr is Go's formatting there; NaN and infinities fail the test
        return repr(value)
    return floatToGoString(value)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@functools.lru_cache(maxsize=256)  # a few names, each seen once per series and scrape
def _label_name(name: str) -> str:
    return _INVALID_LABEL_NAME_CHARACTER.sub("_", name)


@functools.lru_cache(maxsize=4 * Limits().max_series)  # a rank's labels, its info labels, room for the others
def _series_labels(names: tuple[str, ...], values: tuple[str, ...]) -> _SeriesLabels:
    """A series' labels, escaped once for as long as the series is scraped, not once per scrape."""
    return _SeriesLabels(names, values)


class _SeriesLabels:
    """A series' labels, sorted by name as prometheus-client prints them, escaped once for as long as the
    series is scraped; with one more label (a kind, an aux loss name) too."""

    __slots__ = ("_names", "_values", "around", "text")

    def __init__(self, names: tuple[str, ...], values: tuple[str, ...]) -> None:
        self._names, self._values = names, values  # the cache's key tuples: no memory of their own
        self.text = ",".join(part for _, part in self._parts())
        # extra label name -> the labels' text before and after it. Not the whole text per value:
        # a dozen kinds per series, four thousand series, would keep megabytes of it.
        self.around: dict[str, tuple[str, str]] = {}

    def _parts(self) -> list[tuple[str, str]]:
        """(name, its ``name="value"`` text) by name; made again for each extra label, not kept."""
        pairs = sorted(zip(self._names, self._values, strict=True))
        return [(name, f'{_label_name(name)}="{_escape(value)}"') for name, value in pairs]

    def sample_line(self, name: str, value: float) -> bytes:
        # _number, inline: a changed rank writes a dozen of these lines at every scrape.
        value = float(value)
        number = repr(value) if -1e6 < value < 1e6 else floatToGoString(value)
        text = self.text
        return (f"{name}{{{text}}} {number}\n" if text else f"{name} {number}\n").encode()

    def named_lines(self, name: str, label: str, samples: Iterable[tuple[str, float]]) -> bytes:
        """A line per (label value, number), the label at its sorted place among the series' labels."""
        before, after = self.around.get(label) or self._split_at(label)
        return "".join([f"{name}{{{before}{_label_pair(label, label_value)}{after}}} {_number(value)}\n"
                        for label_value, value in samples]).encode()

    def _split_at(self, name: str) -> tuple[str, str]:
        """The series' labels before and after one more label at its sorted place, with their commas."""
        parts = self._parts()
        before = "".join(part + "," for label, part in parts if label < name)
        after = "".join("," + part for label, part in parts if label > name)
        self.around[name] = (before, after)
        return before, after


@functools.lru_cache(maxsize=1024)  # the known kinds, aux loss and metric names
def _label_pair(name: str, value: str) -> str:
    """One extra label's ``name="value"`` text."""
    return f'{name}="{_escape(value)}"'
