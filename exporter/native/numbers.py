"""Numbers as frameworks print them: the conversion kinds of the step-field kernel.

These define what step_fields.c converts (a float, a duration, a number with its unit),
and the Python format parsers use them too (through exporter.parse.numbers), so a value
reads the same whichever path its line took.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"^([-+0-9.eE]+|nan|inf)\s*(ms|s|us|sec|seconds)?$", re.IGNORECASE)
# Divide rather than multiply: 850 / 1000 prints as 0.85, 850 * 1e-3 does not.
_UNITS_PER_SECOND = {"ms": 1e3, "us": 1e6, "s": 1.0, "sec": 1.0, "seconds": 1.0}
DURATION_UNITS = tuple(_UNITS_PER_SECOND)
_WITH_UNIT = re.compile(r"^([-+0-9.eE,]+|nan|inf)\s*([A-Za-z/%]*)$", re.IGNORECASE)


def parse_float(text: str) -> float | None:
    """A float as frameworks print it ('1,234.5', 'nan', '-inf'); None if it is not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_duration_seconds(text: str, default_unit: str = "s") -> float | None:
    """'850ms' -> 0.85, '1.2s' -> 1.2, '850' with default_unit 'ms' -> 0.85."""
    match = _DURATION.match(text.strip())
    if match is None:
        return None
    value = parse_float(match.group(1))
    if value is None:
        return None
    return value / _UNITS_PER_SECOND[(match.group(2) or default_unit).lower()]


def parse_number_with_unit(text: str) -> tuple[float, str] | None:
    """'12.34T' -> (12.34, 'T'); '1,234' -> (1234.0, '')."""
    match = _WITH_UNIT.match(text.strip())
    if match is None:
        return None
    value = parse_float(match.group(1))
    if value is None:
        return None
    return value, match.group(2)
