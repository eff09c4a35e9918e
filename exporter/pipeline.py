"""Glue from followed files to state: parse each batch of lines, apply it under one lock.

One file usually holds one rank. A torchrun ``--tee`` file mixes ranks, line by line
(``[default3]:``, ``[rank3]:``): its records go to the series of the rank they name, and
its unprefixed lines (the launcher's) to the file's own series.

Read positions are kept here, and only here: restored from a checkpoint, handed to the
follower when it discovers a file, and recorded after each batch under the same lock as
the state the batch changed, so a snapshot taken under that lock (a checkpoint) pairs
every file's offset with exactly the lines already counted.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.checkpoint import Checkpoint
from exporter.follow import FilePosition, FollowedFile, ReadBatch
from exporter.follow.discover import PidRanks, RanklessFiles, plog_pid, unnamed_pid
from exporter.follow.identity import implausible
from exporter.parse import Format, FormatSelection, LineParser, ParsedBlock, Record
from exporter.parse.csv_rows import CsvRows, is_table
from exporter.parse.fields import label_value
from exporter.parse.formats import msrun_console
from exporter.parse.ranks import global_rank
from exporter.parse.signatures import worker_pid
from exporter.state import SeriesKey, TrainingState
from exporter.state.snapshot import dump_state

log = logging.getLogger(__name__)

_Groups = dict[int | None, list[Record]]  # a piece's records by the rank they belong to
_Exits = list[tuple[SeriesKey, Record]]  # a launcher's report of a worker's exit, on that worker's series


@dataclass(slots=True)
class _File:
    """A followed file's parser and the series it feeds."""

    parser: LineParser
    run: str
    info: dict[str, str]
    keys: dict[int | None, SeriesKey] = field(default_factory=dict)  # rank named by a line prefix -> series
    format: Format | None = None  # the format last written into ``info``
    rows: CsvRows | None = None  # a header-driven CSV table (metrics.csv): its rows made lines
    worker: bool = False  # a rank's own worker log: its records' pids name its rank (_exited_worker)


