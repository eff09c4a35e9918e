"""Real logs written again live: each line in the order, and at a multiple of the pace, its program printed it."""

from __future__ import annotations

import re
import time
from pathlib import Path

# A line's own time: MindSpore's glog-like prefix, MindFormers' logger (msrun's worker and scheduler logs).
LINE_TIME = (re.compile(rb"^\[[A-Z]+\] [A-Z_]+\([^)]*\):(\d{4}-\d\d-\d\d)-(\d\d:\d\d:\d\d)\.(\d{3})"),
             re.compile(rb"^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d),(\d{3})"))


def timed_lines(path: Path) -> list[tuple[float, bytes]]:
    """The file's lines with their own time; a line without one (a traceback's) has the time of the line above."""
    timed, when = [], 0.0
    for line in path.read_bytes().splitlines(keepends=True):
        for pattern in LINE_TIME:
            found = pattern.match(line)
            if found:
                day, clock, millis = (part.decode() for part in found.groups())
                when = time.mktime(time.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
                break
        timed.append((when, line))
    return timed


def replay_directory(source: Path, target: Path, speedup: float, longest_pause: float = 1.0) -> None:
    """Write every ``*.log`` of ``source`` into ``target`` line by line, all files merged by their lines' own times,
    the pauses between lines ``speedup`` times shorter (and never above ``longest_pause`` seconds)."""
    target.mkdir(parents=True, exist_ok=True)
    merged = sorted((when, order, path.name, line) for path in source.glob("*.log")
                    for order, (when, line) in enumerate(timed_lines(path)))
    files = {name: open(target / name, "ab") for name in {name for _, _, name, _ in merged}}  # noqa: SIM115
    try:
        before = merged[0][0] if merged else 0.0
        for when, _order, name, line in merged:
            time.sleep(min(longest_pause, max(0.0, when - before) / speedup))
            before = when
            files[name].write(line)
            files[name].flush()
    finally:
        for file in files.values():
            file.close()
