"""Regular expressions compiled at their first use, not at import.

The parser holds about ninety patterns: every failure signature's, every format's. A file
uses a few of them (its format's, and those of the failures it prints), while compiling
them all at import cost 76 million instructions, a tenth of a catch-up of 400,000 lines
(docs/benchmarks.md). ``lazy`` returns a stand-in that compiles its pattern the first time
one of its attributes is read; tests/test_patterns.py compiles every one of them.

At its first use the stand-in also puts the compiled pattern in its place in the module
that made it, so that module's own code then reads a plain ``re.Pattern``: a stand-in's
method costs about 140 instructions more a call, on every line of a prefixed log for the
rank patterns. A stand-in imported into another module keeps working there, at that cost.
"""

from __future__ import annotations

import re
import sys
from typing import AnyStr, cast

# What a compiled pattern offers (re.Pattern's public attributes), copied onto the stand-in.
_ATTRIBUTES = tuple(name for name in dir(re.compile("")) if not name.startswith("_"))


class CompiledPattern:
    """A stand-in after its first use: the compiled pattern's methods and attributes, a slot each."""

    __slots__ = ("_source", "_flags", "_namespace", *_ATTRIBUTES)

    def __init__(self, source: str | bytes, flags: int, namespace: dict[str, object]) -> None:
        self._source, self._flags, self._namespace = source, flags, namespace


class LazyPattern(CompiledPattern):
    """A pattern's source and flags until its first use."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        # Reached only before the first use: the class changes then, because a class with
        # __getattr__ makes every attribute read slower.
        compiled = re.compile(self._source, self._flags)
        for attribute in _ATTRIBUTES:
            setattr(self, attribute, getattr(compiled, attribute))
        for global_name, value in list(self._namespace.items()):
            if value is self:
                self._namespace[global_name] = compiled
        self.__class__ = CompiledPattern  # type: ignore[assignment]  # same slots: the layout allows it
        return getattr(compiled, name)


def lazy(source: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(source, flags)``, done when the pattern is first used (call it at module level)."""
    namespace = sys._getframe(1).f_globals
    return cast("re.Pattern[AnyStr]", LazyPattern(source, flags, namespace))
