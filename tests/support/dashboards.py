"""The PromQL of the Grafana dashboards, as Grafana would send it (tests/test_dashboards.py, benchmarks/fleet.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

# How Grafana fills its built-in interval variables; any of its choices is a duration.
BUILTIN_VARIABLES = {"__interval": "1m", "__rate_interval": "1m", "__range": "5m"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict) -> Iterator[tuple[str, str]]:
    """(panel title or 'annotation: name', expr) for every PromQL expression."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for item in dashboard["annotations"].get("list", []):
        if "expr" in item:
            yield f"annotation: {item['name']}", item["expr"]


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with each $variable / ${variable} replaced (AssertionError naming one without a value)."""
    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise AssertionError(f"unresolved variable ${name} in {expr}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
