"""What a log's lines count as never depends on where the follower's reads split them.

A read ends wherever the writer happened to be: in the middle of a traceback, between an
exception line and the lines that say what it was. The same log, written in two pieces
split at every byte offset and followed by a Tailer into one LineParser, must give the
same events as the log read at once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from exporter.follow.tailer import Tailer
from exporter.parse import LineParser
from exporter.parse.records import ErrorEvent

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "formats"


def _blocks_followed(path: Path, data: bytes, split: int) -> tuple[bytes, ...]:
    """The blocks a Tailer hands out when ``data`` is written in two pieces split at ``split``."""
    path.unlink(missing_ok=True)  # a new file rather than a truncated one: truncating costs a millisecond
    path.write_bytes(data[:split])
    tailer = Tailer(str(path))
    blocks = [batch.data for batch in tailer.poll()]
    with path.open("ab") as handle:
        handle.write(data[split:])
    blocks += [batch.data for batch in tailer.poll()]
    tailer.close()
    return tuple(blocks)


def _events(blocks: tuple[bytes, ...]) -> Counter[tuple[int | None, str]]:
    """The (rank, kind) of every failure event one LineParser reads from ``blocks`` in turn."""
    parser = LineParser()
    return Counter((record.rank, record.kind) for block in blocks for record in parser.parse_block(block).records
                   if isinstance(record, ErrorEvent))


def _events_followed(path: Path, data: bytes, split: int) -> Counter[tuple[int | None, str]]:
    return _events(_blocks_followed(path, data, split))


@pytest.mark.parametrize("fixture", ["errors_ascend.log", "errors_torch.log"])
def test_failures_count_alike_wherever_a_read_splits_the_log(tmp_path, fixture):
    # Real lines (tests/fixtures/SOURCES.md), among them MindSpore's empty 'RuntimeError: '
    # whose 'Out of Memory!!!' comes lines later, and chained tracebacks.
    data = (FIXTURES / fixture).read_bytes()
    path = tmp_path / "worker_0.log"
    whole = _events_followed(path, data, len(data))
    assert whole[(None, "oom")] >= 1  # the log holds OOMs; a test of nothing must fail
    # Every byte offset through the Tailer; each distinct sequence of blocks (offsets within one
    # line give the same) parsed once.
    splits: dict[tuple[bytes, ...], int] = {}
    for split in range(len(data)):
        splits.setdefault(_blocks_followed(path, data, split), split)
    assert len(splits) > data.count(b"\n") // 2  # most line boundaries gave reads of their own
    events = {split: _events(blocks) for blocks, split in splits.items()}
    differing = {split: found - whole or whole - found for split, found in events.items() if found != whole}
    assert not differing, f"{len(differing)} split offsets change the events, e.g. {next(iter(differing.items()))}"


def test_an_exception_classified_by_a_line_read_later_is_still_an_oom(tmp_path):
    # Synthetic lines in MindSpore's layout: the exception line says nothing, the cause comes later.
    head = b"Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nRuntimeError: \n"
    tail = b"- Framework Error Message:\nOut of Memory!!! Request memory size: 33100113920B, Memory Statistic:\n"
    split = _events_followed(tmp_path / "worker_0.log", head + tail, len(head))
    assert split == Counter({(None, "oom"): 1, (None, "traceback"): 1})
