"""A TrainingState as JSON-ready data and back: what a checkpoint keeps of the state.

Every RankState field is kept, the detectors' internals included, so after a restart the
gauges, counters and detectors carry on where they stood; only the status page's own
fields (``recent``, its ring of recent steps, and ``last_error_step``, marked
``checkpoint: False``) start empty again. Reading back validates every
value against the field's type before anything is changed: a damaged dump is refused
whole (ValueError), never half applied.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import typing
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from exporter.state.detectors import PlateauTracker, SpikeDetector
from exporter.state.store import ExporterStats, RankState, SeriesKey, TrainingState

if TYPE_CHECKING:
    from pydantic import TypeAdapter

# pydantic validates a dump read back, and is imported only then: following, parsing and the
# one-shot commands never read a checkpoint and do not pay for its import (docs/benchmarks.md).

# A gauge, recomputed by the follower: not restored.
_NOT_RESTORED_STATS = frozenset({"files_followed"})


class _SpikeSnapshot(TypedDict):
    mean: float
    deviation: float
    seen: int
    excursion: int


class _PlateauSnapshot(TypedDict):
    smoothed: float | None
    change: float
    previous: float
    history: list[tuple[int, float]]
    best_step: int | None


_DETECTORS: dict[type, type] = {SpikeDetector: _SpikeSnapshot, PlateauTracker: _PlateauSnapshot}


def dump_state(state: TrainingState) -> dict[str, Any]:
    """The state as plain data (lists, dicts, numbers, strings). Call with the lock held."""
    stats = {
        item.name: _plain(getattr(state.stats, item.name))
        for item in dataclasses.fields(ExporterStats)
        if item.name not in _NOT_RESTORED_STATS
    }
    series = [{"key": list(key), "values": _dump_rank(rank)} for key, rank in state.series.items()]
    return {"stats": stats, "series": series}


def restore_state(state: TrainingState, data: Any) -> None:
    """Replace the state's series and counters with a dump; ValueError if it is not valid."""
    try:
        stats = _stats_adapter().validate_python(data["stats"])
        series = {_key(entry["key"]): _load_rank(entry["values"]) for entry in data["series"]}
    except (KeyError, TypeError, ValueError) as error:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"not a valid state dump: {_describe(error)}") from None
    with state.lock:
        state.series.clear()
        state.series.update(series)
        for name, value in stats.items():
            setattr(state.stats, name, value)


def _dump_rank(rank: RankState) -> dict[str, Any]:
    values = {}
    for item in _CHECKPOINTED_FIELDS:
        value = getattr(rank, item.name)
        values[item.name] = value.snapshot() if isinstance(value, (SpikeDetector, PlateauTracker)) else _plain(value)
    return values


# The status page's own fields (marked checkpoint: False) are not kept: the ring of recent
# steps (RankState.recent) fills again after a restart, last_error_step is approximate.
_CHECKPOINTED_FIELDS = tuple(item for item in dataclasses.fields(RankState) if item.metadata.get("checkpoint", True))


def _plain(value: Any) -> Any:
    """A copy of a dict, so that the dump does not change with the state; other values as they are."""
    return dict(value) if isinstance(value, dict) else value


# Checkpoints written before the printed values were one dict (RankState.printed) hold
# each of these as a field of its own.
_PRINTED_AS_FIELDS = ("total_steps", "loss", "learning_rate", "grad_norm", "step_time_seconds", "throughput")


def _load_rank(values: dict[str, Any]) -> RankState:
    if "printed" not in values:
        values = {**values, "printed": {name: values[name] for name in _PRINTED_AS_FIELDS
                                        if isinstance(values.get(name), (int, float))}}
    rank = RankState()
    detector: Any
    for name, (detector, adapter) in _rank_adapters().items():
        if name not in values:
            continue  # a field added since the checkpoint was written keeps its default
        value = adapter.validate_python(values[name])
        if detector is not None and value is not None:
            value = detector.restored(value)
        setattr(rank, name, value)
    return rank


def _key(raw: Any) -> SeriesKey:
    run, node, rank = _key_adapter().validate_python(raw)
    return run, node, rank


@functools.cache
def _key_adapter() -> TypeAdapter:
    from pydantic import TypeAdapter

    return TypeAdapter(tuple[str, str, str])


@functools.cache
def _rank_adapters() -> dict[str, tuple[type | None, TypeAdapter]]:
    """Per RankState field: its detector class (or None) and a validator for its dumped value."""
    from pydantic import TypeAdapter

    adapters = {}
    hints = typing.get_type_hints(RankState)
    for name in (item.name for item in _CHECKPOINTED_FIELDS):
        hint = hints[name]
        detector = next((cls for cls in _DETECTORS if cls in typing.get_args(hint)), None)
        dumped: Any = _DETECTORS[detector] | None if detector else hint
        adapters[name] = (detector, TypeAdapter(dumped))
    return adapters


@functools.cache
def _stats_adapter() -> TypeAdapter:
    from pydantic import TypeAdapter

    hints = typing.get_type_hints(ExporterStats)
    fields = {name: hint for name, hint in hints.items() if name not in _NOT_RESTORED_STATS}
    # Built at run time from the dataclass's hints: mypy knows only TypedDicts written out.
    return TypeAdapter(TypedDict("StatsSnapshot", fields, total=False))  # type: ignore[operator]


def _describe(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing {error}"
    return validation_reason(error) or str(error)


def validation_reason(error: Exception) -> str | None:
    """Where and why pydantic refused a value ("positions.a.offset: Input should be ..."); None for other errors."""
    if "pydantic" not in sys.modules:
        return None  # nothing was validated, so this is not a ValidationError
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return None
    first = error.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc']) or 'value'}: {first['msg']}"
