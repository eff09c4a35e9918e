"""Glue from followed files to state: parse each batch of lines, apply it under one lock.

The read position after each batch is recorded under the same lock as the state the batch
changed, so a snapshot taken under that lock (a checkpoint) pairs every file's offset with
exactly the lines already counted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from exporter.checkpoint import Checkpoint
from exporter.follow import FilePosition, FollowedFile, ReadBatch
from exporter.parse import LineParser, Record
from exporter.state import SeriesKey, TrainingState
from exporter.state.snapshot import dump_state


class Pipeline:
    """The follow loop's sink: one LineParser per file, one state for all."""

    def __init__(
        self,
        state: TrainingState,
        node: str,
        run_for_directory: Callable[[str], str],
        clock: Callable[[], float] = time.time,
        positions: Mapping[str, FilePosition] | None = None,
    ) -> None:
        self._state = state
        self._node = node
        self._run_for_directory = run_for_directory
        self._clock = clock
        self._parsers: dict[str, LineParser] = {}
        self._keys: dict[str, SeriesKey] = {}
        # Restored positions stay until their file is read again: a checkpoint written before
        # a file is rediscovered must not forget where it was.
        self._positions: dict[str, FilePosition] = dict(positions or {})
        self._generation = 0  # changes applied; a checkpointer skips writing when unchanged

    @property
    def generation(self) -> int:
        return self._generation

    def checkpoint(self) -> tuple[int, Checkpoint]:
        """A consistent snapshot: every position with the state its lines produced."""
        with self._state.lock:
            return self._generation, Checkpoint(dict(self._positions), dump_state(self._state))

    def file_discovered(self, file: FollowedFile, mtime: float | None) -> None:
        key = (self._run_for_directory(file.directory), self._node, file.role.rank)
        self._keys[file.path] = key
        self._parsers[file.path] = LineParser()
        info = {"file": os.path.basename(file.path), "role": file.role.role}
        with self._state.lock:
            self._state.register(key, info, mtime)
            self._generation += 1

    def lines_read(self, file: FollowedFile, batch: ReadBatch) -> None:
        parse = self._parsers[file.path].parse
        records: list[Record] = []
        unparsed = 0
        for line in batch.lines:
            found = parse(line)
            if found:
                records.extend(found)
            else:
                unparsed += 1
        state = self._state
        with state.lock:
            stats = state.stats
            stats.bytes_read_total += batch.bytes_read
            stats.lines_truncated_total += batch.lines_truncated
            stats.rotations_total += batch.rotated
            stats.truncations_total += batch.truncated
            stats.bytes_lost_total += batch.bytes_lost
            state.ingest(self._keys[file.path], len(batch.lines), unparsed, records, batch.mtime, self._clock())
            if batch.position is not None:
                self._positions[file.path] = batch.position
            self._generation += 1

    def file_closed(self, file: FollowedFile) -> None:
        with self._state.lock:
            self._positions.pop(file.path, None)
            self._generation += 1

    def files_followed(self, count: int) -> None:
        with self._state.lock:
            self._state.stats.files_followed = count
