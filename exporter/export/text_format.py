"""/metrics in the Prometheus text format 0.0.4 or OpenMetrics 1.0, written straight from the walk's families.

prometheus-client's ``generate_latest`` walks one Sample object per value and escapes
every label of every sample: about 5 µs a sample, over 150 ms for the 30,000 samples of
1,024 ranks (docs/benchmarks.md). Here a series' label text is escaped once, and kept
while the series is scraped; each counter value is formatted once per scrape; each
sample is one f-string. The output is what ``generate_latest`` prints for
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
import re
from collections.abc import Callable

from prometheus_client import CollectorRegistry, exposition
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.export.families import STATE_ONLY, Family, ScrapeTime, walk
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
    # Encoded a family at a time: at the series limit the text of every sample at once, as
    # string objects, then joined, then encoded, would hold the exposition three times over.
    chunks: list[bytes] = []
    counts, gauges = _Numbers(), _Numbers(keep_zero=False)
    header = _openmetrics_header if openmetrics else _header
    for family in walk(state, _series_labels, scrape_time):
        out: list[str] = []
        _write_family(out.append, family, counts if family.spec.type == COUNTER else gauges, header)
        chunks.append("".join(out).encode())
    body = b"".join(chunks)
    if openmetrics:  # prometheus-client's writer closes with the # EOF line, also for no families
        return body + openmetrics_exposition.generate_latest(runtime or _EMPTY)
    return body if runtime is None else body + exposition.generate_latest(runtime)


_EMPTY = CollectorRegistry(auto_describe=False)


def _write_family(write: Callable[[str], None], family: Family[_SeriesLabels], numbers: _Numbers,
                  header: Callable[[MetricSpec], str]) -> None:
    spec = family.spec
    counter = spec.type == COUNTER
    name = f"{spec.name}_total" if counter else spec.name
    write(header(spec))
    number = numbers.__getitem__
    label = spec.label
    if label is not None:
        # Half the samples at 1,024 ranks: the series' labels on either side of the extra one are
        # built once per series, the extra label's text once per value for all series.
        pairs = _LabelPairs(label)
        for labels, label_value, value in family.samples:
            before, after = labels.around.get(label) or labels.split_at(label)
            write(f"{name}{{{before}{pairs[label_value]}{after}}} {number(value)}\n")
        return
    for labels, _, value in family.samples:
        text = labels.text
        write(f"{name}{{{text}}} {number(value)}\n" if text else f"{name} {number(value)}\n")


class _Numbers(dict[float, str]):
    """Values as text, each formatted once per scrape: most counters are 0, and ranks print the same
    step, total and learning rate. A gauge's -0.0 would find the text of 0.0 (they are equal keys), so
    for gauges zero is formatted each time, never kept."""

    def __init__(self, keep_zero: bool = True) -> None:
        super().__init__()
        self._keep_zero = keep_zero

    def __missing__(self, value: float) -> str:
        text = _number(value)
        if value or self._keep_zero:
            self[value] = text
        return text


def _header(spec: MetricSpec) -> str:
    """0.0.4: counters named with _total, info families as gauges."""
    name = f"{spec.name}_total" if spec.type == COUNTER else spec.name
    kind = "counter" if spec.type == COUNTER else "gauge"
    documentation = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n"


def _openmetrics_header(spec: MetricSpec) -> str:
    """OpenMetrics: the family's name without the _total or _info its samples carry."""
    name = spec.name.removesuffix("_info") if spec.type == INFO else spec.name
    return f"# HELP {name} {_escape(spec.help)}\n# TYPE {name} {spec.type}\n"


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

    __slots__ = ("_parts", "around", "text")

    def __init__(self, names: tuple[str, ...], values: tuple[str, ...]) -> None:
        pairs = sorted(zip(names, values, strict=True))
        self._parts = [(name, f'{_label_name(name)}="{_escape(value)}"') for name, value in pairs]
        self.text = ",".join(part for _, part in self._parts)
        # extra label name -> the labels' text before and after it. Not the whole text per value:
        # a dozen kinds per series, four thousand series, would keep megabytes of it.
        self.around: dict[str, tuple[str, str]] = {}

    def split_at(self, name: str) -> tuple[str, str]:
        """The series' labels before and after one more label at its sorted place, with their commas."""
        before = "".join(part + "," for label, part in self._parts if label < name)
        after = "".join("," + part for label, part in self._parts if label > name)
        self.around[name] = (before, after)
        return before, after


class _LabelPairs(dict[str, str]):
    """One extra label's ``name="value"`` text by value, escaped once per family and scrape."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def __missing__(self, value: str) -> str:
        text = self[value] = f'{self._name}="{_escape(value)}"'
        return text
