"""Catch-up: read one big worker log from its start to the last step, four ways, same file.

Every contender's output is checked against what the generator wrote, so a contender
that skipped work (or a broken program) fails the run instead of looking fast.
"""

from __future__ import annotations

import compileall
import json
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from benchmarks.generate import LogShape
from benchmarks.measure import Measured, run_measured, warm

BENCHMARKS = Path(__file__).resolve().parent
PACKAGE = BENCHMARKS.parent / "exporter"
EXPORTER_DISTRIBUTION = "trainlog-exporter"
MTAIL_PROGRAMS = BENCHMARKS / "mtail"
# The troubleshooting guide's extraction (grep -oE ... | awk), aimed at the MindFormers
# record instead of key=value pairs: step and loss only, into a two-column file.
GREP_AWK = ("grep -oE 'step:\\[ *[0-9]+/ *[0-9]+\\], loss: *[0-9.eE+-]+' {log} "
            "| awk -F'[][/:, ]+' '{{print $2, $NF}}'")


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    what: str  # what it does, for the table
    command: list[str]

    def check(self, output: str, shape: LogShape) -> None:
        """Raise when the output shows the work was not done in full."""
        _CHECKS[self.name](output, shape)


def contenders(log: Path) -> list[Contender]:
    """The exporter and its three yardsticks; mtail only when installed."""
    found = [
        Contender("exporter", "trainlog-exporter: every field, events, state",
                  [sys.executable, "-m", "benchmarks.catchup_exporter", str(log.parent)]),
        Contender("grep_awk", "grep -oE | awk: step and loss only", ["sh", "-c", GREP_AWK.format(log=log)]),
        Contender("wc", "wc -l: the read limit", ["wc", "-l", str(log)]),
    ]
    mtail = shutil.which("mtail")
    if mtail:
        found.append(Contender("mtail", "mtail --one_shot: equivalent program", [
            mtail, "--one_shot", "--one_shot_format", "prometheus", "--progs", str(MTAIL_PROGRAMS),
            "--logs", str(log), "--port", "0", "--address", "127.0.0.1", "--logtostderr",
        ]))
    return found


def compile_bytecode() -> None:
    """The bytecode of the exporter and of its dependencies, as an installed exporter has it (pip compiles a wheel at
    install; the image compiles its whole venv: Dockerfile).

    A checkout's editable install runs from source: without the cache, and with
    PYTHONDONTWRITEBYTECODE set (as on CI machines and in the image), every start compiles
    every module again, a tenth of a second that no deployed exporter pays. The dependencies
    too: `make setup` installs them with ``pip --no-compile`` (the test extras are thousands of
    modules), and typing_extensions and watchdog compiled at each start cost a catch-up some
    0.08 s that an installed exporter does not pay. Files compiled before are skipped.
    """
    compileall.compile_dir(PACKAGE, quiet=1)
    for source in dependency_sources(EXPORTER_DISTRIBUTION):
        compileall.compile_file(source, quiet=1)


def dependency_sources(distribution: str) -> list[Path]:
    """The Python sources of the installed distributions ``distribution`` requires, theirs too (no extras)."""
    wanted, seen, sources = [distribution], set(), []
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement of another platform's (inotify_simple off Linux)
        wanted += [match.group() for requirement in found.requires or () if "extra ==" not in requirement
                   and (match := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement))]
        if name != distribution:
            sources += [Path(str(found.locate_file(file))) for file in found.files or () if file.suffix == ".py"]
    return sources


def measure(log: Path, shape: LogShape, rounds: int) -> dict[str, dict[str, object]]:
    """Best of ``rounds`` interleaved runs per contender (mtail: one run, it takes long)."""
    compile_bytecode()
    best: dict[str, Measured] = {}
    what: dict[str, str] = {}
    for round_number in range(rounds):
        for contender in contenders(log):
            if contender.name == "mtail" and round_number > 0:
                continue
            warm(log)  # every contender reads from memory
            result = run_measured(contender.command)
            contender.check(result.stdout, shape)
            what[contender.name] = contender.what
            previous = best.get(contender.name)
            if previous is None or result.wall_seconds < previous.wall_seconds:
                best[contender.name] = result
    rows: dict[str, dict[str, object]] = {
        name: {
            "what": what[name],
            "wall_seconds": result.wall_seconds,
            "cpu_seconds": result.cpu_seconds,
            "max_rss_mb": None if result.max_rss_kb is None else result.max_rss_kb / 1024,
            "lines_per_second": shape.lines / result.wall_seconds,
        }
        for name, result in best.items()
    }
    # Context, not judged: the exporter's own account of its best run (imports, then reading).
    report = json.loads(best["exporter"].stdout)
    rows["exporter"].update(seconds=report["seconds"], speedups=report["speedups"])
    return rows


