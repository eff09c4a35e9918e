"""Tailer on real files: partial lines, the line cap, rotations, truncations, resuming."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tracemalloc

import pytest

from exporter.follow import Tailer, rotated
from exporter.follow.rotated import rotated_base, rotated_siblings
from exporter.follow.stream import read_log
from exporter.follow.tailer import (
    CHUNK_BYTES,
    READ_AHEAD,
    READ_PIECE_BYTES,
    REDRAWS_HELD_BYTES,
    SETTLE_RESCANS,
    read_ahead,
)


def read(tailer: Tailer, rescan: bool = False) -> tuple[list[bytes], list]:
    batches = list(tailer.poll(rescan))
    return [line for batch in batches for line in batch.lines], batches


def append(path, text: str | bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(text.encode() if isinstance(text, str) else text)


def numbered(prefix: str, first: int, last: int) -> str:
    return "".join(f"{prefix} line {n}\n" for n in range(first, last + 1))


def started(tmp_path, text: str) -> tuple:
    """A log holding ``text`` and a tailer that has read it."""
    log = tmp_path / "worker_0.log"
    append(log, text)
    tailer = Tailer(str(log))
    read(tailer)
    return log, tailer


def test_line_written_in_two_pieces_is_handed_out_once_whole(tmp_path):
    log = tmp_path / "worker_0.log"
    append(log, "step=1 loss=2.5\nstep=2 lo")
    tailer = Tailer(str(log))
    assert read(tailer)[0] == [b"step=1 loss=2.5"]
    assert read(tailer)[0] == []
    append(log, "ss=2.4\n")
    assert read(tailer)[0] == [b"step=2 loss=2.4"]


def test_a_50_mib_line_without_newline_is_cut_at_the_cap_in_bounded_memory(tmp_path):
    log = tmp_path / "worker_0.log"
    block = b"x" * (1 << 20)
    with open(log, "wb") as handle:
        handle.write(b"before\n")
        for _ in range(50):
            handle.write(block)
    tailer = Tailer(str(log), max_line_bytes=1 << 20)
    tracemalloc.start()
    try:
        lines, batches = read(tailer)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [b"before", block]
    assert sum(batch.lines_truncated for batch in batches) == 1
    assert sum(batch.bytes_read for batch in batches) == 7 + 50 * len(block)
    assert peak < 8 << 20, f"peak {peak} bytes while reading a 50 MiB line"
    # The rest of the long line is dropped up to its newline, then lines flow again.
    append(log, b"yyyy\nafter\n")
    assert read(tailer)[0] == [b"after"]


def straddling_lines() -> tuple[list[bytes], bytes]:
    """Lines of every length up to 3 read pieces, so that lines straddle pieces and chunks everywhere."""
    lines = [b"%d:" % n + b"abcdefghij"[n % 10 :] * (n * 7919 % (3 * READ_PIECE_BYTES // 10)) for n in range(400)]
    return lines, b"".join(line + b"\n" for line in lines)


def test_chunks_read_in_pieces_hand_out_every_byte_in_order(tmp_path):
    lines, text = straddling_lines()
    assert len(text) > 3 * CHUNK_BYTES and len(text) % READ_PIECE_BYTES
    log = tmp_path / "worker_0.log"
    append(log, text[:-100])  # the last line unfinished: it waits for its newline
    tailer = Tailer(str(log), max_line_bytes=len(text))
    got, batches = read(tailer)
    assert got == lines[:-1]
    assert [batch.bytes_read for batch in batches[:-1]] == [CHUNK_BYTES] * (len(batches) - 1)
    assert sum(batch.bytes_read for batch in batches) == len(text) - 100
    append(log, text[-100:])
    assert read(tailer)[0] == lines[-1:]


@pytest.mark.parametrize("name", ["worker_0.log", "worker_0.log.1.gz"])
def test_a_finished_log_is_read_in_pieces_byte_for_byte(tmp_path, name):
    lines, text = straddling_lines()
    log = tmp_path / name
    with (gzip.open if name.endswith(".gz") else open)(log, "wb") as handle:
        handle.write(text + b"no newline at the end")
    batches = list(read_log(str(log), max_line_bytes=len(text)))
    assert [line for batch in batches for line in batch.lines] == [*lines, b"no newline at the end"]
    assert sum(batch.bytes_read for batch in batches) == len(text) + len(b"no newline at the end")


def test_idle_flush_hands_out_an_unterminated_line_once(tmp_path):
    log = tmp_path / "worker_0.log"
    now = [100.0]
    tailer = Tailer(str(log.with_name("worker_0.log")), idle_flush_seconds=5.0, clock=lambda: now[0])
    append(log, "Segmentation fault")
    assert read(tailer)[0] == []
    now[0] += 4.9
    assert read(tailer)[0] == []
    now[0] += 0.2
    assert read(tailer)[0] == [b"Segmentation fault"]
    # A late continuation belongs to the line already handed out.
    append(log, " (core dumped)\nnext\n")
    assert read(tailer)[0] == [b"next"]


def test_without_idle_flush_an_unterminated_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "worker_0.log"
    now = [0.0]
    tailer = Tailer(str(log.with_name("worker_0.log")), clock=lambda: now[0])
    append(log, "step=7 loss=2.")
    read(tailer)
    now[0] += 3600
    assert read(tailer, rescan=True)[0] == []
    append(log, "5\n")
    assert read(tailer)[0] == [b"step=7 loss=2.5"]


def test_binary_junk_and_invalid_utf8_are_lines_like_any_other(tmp_path):
    log = tmp_path / "worker_0.log"
    junk = bytes(range(256)).replace(b"\n", b"")
    append(log, junk + b"\n\xff\xfe\xfd\n")
    assert read(Tailer(str(log)))[0] == [junk, b"\xff\xfe\xfd"]


def test_rename_rotation_keeps_reading_the_old_file_until_the_writer_moves_on(tmp_path):
    log = tmp_path / "worker_0.log"
    append(log, numbered("a", 1, 3))
    tailer = Tailer(str(log))
    assert len(read(tailer)[0]) == 3
    # logrotate "create": rename, create an empty file; the writer keeps its old descriptor.
    with open(log, "ab") as writer:
        os.rename(log, tmp_path / "worker_0.log.1")
        log.touch()
        writer.write(b"a line 4 (after the rename)\n")
        writer.flush()
        lines, batches = read(tailer, rescan=True)
        assert lines == [b"a line 4 (after the rename)"]
        assert not any(batch.rotated for batch in batches)
        writer.write(b"a line 5\n")
    # The writer reopens: the new file has bytes, so the old one is complete.
    append(log, numbered("b", 1, 2))
    lines, batches = read(tailer)
    assert lines == [b"a line 5", b"b line 1", b"b line 2"]
    assert sum(batch.rotated for batch in batches) == 1


def test_two_rotations_between_polls_read_the_middle_generation_too(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 2))
    append(log, numbered("a", 3, 3))
    os.rename(log, tmp_path / "worker_0.log.1")
    append(log, numbered("b", 1, 2))
    os.rename(tmp_path / "worker_0.log.1", tmp_path / "worker_0.log.2")
    os.rename(log, tmp_path / "worker_0.log.1")
    append(log, numbered("c", 1, 1))
    assert read(tailer)[0] == [b"a line 3", b"b line 1", b"b line 2", b"c line 1"]


def test_unterminated_last_line_of_a_rotated_file_is_handed_out_on_the_switch(tmp_path):
    log, tailer = started(tmp_path, "a line 1\nlast words")
    os.rename(log, tmp_path / "worker_0.log.1")
    append(log, "b line 1\n")
    assert read(tailer)[0] == [b"last words", b"b line 1"]


def test_copytruncate_recovers_unread_lines_from_the_copy(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 3))
    append(log, numbered("a", 4, 5))
    shutil.copyfile(log, tmp_path / "worker_0.log.1")
    os.truncate(log, 0)
    append(log, numbered("b", 1, 1))
    lines, batches = read(tailer)
    assert lines == [b"a line 4", b"a line 5", b"b line 1"]
    assert sum(batch.truncated for batch in batches) == 1
    assert sum(batch.bytes_lost for batch in batches) == 0


def test_copytruncate_without_a_copy_counts_the_pending_bytes_as_lost(tmp_path):
    log, tailer = started(tmp_path, "a line 1\npartial")
    os.truncate(log, 0)
    append(log, "b\n")
    lines, batches = read(tailer)
    assert lines == [b"b"]
    assert sum(batch.truncated for batch in batches) == 1
    assert sum(batch.bytes_lost for batch in batches) == len("partial")


def test_truncation_regrown_past_the_offset_is_seen_by_the_fingerprint(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 2))
    with open(log, "wb") as handle:  # truncate and write more than before
        handle.write(numbered("b", 1, 5).encode())
    lines, batches = read(tailer)
    assert lines == [f"b line {n}".encode() for n in range(1, 6)]
    assert sum(batch.truncated for batch in batches) == 1


def test_a_file_written_again_to_the_very_size_read_is_read_from_its_start(tmp_path):
    """msrun's ``>`` at a restart: the same lines, other timestamps, the same length. Neither the size
    nor a growth past the offset shows it; the modification time and the first bytes do."""
    log, tailer = started(tmp_path, numbered("a", 1, 3))
    assert read(tailer)[0] == []  # looked at again, unchanged: nothing
    stat = os.stat(log)
    with open(log, "wb") as handle:
        handle.write(numbered("b", 1, 3).encode())
    os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock could give the same time
    assert os.stat(log).st_size == stat.st_size
    lines, batches = read(tailer)
    assert lines == [f"b line {n}".encode() for n in range(1, 4)]
    assert sum(batch.truncated for batch in batches) == 1
    assert read(tailer)[0] == []


@pytest.mark.parametrize("grown", [0, 1, 40], ids=["same size", "a byte more", "more lines"])
def test_a_file_written_again_behind_the_same_first_bytes_is_read_from_its_start(tmp_path, grown):
    """Python's warnings at import, without a timestamp, fill the first kilobytes of each attempt's log:
    the first bytes match, the bytes last read do not."""
    header = "".join(f"/usr/lib/python3/site-packages/numpy/getlimits.py:{n}: UserWarning: subnormal\n"
                     for n in range(30))
    log, tailer = started(tmp_path, header + "10:00:01 step 1\n10:00:02 step 2\n")
    stat = os.stat(log)
    with open(log, "w") as handle:
        handle.write(header + "11:00:01 step 1\n11:00:02 step 2\n" + "x" * (grown - 1) + "\n" * (grown > 0))
    os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    lines, batches = read(tailer)
    assert lines[30:32] == [b"11:00:01 step 1", b"11:00:02 step 2"] and len(lines) == 32 + (grown > 0)
    assert sum(batch.truncated for batch in batches) == 1


def test_a_file_touched_without_a_change_is_not_read_again(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 3))
    os.utime(log, ns=(os.stat(log).st_atime_ns, os.stat(log).st_mtime_ns + 1_000_000))
    lines, batches = read(tailer)
    assert lines == [] and not any(batch.truncated for batch in batches)


def test_delete_and_recreate_follows_the_new_file_from_its_start(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 1))
    append(log, numbered("a", 2, 2))
    log.unlink()
    append(log, numbered("b", 1, 1))
    lines, batches = read(tailer)
    assert lines == [b"a line 2", b"b line 1"]
    assert sum(batch.rotated for batch in batches) == 1


def test_a_deleted_file_is_given_up_after_rescans_and_its_descriptor_closed(tmp_path):
    log, tailer = started(tmp_path, "a line 1\nno newline")
    log.unlink()
    assert open_deleted_files(log) == 1
    lines = []
    for _ in range(SETTLE_RESCANS):
        assert not tailer.finished
        lines += read(tailer, rescan=True)[0]
    assert tailer.finished
    assert lines == [b"no newline"]
    assert open_deleted_files(log) == 0  # the disk space can be freed


def open_deleted_files(path) -> int:
    """Descriptors of this process still open on ``path`` after it was deleted."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor listing the directory itself is gone
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return targets.count(f"{path} (deleted)")


