"""Catch-up of real consoles: logs real trainers printed here, repeated to a benchmark's length.

The synthetic catch-up log (generate.py) is MindFormers' unprefixed worker log. Real PyTorch
consoles look otherwise: torchrun's ``--tee`` prefixes every worker line with ``[defaultN]:``
(``[defaultN]:[rankN]:`` on exceptions), and a Hugging Face Trainer's console is tqdm's
carriage-return redraws with the Trainer's dicts between them. Each kept real log
(tests/fixtures/real/, SOURCES.md says how it was made) is written again and again, whole, until
the file has the benchmark's number of lines, and read by: serve's catch-up, ``analyze --format
json``, ``analyze --csv``, ``grep -c loss`` and the guide's ``grep | awk`` (step and loss).

The copies continue the run: each copy's step counters (torchrun's ``step=S/T``, tqdm's ``S/T``)
go on from the copy before, as a longer run prints them; copied as they are, every copy would be a
restart (about 30,000 in 2,000,000 lines), which measures restarts, not a run's lines. Only the
counters change: every other byte is the real program's.

Every contender's output is checked: the exporter's lines per rank add up to the file's, its
steps to the step lines the copies hold; ``analyze``'s too; the CSV has a row per step line.

A ``--tee`` console's catch-up is also measured beside the same lines unprefixed (``by_rank``): each
rank's lines without their ``[defaultN]:``, in a file of their own, as torchrun ``--log-dir`` with
``--redirects 3`` writes them (``attempt_0/<rank>/stdout.log``; the launcher's own lines are not a
rank's). The two differ by the prefixes alone, where the unprefixed catch-up (generate.py's log)
holds other lines: its lines are mostly chatter, a console's mostly step lines.

A third console is made of two real logs (``Chatter``): the ``--tee`` console with three NCCL INFO lines
of a real nccl-tests run after each rank line, under that line's prefix, as a console of a run with
``NCCL_DEBUG=INFO`` holds them (such consoles reach gigabytes). It is measured as the others, and is no
target's: the issue's targets are the consoles as the trainers printed them.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from benchmarks.catchup import Yardstick, compile_bytecode
from benchmarks.measure import Measured, run_measured, warm
from tests.support.exporter_process import exporter_command

# A contender whose run took longer than this is not run again (a per-line path: minutes a round).
SLOW_SECONDS = 20.0
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"


@dataclass(frozen=True, slots=True)
class Chatter:
    """Another kept real log's lines put into a console: ``per_line`` of them after each rank line, in turn, each
    under that line's rank prefix."""

    fixture: str
    marker: bytes  # the lines taken hold it
    after: bytes  # each is taken from after this (a launcher's own tag cut off)
    per_line: int


@dataclass(frozen=True, slots=True)
class Console:
    """A kept real console, what marks its step lines, and the guide's extraction for it."""

    name: str
    fixture: str
    step_lines_per_copy: int  # step records per copy (a rank's, any rank): the exporter and analyze must read each
    grep_awk: str  # step and loss of every step record, one row each ({log}: the file)
    counter: bytes  # the step counter, ``S/T`` in groups 2 and 3 between groups 1 and 4: continued copy after copy
    chatter: Chatter | None = None


CONSOLES = (
    # torchrun --tee 3 of ddp_train.py, 4 ranks, a healthy run of 100 steps: `[defaultN]:step=S/T loss=... lr=...
    # grad_norm=... step_time=...`. Each copy's loss starts again from the model's first: a spike every 100 steps.
    Console("torchrun_tee", "torchrun_ddp_healthy.log", 400,
            "grep -oE 'step=[0-9]+/[0-9]+ loss=[^ ]+' {log} | awk -F'[=/ ]' '{{print $2, $5}}'",
            rb"(step=)(\d+)/(\d+)( )"),
    # A Hugging Face Trainer under torchrun: tqdm's redraws, `{'loss': '4.036', ...}` dicts.
    Console("hf_trainer", "hf_trainer_tqdm.log", 12,
            "grep -oE \"'loss': '?[0-9.eE+-]+\" {log} | awk -F\"'\" '{{print NR, $4}}'",
            rb"(\| *)(\d+)/(\d+)( \[)"),
    # The first with NCCL_DEBUG=INFO's lines among its own: those of nccl-tests under mpirun (`[1,N]<stdout>:` cut
    # off), on hosts whose names hold "nccl", three after each rank line.
    Console("torchrun_tee_nccl_info", "torchrun_ddp_healthy.log", 400,
            "grep -oE 'step=[0-9]+/[0-9]+ loss=[^ ]+' {log} | awk -F'[=/ ]' '{{print $2, $5}}'",
            rb"(step=)(\d+)/(\d+)( )",
            Chatter("healthy/nccl_awsefaeks_nccltests.log", b" NCCL INFO ", b"<stdout>:", 3)),
)


