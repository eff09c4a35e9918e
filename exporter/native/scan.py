"""Kernel: a block's newlines and the lines holding any anchor. This twin defines scan.c.

``Scanner(anchors, line_starts).scan(data)`` returns ``(newlines, starts, prefixed)``: the
number of newline bytes in ``data``, the start offsets of the lines holding any anchor
(ascending, each once; a line ends after its newline, the last one at the end of the data),
and those of them that begin with one of ``line_starts``. The matches come from Aho-Corasick
(``ahocorasick_rs``, where its wheel is installed) or a regular expression: both give every
anchor occurrence that matters, the leftmost first.
"""

from __future__ import annotations

import re
from collections.abc import Callable

try:
    from ahocorasick_rs import BytesAhoCorasick, MatchKind
except ImportError:  # pragma: no cover - a platform without the wheel; tests force the regex
    BytesAhoCorasick = None  # type: ignore[assignment,misc]


def has_aho_corasick() -> bool:
    return BytesAhoCorasick is not None


class Scanner:
    """Counts a block's lines and finds those holding any anchor."""

    def __init__(self, anchors: tuple[bytes, ...], line_starts: tuple[bytes, ...] = (), *,
                 matcher: str = "regex") -> None:
        self.anchors, self.line_starts = anchors, line_starts
        self._offsets = _matcher(anchors, matcher)

    def scan(self, data: bytes) -> tuple[int, list[int], list[int]]:
        starts: list[int] = []
        line_end = 0  # end of the last line reported: later matches on it add nothing
        for offset in self._offsets(data):
            if offset >= line_end:
                starts.append(data.rfind(b"\n", 0, offset) + 1)
                line_end = data.find(b"\n", offset) + 1 or len(data)
        prefixed = [start for start in starts if data.startswith(self.line_starts, start)] if self.line_starts else []
        return data.count(b"\n"), starts, prefixed


def _matcher(anchors: tuple[bytes, ...], matcher: str) -> Callable[[bytes], list[int]]:
    """Start offsets of anchor occurrences, ascending (enough of them to find every line)."""
    if matcher == "ahocorasick":
        if BytesAhoCorasick is None:
            raise RuntimeError("ahocorasick_rs is not installed")
        # Leftmost-first matching is what enables the crate's SIMD (Teddy) prefilter.
        automaton = BytesAhoCorasick(list(anchors), matchkind=MatchKind.LeftmostFirst)
        return lambda data: [start for _, start, _ in automaton.find_matches_as_indexes(data)]
    if matcher == "regex":
        pattern = re.compile(b"|".join(re.escape(anchor) for anchor in anchors))
        return lambda data: [match.start() for match in pattern.finditer(data)]
    raise ValueError(f"unknown matcher {matcher!r}")