def test_an_empty_replacement_is_switched_to_after_rescans(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 1))
    os.rename(log, tmp_path / "worker_0.log.1")
    log.touch()
    batches = [batch for _ in range(SETTLE_RESCANS) for batch in tailer.poll(rescan=True)]
    assert sum(batch.rotated for batch in batches) == 1
    append(log, "b line 1\n")
    assert read(tailer)[0] == [b"b line 1"]


def test_position_excludes_the_partial_line_and_resumes_exactly(tmp_path):
    log = tmp_path / "worker_0.log"
    append(log, "a line 1\na li")
    first = Tailer(str(log))
    _, batches = read(first)
    position = batches[-1].position
    assert position.offset == len("a line 1\n")
    append(log, "ne 2\n")
    assert read(Tailer(str(log), resume=position))[0] == [b"a line 2"]


def test_resume_inside_an_over_long_line_keeps_skipping_it(tmp_path):
    log = tmp_path / "worker_0.log"
    append(log, b"z" * 5000)
    first = Tailer(str(log), max_line_bytes=1024)
    lines, batches = read(first)
    assert lines == [b"z" * 1024]
    position = batches[-1].position
    assert position.skipping
    append(log, "zzz\nnext\n")
    assert read(Tailer(str(log), max_line_bytes=1024, resume=position))[0] == [b"next"]


