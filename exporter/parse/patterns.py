"""Regular expressions compiled at their first use, not at import.

The parser holds about ninety patterns: every failure signature's, every format's. A file
uses a few of them (its format's, and those of the failures it prints), while compiling
them all at import cost 76 million instructions, a tenth of a catch-up of 400,000 lines
(docs/benchmarks.md). ``lazy`` returns a stand-in that compiles its pattern the first time
one of its attributes is read; tests/test_patterns.py compiles every one of them.
"""

from __future__ import annotations

import re
from typing import AnyStr, cast


class LazyPattern:
    """A pattern's source and flags, compiled when first used; then it answers as re.Pattern."""

    def __init__(self, source: str | bytes, flags: int) -> None:
        self._source, self._flags = source, flags
        self._compiled: re.Pattern | None = None

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def __getattr__(self, name: str) -> object:
        # Only reached for attributes the instance does not hold yet: each one read is kept on
        # the instance, so that later reads (``search`` on every candidate line) cost what a
        # compiled pattern's would.
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        value = getattr(self._compiled, name)
        setattr(self, name, value)
        return value


def lazy(source: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(source, flags)``, done when the pattern is first used."""
    return cast("re.Pattern[AnyStr]", LazyPattern(source, flags))
