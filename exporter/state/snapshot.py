"""A TrainingState as JSON-ready data and back: what a checkpoint keeps of the state.

Every RankState field is kept, the detectors' internals included (each registered
detector's state dataclass, field by field), so after a restart the gauges, counters and
detectors carry on where they stood; only the status page's own
fields (``recent``, its ring of recent steps, and ``last_error_step``, marked
``checkpoint: False``) start empty again. Reading back validates every
value against the field's type before anything is changed: a damaged dump is refused
whole (ValueError), never half applied. Values of the right type but no sense are
repaired, and said so: an integer beyond the state's range (a step of hundreds of digits
written before lines were range-checked) is dropped, a negative counter starts at 0
again, series beyond the series limit are left out (the most recently active kept).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import typing
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from exporter.parse.numbers import MAX_INTEGER
from exporter.state.detectors import DETECTORS
from exporter.state.events import Event
from exporter.state.store import ExporterStats, RankState, SeriesKey, TrainingState

if TYPE_CHECKING:
    from pydantic import TypeAdapter

# pydantic validates a dump read back, and is imported only then: following, parsing and the
# one-shot commands never read a checkpoint and do not pay for its import (docs/benchmarks.md).

# A gauge, recomputed by the follower: not restored.
_NOT_RESTORED_STATS = frozenset({"files_followed"})


def dump_state(state: TrainingState) -> dict[str, Any]:
    """The state as plain data (lists, dicts, numbers, strings). Call with the lock held."""
    stats = {
        item.name: _plain(getattr(state.stats, item.name))
        for item in dataclasses.fields(ExporterStats)
        if item.name not in _NOT_RESTORED_STATS
    }
    series = [{"key": list(key), "values": _dump_rank(rank)} for key, rank in state.series.items()]
    return {"stats": stats, "series": series, "incidents": state.causes.dump()}


def restore_state(state: TrainingState, data: Any) -> list[str]:
    """Replace the state's series and counters with a dump; ValueError if it is not valid.

    Returns what had to be repaired (empty: nothing), one phrase each.
    """
    try:
        repairs = _repair(data["stats"], counts=True, path="stats")
        series = {}
        for entry in data["series"]:
            key = _key(entry["key"])
            repairs += [f"{'/'.join(key)} {repair}" for repair in _repair_rank(entry["values"])]
            series[key] = _load_rank(entry["values"])
        stats = _stats_adapter().validate_python(data["stats"])
        # Each run's current incident (the cause model's); a checkpoint written before it was kept has none.
        incidents = {run: (incident["events"], incident["highest_step"])
                     for run, incident in _incidents_adapter().validate_python(data.get("incidents", {})).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"not a valid state dump: {_describe(error)}") from None
    limit = state.limits.max_series
    if len(series) > limit:
        repairs.append(f"{len(series)} series, over the limit of {limit}: the {len(series) - limit} least recently "
                       "active left out")
        series = dict(sorted(series.items(), key=_activity, reverse=True)[:limit])
    with state.lock:
        state.series.clear()
        state.series.update(series)
        for name, value in stats.items():
            setattr(state.stats, name, value)
        # How far each rank got, for the cause model to tell who is behind: its step and its last line's time.
        state.causes.restore({key: (rank.step, rank.last_log_timestamp) for key, rank in series.items()},
                             {run: incident for run, incident in incidents.items()
                              if all(event.key in series for event in incident[0])})
    return repairs


def _activity(item: tuple[SeriesKey, RankState]) -> float:
    rank = item[1]
    return max(rank.last_log_timestamp or 0.0, rank.last_step_timestamp or 0.0)


_COUNTS = ("lines_total", "steps_total", "anomalies", "errors", "scheduler_events", "node_timeouts", "restarts_total")
_UNITS = {detector.name: detector for detector in DETECTORS}
# Checkpoints written before the detectors were registered units held their states as fields of their own.
_OLD_DETECTOR_FIELDS = ("loss_spikes", "grad_norm_spikes", "plateau", "slowdown", "rank_value_departures")


def _repair_rank(values: dict[str, Any]) -> list[str]:
    """Repair a dumped rank's numbers in place, before validation; what was wrong, one phrase each.

    A detector holding a number out of range starts afresh (it warms up again); any other
    integer out of range is left out, a negative or huge count starts at 0 again.
    """
    repairs = []
    detectors = values.get("detectors")
    if not isinstance(detectors, dict):
        detectors = {}
    for name, dumped in list(detectors.items()):
        if _repair(dumped, counts=True):  # its counts and steps are never negative
            del detectors[name]
            repairs.append(f"detector {name} out of range")
    for name in [name for name in values if name != "detectors"]:
        repairs += _repair({name: values[name]}, values, counts=name in _COUNTS)
    return repairs


def _repair(data: Any, into: Any = None, *, counts: bool = False, path: str = "") -> list[str]:
    """Every integer out of range in ``data`` (a dict or list, nested), fixed in ``into`` (default: ``data``):
    a count set to 0, another value left out. Returns the paths fixed."""
    into = data if into is None else into
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    repairs = []
    for key, value in list(items):
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, (dict, list)):
            repairs += _repair(value, counts=counts, path=where)
        elif type(value) is int and not (0 if counts else -MAX_INTEGER) <= value <= MAX_INTEGER:
            if counts:
                into[key] = 0
            elif isinstance(into, dict):
                del into[key]
            else:
                into[key] = None
            repairs.append(f"{where} {'negative or ' if counts else ''}out of range")
    return repairs


def _dump_rank(rank: RankState) -> dict[str, Any]:
    values = {item.name: _plain(getattr(rank, item.name)) for item in _CHECKPOINTED_FIELDS}
    values["detectors"] = {name: _dump_detector(state) for name, state in rank.detectors.items()}
    return values


def _dump_detector(state: Any) -> dict[str, Any]:
    """A detector's state dataclass as plain data: its fields but those marked checkpoint: False, copied."""
    return {item.name: copy.deepcopy(getattr(state, item.name)) for item in dataclasses.fields(state)
            if item.metadata.get("checkpoint", True)}


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
    if "detectors" not in values:
        values = {**values, "detectors": _migrated_detectors(values)}
    if "printed" not in values:
        values = {**values, "printed": {name: values[name] for name in _PRINTED_AS_FIELDS
                                        if isinstance(values.get(name), (int, float))}}
    rank = RankState()
    for name, adapter in _rank_adapters().items():
        if name in values:  # a field added since the checkpoint was written keeps its default
            setattr(rank, name, adapter.validate_python(values[name]))
    rank.detectors = {name: _detector_adapter(name).validate_python(dumped)
                      for name, dumped in _dict(values["detectors"]).items() if name in _UNITS}
    return rank