def stopped(tmp_path, text: str) -> tuple:
    """A log holding ``text`` and the position a stopped exporter saved for it."""
    log, tailer = started(tmp_path, text)
    position = tailer.position
    tailer.close()
    return log, position


def test_resume_after_a_rename_rotation_while_stopped(tmp_path):
    log, position = stopped(tmp_path, numbered("a", 1, 2))
    append(log, numbered("a", 3, 4))
    os.rename(log, tmp_path / "worker_0.log.1")
    append(log, numbered("b", 1, 2))
    lines, batches = read(Tailer(str(log), resume=position))
    assert lines == [b"a line 3", b"a line 4", b"b line 1", b"b line 2"]
    assert sum(batch.rotated for batch in batches) == 1


def test_resume_after_a_copytruncate_while_stopped(tmp_path):
    log, position = stopped(tmp_path, numbered("a", 1, 2))
    append(log, numbered("a", 3, 3))
    shutil.copyfile(log, tmp_path / "worker_0.log.1")
    os.truncate(log, 0)
    append(log, numbered("b", 1, 1))
    lines, batches = read(Tailer(str(log), resume=position))
    assert lines == [b"a line 3", b"b line 1"]
    assert sum(batch.truncated for batch in batches) == 1


def copytruncate(log, generations: int) -> None:
    """logrotate's copytruncate with ``generations`` copies kept: shift .N up, copy to .1, truncate."""
    for number in range(generations, 0, -1):
        older = log.with_name(f"{log.name}.{number}")
        if older.exists():
            os.rename(older, log.with_name(f"{log.name}.{number + 1}"))
    shutil.copyfile(log, log.with_name(f"{log.name}.1"))
    os.truncate(log, 0)