@dataclass(frozen=True, slots=True)
class ConsoleLog:
    path: Path
    fixture: str
    lines: int
    copies: int
    step_lines: int


def write_console(directory: Path, console: Console, lines: int) -> ConsoleLog:
    """The console's fixture written whole, again and again, until the file has ``lines`` lines at least, each
    copy's step counters going on from the copy before's last."""
    text = _console_text(console)
    per_copy = text.count(b"\n")
    copies = max(1, -(-lines // per_copy))
    counter = re.compile(console.counter)
    steps = max(int(found.group(2)) for found in counter.finditer(text))
    total = steps * copies
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "train.log"
    with path.open("wb") as handle:
        for copy in range(copies):
            handle.write(counter.sub(partial(_continued, offset=copy * steps, total=total), text))
    return ConsoleLog(path, console.fixture, per_copy * copies, copies, console.step_lines_per_copy * copies)


def _console_text(console: Console) -> bytes:
    """One copy of the console: its fixture, with its chatter put in."""
    text = (FIXTURES / console.fixture).read_bytes()
    chatter = console.chatter
    if chatter is None:
        return text
    taken = [line.split(chatter.after, 1)[-1]
             for line in (FIXTURES / chatter.fixture).read_bytes().splitlines(keepends=True) if chatter.marker in line]
    lines = itertools.cycle(taken)
    parts = []
    for line in text.splitlines(keepends=True):
        parts.append(line)
        prefix = _TEE_PREFIX.match(line)
        if prefix is not None:
            parts += [prefix.group(0) + next(lines) for _ in range(chatter.per_line)]
    return b"".join(parts)


def _continued(found: re.Match[bytes], offset: int, total: int) -> bytes:
    """A step counter ``S/T`` of a copy, ``offset`` steps on, of the ``total`` steps of all copies."""
    return b"%s%d/%d%s" % (found.group(1), int(found.group(2)) + offset, total, found.group(4))


# A --tee console's rank prefix: torchrun's ``[defaultN]:`` (``[defaultN]:[rankN]:`` on an exception's lines).
_TEE_PREFIX = re.compile(rb"\[default(\d+)\]:")


def write_by_rank(directory: Path, log: ConsoleLog) -> tuple[int, int] | None:
    """The console's rank lines without their prefix, each rank's in ``attempt_0/<rank>/stdout.log`` under
    ``directory``: how many lines and ranks; None when no line has a ``[defaultN]:`` prefix."""
    files: dict[bytes, BinaryIO] = {}
    lines = 0
    try:
        with log.path.open("rb") as console:
            for line in console:
                prefix = _TEE_PREFIX.match(line)
                if prefix is None:
                    continue  # the launcher's own line: torchrun writes it to its console only
                rank = prefix.group(1)
                if rank not in files:
                    path = directory / "attempt_0" / rank.decode() / "stdout.log"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    files[rank] = path.open("wb")
                files[rank].write(line[prefix.end():])
                lines += 1
    finally:
        for handle in files.values():
            handle.close()
    return (lines, len(files)) if files else None


def _check_catchup(output: str, log: ConsoleLog, lines_expected: int | None = None) -> None:
    """The catch-up read every line (``lines_expected``: of the files it read, else the console's) and each step."""
    ranks = json.loads(output)["ranks"]
    lines = sum(rank["lines"] for rank in ranks.values())
    steps = sum(rank["steps"] for rank in ranks.values())
    expected = log.lines if lines_expected is None else lines_expected
    if lines != expected or steps != log.step_lines:
        raise AssertionError(f"catch-up of {log.path}: {lines} lines, {steps} steps; expected {expected} and "
                             f"{log.step_lines}")


def _check_analyze(output: str, log: ConsoleLog) -> None:
    report = json.loads(output)
    lines = sum(rank["lines"] for run in report["runs"] for rank in run["ranks"])
    if lines != log.lines:
        raise AssertionError(f"analyze of {log.path}: {lines} lines, expected {log.lines}")


def _check_csv(path: Path, log: ConsoleLog) -> None:
    with path.open(newline="") as handle:
        rows = sum(1 for _ in csv.DictReader(handle))
    if rows < log.copies:
        raise AssertionError(f"analyze --csv of {log.path}: {rows} rows for {log.copies} copies")


def _check_grep_awk(output: str, log: ConsoleLog) -> None:
    rows = len(output.splitlines())
    if rows != log.step_lines:
        raise AssertionError(f"grep | awk on {log.path}: {rows} rows, expected {log.step_lines}")


def measure_console(directory: Path, console: Console, lines: int, rounds: int,
                    yardstick: Yardstick | None = None) -> dict[str, object]:
    """Best of ``rounds`` interleaved runs of each contender on the console repeated to ``lines`` lines; with
    ``yardstick``, the unprefixed catch-up among them (``unprefixed``: the ratio targets' divisor, same rounds)."""
    log = write_console(directory, console, lines)
    compile_bytecode()
    csv_path = directory.parent / f"{console.name}.csv"
    contenders: dict[str, tuple[list[str], Callable[[Measured], None]]] = {
        "exporter": ([sys.executable, "-m", "benchmarks.catchup_exporter", str(directory)],
                     lambda result: _check_catchup(result.stdout, log)),
        "analyze_json": (exporter_command("analyze", str(log.path), "--format", "json"),
                         lambda result: _check_analyze(result.stdout, log)),
        "analyze_csv": (exporter_command("analyze", str(log.path), "--csv", str(csv_path)),
                        lambda result: _check_csv(csv_path, log)),
        "grep_awk": (["sh", "-c", console.grep_awk.format(log=log.path)],
                     lambda result: _check_grep_awk(result.stdout, log)),
        "grep_c_loss": (["grep", "-c", "loss", str(log.path)], lambda result: None),
    }
    by_rank_directory = directory.parent / "by_rank"
    by_rank = write_by_rank(by_rank_directory, log)
    if by_rank is not None:
        rank_lines = by_rank[0]
        contenders["by_rank"] = ([sys.executable, "-m", "benchmarks.catchup_exporter", str(by_rank_directory)],
                                 lambda result: _check_catchup(result.stdout, log, rank_lines))
    best: dict[str, Measured] = {}
    beside: Measured | None = None
    for _ in range(rounds):
        for name, (command, check) in contenders.items():
            if name in best and best[name].wall_seconds > SLOW_SECONDS:
                continue  # one run tells a contender this slow: its best of three would change no verdict
            warm(log.path)  # every contender reads from memory
            result = run_measured(command)
            check(result)
            if name not in best or result.wall_seconds < best[name].wall_seconds:
                best[name] = result
        if yardstick is not None:
            result = yardstick.run()
            if beside is None or result.wall_seconds < beside.wall_seconds:
                beside = result
    rows: dict[str, object] = {
        name: {"wall_seconds": result.wall_seconds, "cpu_seconds": result.cpu_seconds,
               "lines_per_second": (by_rank[0] if name == "by_rank" and by_rank else log.lines) / result.wall_seconds}
        for name, result in best.items()
    }
    if beside is not None and yardstick is not None:
        rows["unprefixed"] = {"wall_seconds": beside.wall_seconds, "cpu_seconds": beside.cpu_seconds,
                              "lines_per_second": yardstick.shape.lines / beside.wall_seconds}
    rows["exporter"]["seconds"] = json.loads(best["exporter"].stdout)["seconds"]  # type: ignore[index]
    return {"fixture": console.fixture, "chatter": console.chatter and console.chatter.fixture, "lines": log.lines,
            "copies": log.copies, "bytes": log.path.stat().st_size, "contenders": rows}


def measure(workdir: Path, lines: int, rounds: int, yardstick: Yardstick | None = None) -> dict[str, dict]:
    """Every kept console, each repeated to ``lines`` lines (its file deleted once measured)."""
    results: dict[str, dict] = {}
    for console in CONSOLES:
        directory = workdir / console.name / "logs"
        results[console.name] = measure_console(directory, console, lines, rounds, yardstick)
        for path in directory.parent.rglob("*"):
            if path.is_file():
                path.unlink()
    return results


def summary(results: dict[str, dict]) -> str:
    """One line per console: each contender's lines a second."""
    parts = []
    for name, row in results.items():
        rates = ", ".join(f"{contender} {values['lines_per_second']:,.0f}"
                          for contender, values in row["contenders"].items())
        chatter = f" with {row['chatter']}'s lines" if row.get("chatter") else ""
        parts.append(f"real console {name} ({row['fixture']}{chatter} x {row['copies']:,}, {row['lines']:,} lines, "
                     f"{row['bytes'] / 1e6:.0f} MB), lines/s: {rates}")
        contenders = row["contenders"]
        if "by_rank" in contenders:
            ratio = contenders["exporter"]["lines_per_second"] / contenders["by_rank"]["lines_per_second"]
            parts.append(f"real console {name}: catch-up / the same lines unprefixed, a file a rank (by_rank): "
                         f"{ratio:.2f}x lines per second")
    return "\n".join(parts)


if __name__ == "__main__":  # python -m benchmarks.real_console [LINES] [ROUNDS]
    with tempfile.TemporaryDirectory(prefix="trainlog-console-") as work:
        found = measure(Path(work), int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000,
                        int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    print(json.dumps(found, indent=2))
    print(summary(found))