# A prefixed log: torchrun's ``[rank3]: `` before every line, as ``--tee`` and its log directories
# print them. Such a block is read line by line, so its speed is reported apart (no target).
PREFIX_RANK = 3
PREFIX = f"[rank{PREFIX_RANK}]: "


@dataclass(frozen=True)
class Yardstick:
    """The unprefixed catch-up a ratio target divides by, run again in the same rounds as what it is compared with:
    the machine's speed drifts between the phases of a run (10-20 % within minutes on a shared machine), and a
    ratio of two bests taken minutes apart measured that drift too."""

    log: Path
    shape: LogShape

    def run(self) -> Measured:
        warm(self.log)
        result = run_measured([sys.executable, "-m", "benchmarks.catchup_exporter", str(self.log.parent)])
        _check_exporter(result.stdout, self.shape)
        return result


def measure_prefixed(log: Path, shape: LogShape, rounds: int, yardstick: Yardstick | None = None) -> dict[str, object]:
    """The exporter's best of ``rounds`` on a log whose every line has torchrun's rank prefix; with ``yardstick``,
    its best in the same rounds too (``unprefixed_beside``)."""
    best: Measured | None = None
    beside: Measured | None = None
    for _ in range(rounds):
        warm(log)
        result = run_measured([sys.executable, "-m", "benchmarks.catchup_exporter", str(log.parent)])
        _check_exporter(result.stdout, shape, str(PREFIX_RANK))
        if best is None or result.wall_seconds < best.wall_seconds:
            best = result
        if yardstick is not None:
            measured = yardstick.run()
            if beside is None or measured.wall_seconds < beside.wall_seconds:
                beside = measured
    assert best is not None
    row: dict[str, object] = {"lines": shape.lines, "wall_seconds": best.wall_seconds, "cpu_seconds": best.cpu_seconds,
                              "lines_per_second": shape.lines / best.wall_seconds,
                              "seconds": json.loads(best.stdout)["seconds"]}
    if beside is not None and yardstick is not None:
        row["unprefixed_beside"] = {"wall_seconds": beside.wall_seconds,
                                    "lines_per_second": yardstick.shape.lines / beside.wall_seconds}
    return row


def _check_exporter(output: str, shape: LogShape, rank_label: str | None = None) -> None:
    ranks = json.loads(output)["ranks"]
    (rank,) = ranks.values() if rank_label is None else (ranks[rank_label],)
    _expect("exporter lines", rank["lines"], shape.lines)
    _expect("exporter steps", rank["steps"], shape.steps)
    _expect("exporter last step", rank["step"], shape.steps)
    _expect("exporter tracebacks", rank["errors"].get("traceback", 0), shape.tracebacks)
    _expect("exporter OOMs", rank["errors"].get("oom", 0), shape.ooms)
    _expect("exporter aux losses", sorted(rank["aux_losses"]), ["load_balancing_loss", "mtp_1_loss"])


def _check_mtail(output: str, shape: LogShape) -> None:
    _expect("mtail lines", _prometheus_value(output, "training_log_lines_total"), shape.lines)
    _expect("mtail steps", _prometheus_value(output, "training_steps_total"), shape.steps)
    _expect("mtail last step", _prometheus_value(output, "training_step"), shape.steps)
    # mtail prints a labelled counter only once it was incremented.
    tracebacks = _prometheus_value(output, "training_errors_total", 'kind="traceback"') or 0
    _expect("mtail tracebacks", tracebacks, shape.tracebacks)
    _expect("mtail OOMs", _prometheus_value(output, "training_errors_total", 'kind="oom"') or 0, shape.ooms)


def _check_grep_awk(output: str, shape: LogShape) -> None:
    rows = output.splitlines()
    _expect("grep | awk rows", len(rows), shape.steps)
    _expect("grep | awk last step", int(rows[-1].split()[0]) if rows else None, shape.steps)


def _check_wc(output: str, shape: LogShape) -> None:
    _expect("wc -l", int(output.split()[0]), shape.lines)


_CHECKS = {"exporter": _check_exporter, "mtail": _check_mtail, "grep_awk": _check_grep_awk, "wc": _check_wc}


def _prometheus_value(exposition: str, name: str, label: str = "") -> float | None:
    for line in exposition.splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _expect(what: str, got: object, expected: object) -> None:
    if got != expected:
        raise AssertionError(f"{what}: got {got!r}, expected {expected!r}")

