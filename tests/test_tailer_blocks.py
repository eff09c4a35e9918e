"""The Tailer hands over complete lines as one block: newline-terminated, capped, nothing lost."""

from __future__ import annotations

import pytest

from exporter.follow import tailer as tailer_module
from exporter.follow.tailer import Tailer, _cap_lines


def _read(tailer: Tailer) -> list:
    return list(tailer.poll())


def test_blocks_hold_complete_lines_and_keep_the_partial_one(tmp_path):
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"one\ntwo\nthr")
    tailer = Tailer(str(path))
    (batch,) = _read(tailer)
    assert batch.data == b"one\ntwo\n"
    assert (batch.data.count(b"\n"), batch.lines) == (2, [b"one", b"two"])
    with open(path, "ab") as handle:
        handle.write(b"ee\n")
    (batch,) = _read(tailer)
    assert batch.data == b"three\n"


def test_lines_across_many_small_chunks_arrive_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(tailer_module, "CHUNK_BYTES", 7)
    lines = [f"line number {index} ".encode() * (index % 4 + 1) for index in range(50)]
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    batches = _read(Tailer(str(path)))
    assert b"".join(batch.data for batch in batches) == path.read_bytes()
    assert all(batch.data.endswith(b"\n") for batch in batches if batch.data)
    assert sum(batch.bytes_read for batch in batches) == path.stat().st_size


def test_over_long_lines_are_cut_to_the_cap_and_counted(tmp_path):
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"short\n" + b"x" * 3000 + b"\nok\n" + b"y" * 2500 + b"\n")
    (batch,) = _read(Tailer(str(path), max_line_bytes=1024))
    assert batch.lines == [b"short", b"x" * 1024, b"ok", b"y" * 1024]
    assert batch.lines_truncated == 2


def test_a_line_of_redraws_over_the_cap_is_handed_out_whole_in_pieces(tmp_path):
    # A progress bar's line (Lightning's: one line of \r-joined redraws for a whole run) is cut after a carriage
    # return, each piece under the cap: every redraw arrives, none is cut short, nothing counted as truncated.
    redraws = [b"Epoch %d: %d/15 [loss=%d.5]" % (step // 15, step % 15, step) for step in range(400)]
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"start\n" + b"\r".join(redraws) + b"\nend\n")
    batches = _read(Tailer(str(path), max_line_bytes=1024))
    lines = [line for batch in batches for line in batch.lines]
    assert sum(batch.lines_truncated for batch in batches) == 0
    assert lines[0] == b"start" and lines[-1] == b"end" and len(lines) > 10
    assert all(len(line) <= 1024 for line in lines) and all(line.endswith(b"\r") for line in lines[1:-2])
    assert b"".join(lines[1:-1]).split(b"\r") == redraws
    assert _cap_lines(b"a\r" * 600 + b"\n", 1024)[1] == 0


def test_an_unfinished_over_long_line_is_cut_and_its_rest_skipped(tmp_path):
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"a\n" + b"z" * 5000)
    tailer = Tailer(str(path), max_line_bytes=1024)
    (batch,) = _read(tailer)
    assert (batch.lines, batch.lines_truncated) == ([b"a", b"z" * 1024], 1)
    with open(path, "ab") as handle:
        handle.write(b"zzz\nnext\n")
    (batch,) = _read(tailer)
    assert batch.lines == [b"next"]


@pytest.mark.parametrize("block", [b"", b"a\n", b"abc\n" * 10, b"\n\n\n"])
def test_cap_lines_leaves_short_lines_alone(block):
    assert _cap_lines(block, 4) == (block, 0)


def test_cap_lines_cuts_every_long_line_and_only_those():
    block = b"12345678\nab\n\n123456789012\nabcd\n"
    assert _cap_lines(block, 4) == (b"1234\nab\n\n1234\nabcd\n", 2)


def test_a_rotation_completes_the_last_line_of_the_old_file(tmp_path):
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"old\nlast without newline")
    tailer = Tailer(str(path))
    _read(tailer)
    path.rename(tmp_path / "worker_0.log.1")
    path.write_bytes(b"new\n")
    batches = _read(tailer)
    assert b"".join(batch.data for batch in batches) == b"last without newline\nnew\n"
    assert any(batch.rotated for batch in batches)


def test_an_idle_partial_line_is_handed_out_as_a_complete_one(tmp_path):
    now = [0.0]
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"done\nstill being written")
    tailer = Tailer(str(path), idle_flush_seconds=5, clock=lambda: now[0])
    assert [batch.data for batch in _read(tailer)] == [b"done\n"]
    now[0] = 10.0
    assert [batch.data for batch in _read(tailer)] == [b"still being written\n"]
