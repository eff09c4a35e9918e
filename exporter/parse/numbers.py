"""Number and unit parsing shared by the format parsers.

Floats, durations and numbers with a unit read as the step-field kernel reads them: the
definitions are the kernel's conversion kinds (exporter/native/numbers.py).
"""

from __future__ import annotations

import math

from exporter.native.numbers import parse_duration_seconds, parse_float, parse_number_with_unit

__all__ = ["finite_int", "parse_duration_seconds", "parse_float", "parse_number_with_unit"]


def finite_int(value: float | None) -> int | None:
    """A step number read as a float (JSON, regex groups): 100.0 -> 100; nan and None -> None."""
    return int(value) if value is not None and math.isfinite(value) else None