def test_a_kill_right_after_a_copytruncate_then_another_one_while_stopped_loses_nothing(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 3))
    append(log, numbered("a", 4, 5))
    copytruncate(log, 1)
    lines, batches = read(tailer)  # the truncation recovered; the file is empty
    assert lines == [b"a line 4", b"a line 5"]
    saved = batches[-1].position  # what a checkpoint right now holds; then the exporter is killed
    tailer.close()
    append(log, numbered("b", 1, 2))  # while stopped: written, copied away, truncated
    copytruncate(log, 2)
    append(log, numbered("c", 1, 1))
    lines, _ = read(Tailer(str(log), resume=saved), rescan=True)
    assert lines == [b"b line 1", b"b line 2", b"c line 1"]


def test_resume_when_the_old_file_is_gone_starts_the_new_one_from_its_start(tmp_path):
    log, position = stopped(tmp_path, numbered("a", 1, 2))
    log.unlink()
    append(log, numbered("b", 1, 1))
    lines, batches = read(Tailer(str(log), resume=position))
    assert lines == [b"b line 1"]
    # The file system may give the new file the old inode number: then only the
    # fingerprint tells, and it looks like a truncation.
    assert sum(batch.rotated or batch.truncated for batch in batches) == 1


def test_rotated_siblings_are_ordered_oldest_first_and_map_back_to_their_base(tmp_path):
    base = tmp_path / "worker_0.log"
    for name in ("worker_0.log.1", "worker_0.log.10", "worker_0.log.2", "worker_0.log.3.gz", "worker_0.log-20240102",
                 "worker_0.log-20240101", "worker_0.logx.1", "worker_0.log"):
        (tmp_path / name).touch()
    names = [os.path.basename(path) for path in rotated_siblings(str(base))]
    assert names == ["worker_0.log.10", "worker_0.log.2", "worker_0.log.1", "worker_0.log-20240101",
                     "worker_0.log-20240102"]
    assert rotated_base(str(tmp_path / "worker_0.log.1")) == str(base)
    assert rotated_base(str(tmp_path / "worker_0.log-20240101")) == str(base)
    assert rotated_base(str(base)) is None