def _dict(value: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"detectors: a mapping expected, not {type(value).__name__}")
    return value


def _migrated_detectors(values: dict[str, Any]) -> dict[str, Any]:
    """The detector states of a checkpoint written before the detectors were units, in today's form."""
    def spikes(old: Any) -> list | None:
        return None if old is None else [old["mean"], old["deviation"], old["seen"], old["excursion"]]

    detectors: dict[str, Any] = {}
    plateau = values.get("plateau")
    if values.get("loss_spikes") is not None:
        detectors["loss"] = {"spikes": spikes(values["loss_spikes"]), "plateau": None if plateau is None else [
            plateau["smoothed"], plateau["change"], plateau["previous"], [step for step, _ in plateau["history"]],
            [value for _, value in plateau["history"]], plateau["best_step"]]}
    if values.get("grad_norm_spikes") is not None:
        detectors["grad_norm"] = {"spikes": spikes(values["grad_norm_spikes"])}
    slowdown = values.get("slowdown")
    if slowdown is not None:
        detectors["slowdown"] = {"kernel": [slowdown["baseline"], slowdown["seen"], slowdown["slow_run"],
                                            slowdown["held"], slowdown["in_slowdown"], slowdown["warmup"],
                                            slowdown.get("held_span", 1.0)]}
    if values.get("rank_value_departures"):
        detectors["rank_divergence"] = {"levels": values["rank_value_departures"]}
    return detectors


def _key(raw: Any) -> SeriesKey:
    run, node, rank = _key_adapter().validate_python(raw)
    return run, node, rank


@functools.cache
def _key_adapter() -> TypeAdapter:
    from pydantic import TypeAdapter

    return TypeAdapter(tuple[str, str, str])


@functools.cache
def _rank_adapters() -> dict[str, TypeAdapter]:
    """Per RankState field but the detectors: a validator for its dumped value."""
    from pydantic import TypeAdapter

    hints = typing.get_type_hints(RankState)
    return {item.name: TypeAdapter(hints[item.name]) for item in _CHECKPOINTED_FIELDS if item.name != "detectors"}


@functools.cache
def _detector_adapter(name: str) -> TypeAdapter:
    """A validator for a registered detector's dumped state: its State dataclass."""
    from pydantic import TypeAdapter

    return TypeAdapter(_UNITS[name].State)


class _IncidentDump(TypedDict):
    events: list[Event]
    highest_step: int | None


@functools.cache
def _incidents_adapter() -> TypeAdapter:
    from pydantic import TypeAdapter

    return TypeAdapter(dict[str, _IncidentDump])


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
