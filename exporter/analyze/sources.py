"""The command line's PATHs as log sources: which files, in which order, with which run, node and rank.

A directory gives the files ``serve`` would follow there (discover.is_followed); a file
gives itself; each with its rotated generations read first, oldest first (``.2.gz``,
``.1``, then the live file). With several log directories (one ``msrun_log`` per node)
the node label is each one's parent directory name and the run label the name of their
common ancestor; with one, the node is unknown and the run is the directory's parent, as
for ``serve``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.analyze.timestamps import LineClock
from exporter.follow.discover import (
    LogFileRole,
    RanklessFiles,
    classify,
    discovery_order,
    is_followed,
    natural_key,
    run_label,
)
from exporter.follow.rotated import generations, rotated_base
from exporter.follow.stream import STDIN

# How much of a file's start is searched for its first timestamp (a launcher attempt's directory order).
FIRST_TIME_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Source:
    """One log (a rank's worker log, a scheduler log, standard input) and its generations, oldest first."""

    name: str  # as shown in the report: the path relative to its log directory, or "-"
    generations: tuple[str, ...]
    run: str
    node: str
    role: LogFileRole


@dataclass(frozen=True, slots=True)
class Resolved:
    sources: list[Source]
    problems: list[str]  # one line per PATH that gave nothing to read


def resolve(paths: list[str], run: str | None = None) -> Resolved:
    """The sources the PATHs name; a PATH that is missing or holds no log becomes a problem line."""
    found: list[tuple[str, str]] = []  # (log directory, live file path), or (STDIN, STDIN)
    problems = []
    for path in paths:
        if path == STDIN:
            found.append((STDIN, STDIN))
        elif os.path.isdir(path):
            files = _logs_in(path)
            if not files:
                problems.append(f"{path}: no log files in this directory (*.log, *.out, *.jsonl, *.txt, metrics.csv)")
            found += [(path, file) for file in files]
        elif os.path.exists(path):
            found.append((os.path.dirname(path) or ".", rotated_base(path, compressed=True) or path))
        else:
            problems.append(f"{path}: no such file or directory")
    return Resolved(_sources(found, run), problems)


def _logs_in(directory: str) -> list[str]:
    """The logs of a directory, a live file standing for its generations; generations whose live
    file is gone (a run's logs archived as ``worker_3.log.1``, ``.2.gz``) under the live name they had."""
    files: dict[str, None] = {}
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            base = rotated_base(path, compressed=True)
            if is_followed(os.path.relpath(path, directory)):
                files[path] = None
            elif base is not None and not os.path.exists(base) and is_followed(os.path.relpath(base, directory)):
                files[base] = None
    return list(files)


def _sources(found: list[tuple[str, str]], run: str | None) -> list[Source]:
    directories = sorted({os.path.abspath(directory) for directory, _ in found if directory != STDIN})
    nodes = _node_labels(directories)
    run_of_directories = run or (os.path.basename(os.path.commonpath(directories)) if len(directories) > 1
                                 else run_label(directories[0]) if directories else "stdin")
    sources: dict[str, Source] = {}
    rankless = RanklessFiles()
    # As serve finds them (discover.discovery_order): the same rank-less file has the run's own series.
    for directory, path in sorted(found, key=lambda found: (found[0], _discovery_order(*found))):
        if path == STDIN:
            sources[STDIN] = Source(STDIN, (STDIN,), run or "stdin", "", LogFileRole("", "worker"))
            continue
        key = os.path.abspath(path)
        if key in sources:
            continue
        relative = os.path.relpath(path, directory)
        # Generations whose live file is gone (rotated away at the end of the run) are read all the same.
        chain = [file for file in generations(path) if os.path.exists(file)] or [path]
        role, node = classify(relative), nodes.get(os.path.abspath(directory), "")
        own_run = rankless.run_label(run_of_directories, node, key, relative) if role.rankless else run_of_directories
        sources[key] = Source(relative, tuple(chain), own_run, node, role)
    return sorted(_attempt_directories(list(sources.values())), key=_order)


def _attempt_directories(sources: list[Source]) -> list[Source]:
    """The sources with their launcher attempt, where a rank's log of one name is in several launch directories.

    A job started again into a new log directory beside the first holds each rank's log, of the same name, in one
    directory per launch: msrun's ``--log_dir`` (its ``worker_<R>.log`` are opened with "w", so a resume keeps the
    first attempt only in another directory), torchrun's ``--log-dir`` (a run directory per launch, each with its
    ``attempt_<K>/``). A rank's other logs (a CANN ``device-<id>/`` log beside msrun's) have other names. The
    launches are numbered in the order they were written, then torchrun's attempts within each (see _launch_order).
    """
    directories: dict[tuple[str, str, str, str], set[str]] = {}  # (run, node, rank, file name) -> its launches
    for source in sources:
        if not source.role.rankless and source.role.role == "worker" and source.name != STDIN:
            named = (source.run, source.node, source.role.rank, source.name.rpartition("/")[2])
            directories.setdefault(named, set()).add(_launch(source))
    repeated: dict[tuple[str, str], set[str]] = {}  # (run, node) -> its launch directories
    for (run, node, _rank, _name), held in directories.items():
        if len(held) > 1:
            repeated.setdefault((run, node), set()).update(held)
    if not repeated:
        return sources
    members: dict[tuple[str, str, str], list[Source]] = {}  # (run, node, launch directory) -> its sources
    for source in sources:
        members.setdefault((source.run, source.node, _launch(source)), []).append(source)
    first: dict[tuple[str, str, str], int] = {}  # (run, node, launch directory) -> the number of its first attempt
    for (run, node), held in repeated.items():
        attempt = 0
        for launch in _launch_order({launch: [source.generations[0] for source in members[run, node, launch]]
                                     for launch in held}):
            first[run, node, launch] = attempt
            attempt += 1 + max(source.role.attempt or 0 for source in members[run, node, launch])
    return [_in_attempt(source, first.get((source.run, source.node, _launch(source)))) for source in sources]


def _in_attempt(source: Source, first: int | None) -> Source:
    """The source with its attempt counted from its launch's first (``first``; None: unchanged)."""
    if first is None:
        return source
    attempt = first + (source.role.attempt or 0)
    return dataclasses.replace(source, role=dataclasses.replace(source.role, attempt=attempt))


def _launch(source: Source) -> str:
    """The directory of one launch of the job a source belongs to: its own directory, or the one holding
    torchrun's ``attempt_<K>/``."""
    directory = source.name.rpartition("/")[0]
    if source.role.attempt is not None:
        marker = directory.rfind(f"attempt_{source.role.attempt}/")
        if marker >= 0:
            return directory[:marker].rstrip("/")
    return directory


def _launch_order(files: dict[str, list[str]]) -> list[str]:
    """Launch directories in the order they were written: by the earliest timestamp of their files' first lines
    when every launch has one (msrun's lines carry times; names say nothing: ``resume/`` sorts before ``run/``);
    else by the files' earliest modification time (torchrun's ``stdout.log`` of a program that prints no time:
    a copy loses it, so order such copies' times as the run wrote them); by name where neither is known."""
    natural = sorted(files, key=natural_key)
    started = {launch: _first_time(paths) for launch, paths in files.items()}
    if all(math.isfinite(time) for time in started.values()):
        return sorted(natural, key=started.__getitem__)
    modified = {launch: min((mtime for path in paths if (mtime := _mtime(path)) is not None), default=math.inf)
                for launch, paths in files.items()}
    if all(math.isfinite(time) for time in modified.values()):
        return sorted(natural, key=modified.__getitem__)
    return natural


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _first_time(paths: Iterable[str]) -> float:
    """The earliest timestamp of the first timed line of any of the files (infinity when none has one)."""
    times = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                start = handle.read(FIRST_TIME_BYTES)
        except OSError:
            continue  # unreadable here: read (and warned of) with the rest of the file
        found = LineClock().first_in(start, lines=start.count(b"\n") + 1)
        if found is not None:
            times.append(found)
    return min(times, default=math.inf)


def _discovery_order(directory: str, path: str) -> tuple:
    return discovery_order(os.path.relpath(path, directory)) if path != STDIN else (False, -1, [])


def _node_labels(directories: list[str]) -> dict[str, str]:
    """Several log directories: each one's parent name (``node1/msrun_log`` -> ``node1``), or its own
    name when the parents coincide; one directory: no node label."""
    if len(directories) < 2:
        return {}
    parents = {directory: os.path.basename(os.path.dirname(directory)) for directory in directories}
    if len(set(parents.values())) < len(directories):
        return {directory: os.path.basename(directory) for directory in directories}
    return parents


_ROLE_ORDER = {"scheduler": 1, "launcher": 2}


def _order(source: Source) -> tuple:
    rank = source.role.rank
    directory, _, name = source.name.rpartition("/")
    # torchrun's --redirects splits a rank's output into stdout.log and stderr.log, without times: its failure
    # (the traceback that ended it, in stderr.log) came after its steps (stdout.log), so stdout.log is read first.
    # Its attempts (attempt_<K>/, or msrun's log directories of one job: _attempt_directories) came one after the
    # other: every rank's attempt 0 (and its scheduler's) is read before attempt 1, so the failure that made the
    # launcher restart is the incident of that attempt, not a later attempt's.
    attempt = -1 if source.role.attempt is None else source.role.attempt
    # The scheduler's log, then a launcher's console (msrun's), after the workers of their attempt: they report what
    # happened to the workers.
    return (source.node, attempt, _ROLE_ORDER.get(source.role.role, 0), int(rank) if rank.isdigit() else -1,
            natural_key(directory), source.role.local_rank and name == "stderr.log", natural_key(name))


def within_series_cap(sources: list[Source], max_series: int) -> tuple[list[Source], str | None]:
    """The sources of the first ``max_series`` (run, node, rank) series, in report order, and a sentence
    for the report when others are left out (None when all fit).

    One analysis holds at most as many series as the exporter's cardinality guard
    (``state.Limits.max_series``); beyond it a report of the ranks it holds beats a crash.
    """
    kept: list[Source] = []
    seen: set[tuple[str, str, str]] = set()
    left_out: set[tuple[str, str, str]] = set()
    for source in sources:
        key = (source.run, source.node, source.role.rank)
        if key not in seen and len(seen) >= max_series:
            left_out.add(key)
            continue
        seen.add(key)
        kept.append(source)
    if not left_out:
        return kept, None
    return kept, (f"{len(seen) + len(left_out)} series (run, node, rank) found, more than the {max_series} one "
                  f"analysis holds: the report covers the first {max_series} in node and rank order and leaves "
                  f"out {len(left_out)} (from rank {_first_rank(left_out)}); analyze their directories or files "
                  "separately")


def _first_rank(keys: set[tuple[str, str, str]]) -> str:
    ranks = sorted((int(rank) if rank.isdigit() else -1, node, rank) for _run, node, rank in keys)
    _number, node, rank = ranks[0]
    return f"{rank} of node {node}" if node else rank
