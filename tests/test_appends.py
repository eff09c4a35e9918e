"""AppendWatcher: appends to files of watched directories reported in batches (real inotify)."""

from __future__ import annotations

import queue
import sys

import pytest

from exporter.follow.appends import AppendWatcher

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


@pytest.fixture
def reports():
    found: queue.Queue = queue.Queue()
    watcher = AppendWatcher.create(found.put, coalesce=0.2)
    assert watcher is not None
    watcher.start()
    yield watcher, found
    watcher.stop()


def test_appends_in_a_watched_directory_are_reported_once_per_batch(tmp_path, reports):
    watcher, found = reports
    first, second = tmp_path / "worker_0.log", tmp_path / "worker_1.log"
    first.write_bytes(b"")
    second.write_bytes(b"")
    watcher.watch(str(tmp_path))
    with open(first, "ab", buffering=0) as one, open(second, "ab", buffering=0) as two:
        for _ in range(50):  # many writes within the coalescing window: one report
            one.write(b"line\n")
            two.write(b"line\n")
    assert found.get(timeout=5) == {str(first), str(second)}
    assert found.empty()


def test_unwatched_directories_are_not_reported(tmp_path, reports):
    watcher, found = reports
    watched, other = tmp_path / "watched", tmp_path / "other"
    watched.mkdir()
    other.mkdir()
    watcher.watch(str(watched))
    (other / "worker_0.log").write_bytes(b"line\n")
    (watched / "worker_1.log").write_bytes(b"line\n")
    assert found.get(timeout=5) == {str(watched / "worker_1.log")}


def test_stop_ends_the_thread_even_when_nothing_happened(tmp_path):
    watcher = AppendWatcher.create(lambda paths: None)
    watcher.watch(str(tmp_path))
    watcher.start()
    watcher.stop()
    assert not watcher._thread.is_alive()