def _rotating_during_every_snapshot(monkeypatch, trigger: str, rotate) -> None:
    """Make every snapshot race a rotation: ``rotate()`` runs right after the sibling named ``trigger`` is opened."""
    opened_for_real = rotated._open

    def open_then_rotate(name: str) -> int | None:
        fd = opened_for_real(name)
        if os.path.basename(name) == trigger:
            rotate()
        return fd

    monkeypatch.setattr(rotated, "_open", open_then_rotate)


def test_dated_generations_rotated_during_a_snapshot_do_not_start_it_over(tmp_path, monkeypatch):
    log = tmp_path / "worker_0.log"
    for generation in (1, 2, 3):
        append(tmp_path / f"worker_0.log-{generation:010d}", f"generation {generation}\n")
    append(log, "current\n")
    generations = iter(range(4, 100))

    def rotate() -> None:  # logrotate's dateext during every listing: rotations faster than a snapshot
        os.rename(log, tmp_path / f"worker_0.log-{next(generations):010d}")
        append(log, "current\n")

    _rotating_during_every_snapshot(monkeypatch, "worker_0.log-0000000001", rotate)
    opened = rotated.open_siblings(str(log))
    try:
        # The three listed first: the ones added meanwhile are newer than the file the caller opened.
        assert [os.path.basename(sibling.path) for sibling in opened] == [
            f"worker_0.log-{generation:010d}" for generation in (1, 2, 3)]
    finally:
        for sibling in opened:
            os.close(sibling.fd)


def test_numbered_generations_shifted_during_every_snapshot_give_up_with_a_warning(tmp_path, monkeypatch, caplog):
    log = tmp_path / "worker_0.log"
    append(tmp_path / "worker_0.log.1", "older\n")
    append(log, "current\n")

    def rotate() -> None:  # .1 -> .2 and so on: the listed names no longer name what was opened
        for number in sorted((int(path.name.rsplit(".", 1)[1]) for path in tmp_path.glob("worker_0.log.*")),
                             reverse=True):
            os.rename(tmp_path / f"worker_0.log.{number}", tmp_path / f"worker_0.log.{number + 1}")
        os.rename(log, tmp_path / "worker_0.log.1")
        append(log, "current\n")

    _rotating_during_every_snapshot(monkeypatch, "worker_0.log.1", rotate)
    assert rotated.open_siblings(str(log)) == []
    assert "changed at every one of" in caplog.text


def test_resume_when_the_path_was_renamed_away_and_not_created_again_yet(tmp_path):
    # A rotation the writer has not followed yet (it reopens on SIGHUP, slowly under load) leaves
    # no file at the path: the saved file is a generation now, and so is every one after it.
    log, position = stopped(tmp_path, numbered("a", 1, 2))
    append(log, numbered("a", 3, 3))
    os.rename(log, tmp_path / "worker_0.log-0000000001")
    append(log, numbered("b", 1, 1))
    os.rename(log, tmp_path / "worker_0.log-0000000002")
    tailer = Tailer(str(log), resume=position)
    lines, _ = read(tailer, rescan=True)
    assert not tailer.finished
    append(log, numbered("c", 1, 1))  # the writer reopened at last
    lines += read(tailer)[0]
    assert lines == [b"a line 3", b"b line 1", b"c line 1"]