class Pipeline:
    """The follow loop's sink: one LineParser per file, one state for all."""

    def __init__(
        self,
        state: TrainingState,
        node: str,
        run_for_directory: Callable[[str], str],
        clock: Callable[[], float] = time.time,
        *,
        formats: FormatSelection | None = None,
        rank_offset: int = 0,
        positions: Mapping[str, FilePosition] | None = None,
    ) -> None:
        self._state = state
        self._node = node
        self._run_for_directory = run_for_directory
        self._rankless = RanklessFiles()
        self._clock = clock
        self._formats = formats or FormatSelection()
        self._rank_offset = rank_offset
        self._files: dict[str, _File] = {}
        # Restored positions stay until their file is read again: a checkpoint written before
        # a file is rediscovered must not forget where it was.
        self._positions: dict[str, FilePosition] = dict(positions or {})
        self._generation = 0  # changes applied; a checkpointer skips writing when unchanged
        self._pid_ranks = PidRanks()  # which worker log names the pid a launcher reports exiting

    @property
    def generation(self) -> int:
        return self._generation

    def checkpoint(self) -> tuple[int, Checkpoint]:
        """A consistent snapshot: every position with the state its lines produced."""
        with self._state.lock:
            return self._generation, Checkpoint(dict(self._positions), dump_state(self._state))

    def file_discovered(self, file: FollowedFile, mtime: float | None) -> FilePosition | None:
        """Start a file's series; where to resume reading it (a restored position), None: at its start."""
        role = file.role
        rank = role.rank
        if role.local_rank and rank:
            rank = str(global_rank(int(rank), True, self._rank_offset))
        parser = LineParser(self._formats.candidates(), forced=self._formats.forced(file.relative_path, role.role),
                            rank_offset=self._rank_offset)
        run = self._run_for_directory(file.directory)
        if role.rankless:  # a further rank-less file of the run is a series of its own (discover.RanklessFiles)
            run = label_value(self._rankless.run_label(run, self._node, file.path, file.relative_path))
        entry = _File(parser, run, {"file": label_value(os.path.basename(file.path)), "role": role.role},
                      rows=CsvRows(functools.partial(_first_line, file.path)) if is_table(file.path) else None,
                      worker=role.role == "worker" and not role.rankless and plog_pid(file.relative_path) is None)
        key = entry.keys[None] = (entry.run, self._node, rank)
        self._files[file.path] = entry
        with self._state.lock:
            self._discard_implausible_position(file.path, key)
            self._state.register(key, entry.info, mtime, attempt=role.attempt)
            self._generation += 1
            return self._positions.get(file.path)

    def _discard_implausible_position(self, path: str, key: SeriesKey) -> None:
        """A restored position no file could give: forget it and the file's counts, read the file from its start."""
        position = self._positions.get(path)
        problem = implausible(position) if position is not None else None
        if problem is None:
            return
        log.warning("the checkpoint's position in %s makes no sense (%s): reading the file again from its start, "
                    "its series starts over", path, problem)
        del self._positions[path]
        self._state.series.pop(key, None)

    def lines_read(self, file: FollowedFile, batch: ReadBatch, coming: Sequence[ReadBatch] = ()) -> None:
        entry = self._files[file.path]
        parser = entry.parser
        if entry.rows is None:
            for later in coming:
                parser.prepare(later.data)
        pieces = [self._routed(entry, file, parser.parse_block(piece))
                  for piece in parser.pieces(entry.rows.lines(batch.data) if entry.rows is not None else batch.data)]
        info_changed = self._note_format(entry)
        state = self._state
        now = self._clock()
        with state.lock:  # the read's lines and its position together: a checkpoint saves both or neither
            stats = state.stats
            stats.bytes_read_total += batch.bytes_read
            stats.lines_truncated_total += batch.lines_truncated
            stats.rotations_total += batch.rotated
            stats.truncations_total += batch.truncated
            stats.bytes_lost_total += batch.bytes_lost
            for parsed, groups, exits in pieces:
                self._ingest(entry, parsed, groups, exits, info_changed, batch.mtime, now)
            if batch.position is not None:
                self._positions[file.path] = batch.position
            self._generation += 1

    def _routed(self, entry: _File, file: FollowedFile, parsed: ParsedBlock) -> tuple[ParsedBlock, _Groups, _Exits]:
        """A parsed piece's records by rank, and a launcher's reports of a worker's exit by that worker's series
        (found outside the state's lock: a pid is looked up in the worker logs)."""
        groups: _Groups = {rank: [] for rank in parsed.lines_by_rank}
        exits: _Exits = []
        launcher = entry.parser.format is msrun_console.FORMAT
        for record in parsed.records:
            if launcher and not msrun_console.launcher_record(record):
                continue  # a copy of a worker's line, read in the worker's own file
            worker = self._exited_worker(record, file.path) if launcher else None
            if worker is not None:
                exits.append((worker, record))
            else:
                groups.setdefault(record.rank, []).append(record)
        return parsed, groups, exits

    def _ingest(self, entry: _File, parsed: ParsedBlock, groups: _Groups, exits: _Exits, info_changed: bool,
                mtime: float | None, now: float) -> None:
        """A parsed piece of a read into the state (its lock held): each rank's lines and records on its series."""
        state = self._state
        stats = state.stats
        stats.lines_unparsed_total += parsed.unparsed
        for name, lines in parsed.lines_by_format.items():
            stats.lines_parsed_total[name] = stats.lines_parsed_total.get(name, 0) + lines
        for reason, lines in parsed.rejected.items():
            stats.lines_rejected_total[reason] = stats.lines_rejected_total.get(reason, 0) + lines
        for rank, records in groups.items():
            key = entry.keys.get(rank)
            if key is None:
                key = (entry.run, self._node, str(rank))
                if state.register(key, entry.info, None) is not None:
                    # Only ranks that have a series: a million prefixes the limits keep out hold no memory.
                    entry.keys[rank] = key
            elif info_changed:
                state.register(key, entry.info, None)
            state.ingest(key, parsed.lines_by_rank.get(rank, 0), records, mtime, now)
        for key, record in exits:
            state.ingest(key, 0, [record], None, now)  # the worker's log did not change: no log timestamp

    def _exited_worker(self, record: Record, console: str) -> SeriesKey | None:
        """The series of the worker msrun's console reports exiting by pid, by the worker log whose records name
        that pid; None for any other record, and for a pid no worker log names (it stays on the console's own
        series: counted for the run, docs/formats.md)."""
        pid = worker_pid(record)
        if pid is None:
            return None
        path = self._pid_ranks.path_of(pid, [path for path, entry in self._files.items() if entry.worker])
        if path is None or path not in self._files:
            log.warning("%s", unnamed_pid(pid, console))
            return None
        return self._files[path].keys[None]

    def file_closed(self, file: FollowedFile) -> None:
        with self._state.lock:
            self._positions.pop(file.path, None)
            self._generation += 1

    def files_followed(self, count: int) -> None:
        """After each scan of the files: their count, and a hang the silence of the ranks shows by now."""
        with self._state.lock:
            self._state.stats.files_followed = count
            self._state.settle(self._clock())

    @staticmethod
    def _note_format(entry: _File) -> bool:
        """Put a newly detected format into the file's info labels; True when it changed."""
        reading = entry.parser.reading
        if reading is not None and "reading" not in entry.info:
            # Said once per file: which names of a format never seen were taken for what (the generic reader).
            entry.info["reading"] = reading
            log.info("%s: %s", entry.info.get("file", "?"), reading)
            Pipeline._note_format(entry)
            return True
        fmt = entry.parser.format
        if fmt is entry.format or fmt is None:
            return False
        entry.format = fmt
        entry.info["format"] = fmt.name
        if fmt.framework:
            entry.info["framework"] = fmt.framework
        return True


def _first_line(path: str) -> bytes | None:
    """The first line of a file (a CSV table's header, for parse/csv_rows.py); None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.readline(1 << 16)
    except OSError:
        return None
