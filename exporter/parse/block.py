"""Finding the few lines of a block worth parsing, without looking at the others.

A worker log is mostly framework noise. Every format and failure matcher tests a byte
literal before anything else (its prefilter): a line holding none of them gives no
record. One pass over a whole block finds where any of these anchors occurs
(Aho-Corasick with a SIMD prefilter, several GB/s, about as fast for 40 anchors as for
one), and only those lines are cut out and parsed: a noise line costs no Python
operation at all, however many formats and signatures there are (docs/benchmarks.md).
An anchor of one or two bytes defeats the SIMD prefilter (five times slower): anchors
have three bytes at least (tests/test_block_parse.py checks it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator

try:
    from ahocorasick_rs import BytesAhoCorasick, MatchKind
except ImportError:  # pragma: no cover - a platform without the wheel; tests force the fallback
    BytesAhoCorasick = None


class AnchorScanner:
    """Where the anchors occur in a block: at least one match on every line holding any."""

    def __init__(self, anchors: Iterable[bytes], *, use_regex: bool = False) -> None:
        self.anchors = tuple(sorted(set(anchors)))
        if not self.anchors or not all(self.anchors):
            raise ValueError("anchors must be non-empty byte strings")
        if BytesAhoCorasick is not None and not use_regex:
            # Leftmost-first matching is what enables the crate's SIMD (Teddy) prefilter.
            automaton = BytesAhoCorasick(self.anchors, matchkind=MatchKind.LeftmostFirst)
            self._matches = lambda data: [(index, start) for index, start, _ in automaton.find_matches_as_indexes(data)]
        else:
            # The same lines found, ten to twenty times slower (capture groups would make it far slower still).
            pattern = re.compile(b"|".join(re.escape(anchor) for anchor in self.anchors))
            index = {anchor: number for number, anchor in enumerate(self.anchors)}
            self._matches = lambda data: [(index[match.group()], match.start()) for match in pattern.finditer(data)]

    def matches(self, data: bytes) -> list[tuple[int, int]]:
        """(index of the anchor in ``anchors``, start offset), by ascending offset."""
        return self._matches(data)


@functools.lru_cache(maxsize=16)
def scanner_for(anchors: frozenset[bytes]) -> AnchorScanner:
    """One scanner per anchor set, shared by the parsers of every file (like re's cache)."""
    return AnchorScanner(anchors)


def lines_to_parse(data: bytes, starts: Iterable[int], in_block: Callable[[], bool]) -> Iterator[bytes]:
    """The lines of ``data`` (newline-terminated) holding an anchor, in order, without newlines.

    ``starts`` are anchor offsets, ascending. While ``in_block()`` is true (checked after
    every line handed out, once the consumer parsed it) every following line is handed
    out too: a traceback's frames hold no anchor but belong to it.
    """
    position = 0  # start of the first line not handed out yet
    for start in starts:
        while in_block() and position <= start:
            position = yield from _next_line(data, position)
        if start < position:
            continue  # on a line already handed out
        # rfind is -1 when the anchor's line starts at ``position``.
        position = max(position, data.rfind(b"\n", position, start) + 1)
        position = yield from _next_line(data, position)
    while in_block() and position < len(data):
        position = yield from _next_line(data, position)


def _next_line(data: bytes, position: int) -> Iterator[bytes]:
    end = data.find(b"\n", position)
    yield data[position:end]
    return end + 1
