"""Finding the few lines of a block worth parsing, without looking at the others.

A worker log is mostly framework noise. Every format and failure matcher tests a byte
literal before anything else (its prefilter): a line holding none of them gives no
record. One pass over a whole block (the scan kernel, native.scanner) counts its lines and
finds the lines where any of these anchors occurs, and only those lines are cut out and
parsed: a noise line costs no Python operation at all, however many formats and
signatures there are (docs/benchmarks.md).

Contract for parser authors: every literal the line parser tests before acting on a line
(a format's prefilter and banner, the failure literals, torchrun's prefixes) is an anchor,
and a line holding none of them must give no record and change no state, unless a failure
block is open. An anchor has three bytes at least (the native scanner's fingerprint).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from exporter import native
from exporter.parse import phases, signatures
from exporter.parse.formats import Format
from exporter.parse.ranks import PREFIX_ANCHORS


def anchors_for(formats: Iterable[Format], prefixes: bool = True) -> frozenset[bytes] | None:
    """Every literal the line parser tests before acting on a line; None when a format has none.
    ``prefixes=False``: but torchrun's rank prefixes, for the lines of one rank stream read after them."""
    formats = tuple(formats)
    prefilters = {fmt.prefilter for fmt in formats}
    if b"" in prefilters:
        return None  # scheduler.log's format, a user's pattern without "contains": any line may match
    banners = {fmt.banner.prefilter for fmt in formats if fmt.banner is not None}
    return frozenset({*prefilters, *banners, *signatures.FAILURE_LITERALS, *phases.PHASE_LITERALS,
                      *(PREFIX_ANCHORS if prefixes else ())})


def scanner_for(formats: Iterable[Format], prefixes: bool = True) -> native.Scanner | None:
    """The scanner for the anchors of ``formats`` (``prefixes``: as anchors_for); None when their files must go
    line by line."""
    anchors = anchors_for(formats, prefixes)
    return scanner_of(anchors) if anchors else None


def scanner_besides(formats: Iterable[Format], literal: bytes) -> native.Scanner | None:
    """The scanner for the anchors of ``formats`` but ``literal`` and torchrun's rank prefixes: the lines of a block
    that hold anything else (None: any line may)."""
    anchors = anchors_for(formats, prefixes=False)
    return None if anchors is None else scanner_of(anchors - {literal})


@functools.lru_cache(maxsize=32)
def scanner_of(anchors: frozenset[bytes]) -> native.Scanner:
    # One per anchor set, shared by the parsers of every file (like re's cache).
    return native.scanner(anchors, PREFIX_ANCHORS)
