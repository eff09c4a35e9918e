"""Number and unit parsing shared by the format parsers, and the range every number must keep.

Floats, durations and numbers with a unit read as the step-field kernel reads them: the
definitions are the kernel's conversion kinds (exporter/native/numbers.py).
"""

from __future__ import annotations

import math

from exporter.native.numbers import parse_duration_seconds, parse_float, parse_number_with_unit
from exporter.native.step_fields import MAX_DIGITS

__all__ = ["MAX_INTEGER", "NumberOutOfRange", "check_integer", "finite_int", "parse_duration_seconds", "parse_float",
           "parse_number_with_unit"]

# The largest step, total or count the state keeps: the step-field kernel's 18 digits. A float
# holds it, so the exposition can print it, and a checkpoint reads it back exactly.
MAX_INTEGER = 10**MAX_DIGITS - 1


class NumberOutOfRange(ValueError):
    """A line printed an integer beyond MAX_INTEGER: the line is rejected, not the whole read."""


def check_integer(value: int) -> int:
    """``value`` if it is within +-MAX_INTEGER; NumberOutOfRange otherwise."""
    if -MAX_INTEGER <= value <= MAX_INTEGER:
        return value
    raise NumberOutOfRange(f"an integer of more than {MAX_DIGITS} digits")  # str() of it could fail


def finite_int(value: float | None) -> int | None:
    """A step number read as a float (JSON, regex groups): 100.0 -> 100; nan and None -> None."""
    return check_integer(int(value)) if value is not None and math.isfinite(value) else None
