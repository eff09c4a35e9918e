"""Finding the few lines of a block worth parsing, without looking at the others.

A worker log is mostly framework noise. Every format and failure matcher tests a byte
literal before anything else (its prefilter): a line holding none of them gives no
record. One pass over a whole block counts its lines and finds the lines where any of
these anchors occurs, and only those lines are cut out and parsed: a noise line costs no
Python operation at all, however many formats and signatures there are
(docs/benchmarks.md).

Three scanners give the same answer: the native one (parse/_speedups.c: one SIMD pass for
newlines and anchors, about 4 GB/s with every anchor), Aho-Corasick from ``ahocorasick_rs``
where the extension was not built, and a regular expression where neither is installed.
Anchors have three bytes at least (the native scanner's fingerprint; tests check it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import NamedTuple

try:
    from exporter.parse import _speedups
except ImportError:  # pragma: no cover - built without a C compiler; tests force the fallbacks
    _speedups = None
try:
    from ahocorasick_rs import BytesAhoCorasick, MatchKind
except ImportError:  # pragma: no cover - a platform without the wheel; tests force the fallback
    BytesAhoCorasick = None


class LineScan(NamedTuple):
    """What one pass over a block of newline-terminated lines found (the native scanner: a plain tuple)."""

    newlines: int
    starts: list[int]  # start offsets of the lines holding an anchor, ascending, each once
    prefixed: list[int]  # those of them that begin with one of the scanner's line_starts


class AnchorScanner:
    """Counts a block's lines and finds those holding any anchor."""

    def __init__(self, anchors: Iterable[bytes], line_starts: Iterable[bytes] = (), *,
                 implementation: str | None = None) -> None:
        self.anchors = tuple(sorted(set(anchors)))
        self.line_starts = tuple(line_starts)
        if not self.anchors or not all(self.anchors):
            raise ValueError("anchors must be non-empty byte strings")
        self.implementation = implementation or best_implementation()
        if self.implementation == "native":
            self.scan = _speedups.Scanner(self.anchors, self.line_starts).scan
            return
        if self.implementation == "ahocorasick":
            # Leftmost-first matching is what enables the crate's SIMD (Teddy) prefilter.
            automaton = BytesAhoCorasick(self.anchors, matchkind=MatchKind.LeftmostFirst)
            self._offsets = lambda data: [start for _, start, _ in automaton.find_matches_as_indexes(data)]
        else:
            pattern = re.compile(b"|".join(re.escape(anchor) for anchor in self.anchors))
            self._offsets = lambda data: [match.start() for match in pattern.finditer(data)]

    def scan(self, data: bytes) -> LineScan:
        """The newlines of ``data``, and where its lines holding an anchor start."""
        starts: list[int] = []
        line_end = 0  # end of the last line reported: later matches on it add nothing
        for offset in self._offsets(data):
            if offset >= line_end:
                starts.append(data.rfind(b"\n", 0, offset) + 1)
                line_end = data.find(b"\n", offset) + 1 or len(data)
        prefixed = [start for start in starts if data.startswith(self.line_starts, start)] if self.line_starts else []
        return LineScan(data.count(b"\n"), starts, prefixed)


def best_implementation() -> str:
    """The fastest scanner this installation has."""
    if _speedups is not None:
        return "native"
    return "ahocorasick" if BytesAhoCorasick is not None else "regex"


@functools.lru_cache(maxsize=32)
def scanner_for(anchors: frozenset[bytes], line_starts: tuple[bytes, ...] = ()) -> AnchorScanner:
    """One scanner per anchor set, shared by the parsers of every file (like re's cache)."""
    return AnchorScanner(anchors, line_starts)
