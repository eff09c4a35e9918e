"""/metrics in the Prometheus text format 0.0.4, written straight from the state.

prometheus-client's ``generate_latest`` walks one Sample object per value and escapes
every label of every sample: about 5 µs a sample, over 150 ms for the 30,000 samples of
1,024 ranks (docs/benchmarks.md). Here a rank's label text is escaped once per scrape
and each sample is one f-string. The output is what ``generate_latest`` prints for the
TrainingCollector's families (tests/test_text_format.py compares the two), so it walks
``metrics_table`` in the same order as the collector. The collector stays: the reference
these bytes are tested against, and the way to put the metrics in another registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client.utils import floatToGoString

from exporter.export import metrics_table as table
from exporter.state import TrainingState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INVALID_LABEL_NAME_CHARACTER = re.compile(r"[^a-zA-Z0-9_]|^[0-9]")


def render(state: TrainingState) -> bytes:
    """The whole exposition, from one consistent snapshot of the state."""
    out: list[str] = []
    with state.lock:
        _write(out.append, state)
    return "".join(out).encode()


def _write(write: Callable[[str], None], state: TrainingState) -> None:
    ranks = [(_RankLabels(key), rank) for key, rank in sorted(state.series.items())]
    for spec in table.RANK_GAUGES:
        write(_header(spec.name, spec.help, "gauge"))
        for labels, rank in ranks:
            value = getattr(rank, spec.attribute)
            if value is not None:
                write(f"{spec.name}{{{labels.text}}} {_number(value)}\n")
    for spec in table.NAMED_GAUGES:
        write(_header(spec.name, spec.help, "gauge"))
        for labels, rank in ranks:
            for name, value in sorted(getattr(rank, spec.attribute).items()):
                write(f"{spec.name}{{{labels.with_label(spec.label, name)}}} {_number(value)}\n")
    write(_header(table.RANK_INFO.name, table.RANK_INFO.help, "gauge"))
    for labels, rank in ranks:
        facts = {name: value for name, value in getattr(rank, table.RANK_INFO.attribute).items()
                 if name not in table.RANK_LABELS}
        write(f"{table.RANK_INFO.name}{{{labels.with_labels(facts)}}} 1.0\n")
    for spec in table.RANK_COUNTERS:
        write(_header(f"{spec.name}_total", spec.help, "counter"))
        for labels, rank in ranks:
            write(f"{spec.name}_total{{{labels.text}}} {_number(getattr(rank, spec.attribute))}\n")
    for spec in table.KIND_COUNTERS:
        write(_header(f"{spec.name}_total", spec.help, "counter"))
        for labels, rank in ranks:
            for kind, count in getattr(rank, spec.attribute).items():
                write(f"{spec.name}_total{{{labels.with_label(spec.label, kind)}}} {_number(count)}\n")
    stats = state.stats
    for spec in table.STATS_GAUGES:
        write(_header(spec.name, spec.help, "gauge"))
        write(f"{spec.name} {_number(getattr(stats, spec.attribute))}\n")
    for spec in table.STATS_COUNTERS:
        write(_header(f"{spec.name}_total", spec.help, "counter"))
        write(f"{spec.name}_total {_number(getattr(stats, spec.attribute))}\n")
    for spec in table.STATS_LABELLED_COUNTERS:
        write(_header(f"{spec.name}_total", spec.help, "counter"))
        for value_name, count in sorted(getattr(stats, spec.attribute).items()):
            write(f'{spec.name}_total{{{spec.label}="{_escape(value_name)}"}} {_number(count)}\n')
    process_up = getattr(state, table.PROCESS_UP.attribute)
    if process_up:  # only with --process-pattern
        write(_header(table.PROCESS_UP.name, table.PROCESS_UP.help, "gauge"))
        for (run, node), up in sorted(process_up.items()):
            write(f'{table.PROCESS_UP.name}{{node="{_escape(node)}",run="{_escape(run)}"}} {_number(int(up))}\n')


def _header(name: str, documentation: str, kind: str) -> str:
    documentation = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n"


def _number(value: float) -> str:
    value = float(value)
    if -1e6 < value < 1e6:  # repr is Go's formatting there; NaN and infinities fail the test
        return repr(value)
    return floatToGoString(value)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_name(name: str) -> str:
    return _INVALID_LABEL_NAME_CHARACTER.sub("_", name)


class _RankLabels:
    """A rank's labels, sorted by name as prometheus-client prints them, escaped once per scrape."""

    __slots__ = ("_around", "_parts", "text")

    def __init__(self, key: tuple[str, ...]) -> None:
        self._parts = [(name, f'{name}="{_escape(value)}"') for name, value in sorted(zip(table.RANK_LABELS, key))]
        self.text = ",".join(part for _, part in self._parts)
        self._around: dict[str, tuple[str, str]] = {}  # extra label name -> text before and after it

    def with_label(self, name: str, value: str) -> str:
        """The rank's labels plus one more, at its sorted place."""
        around = self._around.get(name)
        if around is None:
            before = "".join(part + "," for label, part in self._parts if label < name)
            after = "".join("," + part for label, part in self._parts if label > name)
            around = self._around[name] = (before, after)
        return f'{around[0]}{name}="{_escape(value)}"{around[1]}'

    def with_labels(self, extra: dict[str, str]) -> str:
        parts = [*self._parts, *((name, f'{_label_name(name)}="{_escape(value)}"') for name, value in extra.items())]
        return ",".join(part for _, part in sorted(parts))