def test_a_path_that_stays_missing_gives_up_after_reading_the_generations_rotated_since(tmp_path):
    log, tailer = started(tmp_path, numbered("a", 1, 1))
    append(log, numbered("a", 2, 2))
    os.rename(log, tmp_path / "worker_0.log-0000000001")
    append(log, numbered("b", 1, 1))
    os.rename(log, tmp_path / "worker_0.log-0000000002")  # and no new file: the writer stopped
    lines = [line for _ in range(SETTLE_RESCANS) for line in read(tailer, rescan=True)[0]]
    assert tailer.finished
    assert lines == [b"a line 2", b"b line 1"]


def test_each_batch_comes_with_the_ones_read_since_the_batch_before(tmp_path):
    # A catch-up reads READ_AHEAD blocks ahead (their passes start while the ones before are parsed): every batch, in
    # order, each announced once as coming before it is handed out, READ_AHEAD batches before it while there are.
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"".join(b"line %d %s\n" % (number, b"x" * 200) for number in range(40_000)))
    tailer = Tailer(str(path))
    pairs = list(read_ahead(tailer.poll()))
    batches = [batch for batch, _ in pairs]
    assert len(pairs) > READ_AHEAD + 3
    assert [later for _, coming in pairs for later in coming] == batches[1:]
    assert pairs[0][1] == tuple(batches[1 : 1 + READ_AHEAD])
    assert all(coming == (batches[index + READ_AHEAD],) for index, (_, coming) in enumerate(pairs[1:-READ_AHEAD], 1))
    assert all(coming == () for _, coming in pairs[-READ_AHEAD:])
    assert b"".join(batch.data for batch in batches) == path.read_bytes()


def test_a_failed_read_ahead_hands_out_the_batch_before_it(tmp_path):
    path = tmp_path / "worker_0.log"
    path.write_bytes(b"step 1\n" * 300_000)

    def failing():
        yield from list(Tailer(str(path)).poll())[:2]
        raise OSError("the disk went away")

    read = read_ahead(failing())
    first, second = next(read), next(read)
    assert first[1] == (second[0],) and second[1] == ()  # the second batch handed out before the failed read
    with pytest.raises(OSError, match="went away"):
        next(read)


def _bar_lines(count: int) -> bytes:
    """A Hugging Face console's lines: a tqdm bar redrawn after carriage returns, then a record, then a newline."""
    return b"".join(b"\r %d%%|#| %d/9 [00:00<00:01,  4.00it/s]\r {'loss': '%d.5'}\n" % (step % 100, step, step)
                    for step in range(count))


@pytest.mark.parametrize("reader", ["tailer", "read_log"])
def test_a_catch_up_hands_out_a_bar_line_whole_when_its_rest_is_read_next(tmp_path, reader):
    """Where a full read ends inside a progress bar's line and the file holds its rest, the line waits for it: the
    blocks are the file's bytes (each line once; handed out in two, a line was counted twice)."""
    path = tmp_path / "train.log"
    path.write_bytes(_bar_lines(60_000))
    assert path.stat().st_size > 3 * CHUNK_BYTES
    blocks = [batch.data for batch in (Tailer(str(path)).poll() if reader == "tailer" else read_log(str(path)))]
    assert len(blocks) > 3
    assert b"".join(blocks) == path.read_bytes()


def test_a_bar_that_ends_no_line_for_long_is_handed_out_as_it_grows(tmp_path):
    """A bar redrawn for more than REDRAWS_HELD_BYTES without a newline is handed out as it grows, read or not to
    the end: nothing of it is cut off as an over-long line, and each of its segments is read once."""
    path = tmp_path / "train.log"
    redraws = b"".join(b"\r %d%%|#| %d/99999 [00:00<00:01,  4.00it/s]" % (step % 100, step) for step in range(80_000))
    path.write_bytes(b"start\n" + redraws + b"\r {'loss': '1.5'}\n")
    assert len(redraws) > 3 * CHUNK_BYTES > REDRAWS_HELD_BYTES
    # Over the cap if held whole; a read's redraws (a chunk's) are under it.
    batches = list(Tailer(str(path), max_line_bytes=2 * CHUNK_BYTES).poll())
    assert sum(batch.lines_truncated for batch in batches) == 0
    data = b"".join(batch.data for batch in batches)
    assert data.replace(b"\r\n", b"\r") == path.read_bytes()
