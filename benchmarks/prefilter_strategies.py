"""How to find the few lines worth parsing: eight strategies over the same generated log.

Each strategy gets the same 1 MiB chunks of complete lines and must yield the number of
lines and, for each line holding an anchor, one position in it. Measured with the
anchors of the first core parser (MindFormers, key=value, 9 failure signatures) and with
every anchor of today's LineParser (8 formats, all failure signatures, torchrun
prefixes). The winner is what exporter/parse/scan.py does (the native scan kernel; Aho-Corasick
and the regular expression are its twin's matchers).

    python -m benchmarks.prefilter_strategies [--lines 2000000]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ahocorasick_rs import BytesAhoCorasick, MatchKind

from benchmarks.generate import write_worker_log
from exporter import native
from exporter.parse.formats import BUILTIN_FORMATS
from exporter.parse.scan import anchors_for

FIRST_ANCHORS = (b"step:[", b"step=", b"PYNATIVE_MODE", b"Traceback (most recent call last)", b"out of memory",
                 b"Out of Memory", b"Watchdog caught collective operation timeout", b"NCCL error", b"HCCL",
                 b"CUDA error", b"Segmentation fault", b"Fatal Python error", b"ChildFailedError")
ANCHORS = tuple(sorted(anchors_for(BUILTIN_FORMATS) or ()))  # never None: every built-in format has literals

Strategy = Callable[[list[bytes], tuple[bytes, ...]], int]


def per_line_in(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
    hits = 0
    for chunk in chunks:
        for line in chunk.split(b"\n"):
            for anchor in anchors:
                if anchor in line:
                    hits += 1
                    break
    return hits


def per_line_regex(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
    search = _alternation(anchors).search
    return sum(1 for chunk in chunks for line in chunk.split(b"\n") if search(line))


def per_chunk_regex(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
    pattern = _alternation(anchors)
    hits = 0
    for chunk in chunks:
        chunk.count(b"\n")
        hits += sum(1 for _ in pattern.finditer(chunk))
    return hits


def per_chunk_find(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
    hits = 0
    for chunk in chunks:
        chunk.count(b"\n")
        for anchor in anchors:
            position = chunk.find(anchor)
            while position >= 0:
                hits += 1
                position = chunk.find(anchor, position + 1)
    return hits


def per_chunk_aho_corasick(matchkind: MatchKind) -> Strategy:
    def strategy(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
        automaton = BytesAhoCorasick(list(anchors), matchkind=matchkind)
        hits = 0
        for chunk in chunks:
            chunk.count(b"\n")
            hits += len(automaton.find_matches_as_indexes(chunk))
        return hits

    return strategy


def native_scan(simd: bool) -> Strategy:
    def strategy(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
        scanner = native.scanner(anchors, (), "native", simd=simd)  # counts the newlines in the same pass
        return sum(len(scanner.scan(chunk)[1]) for chunk in chunks)

    return strategy


def count_only(chunks: list[bytes], anchors: tuple[bytes, ...]) -> int:
    """The floor: counting lines, which every chunk strategy does anyway."""
    return sum(chunk.count(b"\n") for chunk in chunks)


STRATEGIES: dict[str, Strategy] = {
    "per line: `anchor in line` for each anchor": per_line_in,
    "per line: one combined regex search": per_line_regex,
    "per chunk: combined regex finditer": per_chunk_regex,
    "per chunk: bytes.find loop per anchor": per_chunk_find,
    "per chunk: Aho-Corasick, standard match": per_chunk_aho_corasick(MatchKind.Standard),
    "per chunk: Aho-Corasick, leftmost-first (SIMD)": per_chunk_aho_corasick(MatchKind.LeftmostFirst),
    "per chunk: native scan, byte-wise (native/scan.c)": native_scan(simd=False),
    "per chunk: native scan, AVX2 (native/scan.c)": native_scan(simd=True),
    "floor: count newlines only": count_only,
}


def _alternation(anchors: tuple[bytes, ...]) -> re.Pattern[bytes]:
    return re.compile(b"|".join(re.escape(anchor) for anchor in anchors))


def chunks_of(path: Path, size: int = 1 << 20) -> list[bytes]:
    """Complete lines in chunks of about ``size`` bytes, as the Tailer hands them over."""
    data = path.read_bytes()
    chunks, start = [], 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + size) + 1 or data.find(b"\n", start) + 1
        chunks.append(data[start:end])
        start = end
    return chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "worker_0.log"
        write_worker_log(log, arguments.lines)
        chunks = chunks_of(log)
    print(f"| strategy | {len(FIRST_ANCHORS)} anchors (first core) | {len(ANCHORS)} anchors (today) |")
    print("| --- | ---: | ---: |")
    for name, strategy in STRATEGIES.items():
        cells = []
        for anchors in (FIRST_ANCHORS, ANCHORS):
            started = time.perf_counter()
            strategy(chunks, anchors)
            seconds = time.perf_counter() - started
            cells.append(f"{seconds:.3f} s ({arguments.lines / seconds / 1e6:.1f} M lines/s)")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
