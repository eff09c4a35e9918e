"""AppendWatcher: appends to files of watched directories reported in batches (real inotify)."""

from __future__ import annotations

import os
import resource
import shutil
import struct
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.follow.appends import AppendWatcher, grown_names

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


@pytest.fixture
def watcher():
    created = AppendWatcher.create(coalesce=0.2)
    assert created is not None
    yield created
    created.close()


def _watched_empty_log(watcher: AppendWatcher, directory: Path) -> Path:
    """An empty worker_0.log in ``directory``, which ``watcher`` watches."""
    log = directory / "worker_0.log"
    log.write_bytes(b"")
    watcher.watch(str(directory))
    return log


def _append_line(log: Path) -> None:
    with open(log, "ab", buffering=0) as handle:  # unbuffered: the append reaches inotify now
        handle.write(b"line\n")


def test_appends_in_a_watched_directory_are_reported_once_per_batch(tmp_path, watcher):
    first, second = tmp_path / "worker_0.log", tmp_path / "worker_1.log"
    first.write_bytes(b"")
    second.write_bytes(b"")
    watcher.watch(str(tmp_path))
    with open(first, "ab", buffering=0) as one, open(second, "ab", buffering=0) as two:
        for _ in range(50):  # many writes within the coalescing window: one report
            one.write(b"line\n")
            two.write(b"line\n")
    watcher.wait(5)
    assert watcher.grown() == {str(first), str(second)}
    watcher.wait(0)
    assert watcher.grown() == set()


def test_a_watcher_made_after_a_thousand_files_were_opened_still_waits(tmp_path):
    # select() refuses descriptor numbers from 1024 on: a library user opening the logs first got a ValueError.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit ({hard}) is below 1100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
    try:
        watcher = AppendWatcher.create(coalesce=0.05)
        assert watcher is not None
        try:
            log = _watched_empty_log(watcher, tmp_path)
            _append_line(log)
            assert watcher.pending()
            watcher.wait(5)
            assert watcher.grown() == {str(log)}
        finally:
            watcher.close()
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_unwatched_directories_are_not_reported(tmp_path, watcher):
    watched, other = tmp_path / "watched", tmp_path / "other"
    watched.mkdir()
    other.mkdir()
    watcher.watch(str(watched))
    (other / "worker_0.log").write_bytes(b"line\n")
    (watched / "worker_1.log").write_bytes(b"line\n")
    watcher.wait(5)
    assert watcher.grown() == {str(watched / "worker_1.log")}


def test_wake_ends_a_wait_from_another_thread(tmp_path, watcher):
    watcher.watch(str(tmp_path))
    threading.Timer(0.2, watcher.wake).start()
    started = time.monotonic()
    watcher.wait(30)
    assert time.monotonic() - started < 10
    assert watcher.grown() == set()
    assert not watcher.pending()
    started = time.monotonic()
    watcher.wait(0.5)  # the wake-up was taken: this one times out
    assert time.monotonic() - started >= 0.4


def test_a_full_kernel_queue_reports_that_anything_may_have_grown(tmp_path, watcher):
    # More appends than the kernel queues (fs.inotify.max_queued_events) before one read: IN_Q_OVERFLOW.
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    watcher.watch(str(tmp_path))
    files = [os.open(tmp_path / f"worker_{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for rank in range(2)]
    try:
        for index in range(queued + 10):
            os.write(files[index % 2], b"line\n")  # alternating files: the kernel merges no two events
    finally:
        for handle in files:
            os.close(handle)
    watcher.wait(5)
    assert watcher.grown() is None


def test_a_removed_directory_is_forgotten_and_unusual_names_are_kept(tmp_path, watcher):
    gone, kept = tmp_path / "gone", tmp_path / "kept"
    gone.mkdir()
    kept.mkdir()
    for directory in (gone, kept):
        watcher.watch(str(directory))
    odd = kept / "rank 3 \u00e9\udcff.log"  # a space, non-ASCII and a byte that is not UTF-8
    with open(gone / "worker_0.log", "ab") as handle:
        handle.write(b"line\n")
    with open(os.fsencode(odd), "ab") as handle:
        handle.write(b"line\n")
    shutil.rmtree(gone)
    watcher.wait(5)
    assert watcher.grown() == {str(odd)}
    assert list(watcher._directories.values()) == [str(kept)]


def test_a_wake_ends_the_coalescing_window_and_pending_tells_queued_appends(tmp_path):
    slow = AppendWatcher.create(coalesce=30)
    assert slow is not None
    try:
        log = _watched_empty_log(slow, tmp_path)
        assert not slow.pending()
        _append_line(log)
        assert slow.pending()
        threading.Timer(0.2, slow.wake).start()  # a scrape wanting the lines now, 0.2 s into the window
        started = time.monotonic()
        slow.wait(60)
        assert time.monotonic() - started < 10
        assert slow.grown() == {str(log)}
        assert not slow.pending()
    finally:
        slow.close()


_MODIFY = 0x2
_EVENT = struct.Struct("iIII")


def _event(wd: int, mask: int, name: bytes, padded: int) -> bytes:
    """A struct inotify_event as the kernel writes it: the name NUL-padded to ``padded`` bytes."""
    return _EVENT.pack(wd, mask, 0, padded) + name.ljust(padded, b"\0")


@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([_MODIFY, _MODIFY, 0x4000, 0x8000]),
                          st.binary(min_size=1, max_size=40).map(lambda name: name.replace(b"\0", b"x")),
                          st.sampled_from([0, 16, 16, 32])), max_size=60))
def test_events_are_decoded_alike_whatever_the_lengths_of_their_names(events):
    """Same-length names take the fast path, mixed ones the walk: both must read every event."""
    data, expected_names, expected_ignored, expected_overflow = b"", set(), set(), False
    for wd, mask, name, extra in events:
        if mask == 0x4000:  # IN_Q_OVERFLOW: wd -1, no name
            data += _event(-1, mask, b"", 0)
            expected_overflow = True
            continue
        if mask == 0x8000:  # IN_IGNORED: no name
            data += _event(wd, mask, b"", 0)
            expected_ignored.add(wd)
            continue
        padded = (len(name) // 16 + 1) * 16 + extra
        data += _event(wd, mask, name, padded)
        expected_names.add((wd, name.ljust(padded, b"\0")))
    assert grown_names(data) == (expected_names, expected_ignored, expected_overflow)


def test_many_appends_of_a_few_writers_decode_to_each_file_once():
    names = [f"worker_{rank}.log".encode() for rank in range(8)]
    data = b"".join(_event(1, _MODIFY, names[index % 8], 16) for index in range(400))
    found, ignored, overflowed = grown_names(data)
    assert {name.rstrip(b"\0") for _, name in found} == set(names)
    assert (ignored, overflowed) == (set(), False)
    # A name of another length in the middle: the stride no longer fits, every event is still read.
    mixed = data[:3200] + _event(2, _MODIFY, b"a-much-longer-file-name.log", 32) + data[3200:]
    assert (2, b"a-much-longer-file-name.log".ljust(32, b"\0")) in grown_names(mixed)[0]
    assert len(grown_names(mixed)[0]) == 9
