"""``trainlog-exporter analyze PATH...``: the post-mortem of finished logs."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import TextIO

from exporter.analyze import plot
from exporter.analyze.csv_out import CsvError, StepCsv
from exporter.analyze.engine import Analysis
from exporter.analyze.render import RENDERERS
from exporter.analyze.sources import Resolved, resolve, within_series_cap
from exporter.follow.stream import STDIN, SourceError, standard_input
from exporter.state import Limits

PROGRAM = "trainlog-exporter: analyze"
# With the cyclic collector off, how many bytes read between two collections of the garbage cycles (few: 24
# objects in all after the 2,000,000-line torchrun console), so that memory stays bounded by the findings.
CYCLES_COLLECTED_EVERY = 1 << 30
DESCRIPTION = "Post-mortem of finished logs: where the loss went wrong, on which rank, and why."


def add_analyze_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="log directory, log file (its rotated .1, .2.gz generations are read first) or - "
                             "for standard input; several nodes' directories at once")
    parser.add_argument("--format", choices=tuple(RENDERERS), default="text", help="report format (default text)")
    parser.add_argument("--csv", metavar="FILE", help="write the step series: a row per run, node, rank and step")
    parser.add_argument("--plot", metavar="FILE.png", help="draw loss, lr, grad norm and step time, findings marked")
    parser.add_argument("--run", help="run label (default: the log directory's parent name)")


def analyze_main(argv: list[str]) -> int:
    """``trainlog-exporter analyze ARGS``: parse the arguments and run."""
    parser = argparse.ArgumentParser(prog="trainlog-exporter analyze", description=DESCRIPTION)
    add_analyze_options(parser)
    arguments = parser.parse_args(argv)
    # analyze keeps every finding for its report: each collection of the young objects traverses the findings made
    # since the last (with the default, one every 700 new containers: a quarter of the time of a log with 60,000
    # findings; one every 50,000: 0.1 s of 2.3). The analysis makes few cycles: it collects them itself, by the
    # bytes read (_Reading).
    gc.disable()
    try:
        return run_analyze(arguments.paths, arguments.format, arguments.csv, arguments.plot, arguments.run)
    finally:
        gc.enable()


def run_analyze(paths: list[str], format: str = "text", csv: str | None = None, plot_file: str | None = None,
                run: str | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None,
                stderr: TextIO | None = None) -> int:
    """Analyze and print the report; 0 when the analysis ran, 2 for bad input (one line on stderr)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    if plot_file is not None and not plot.available():
        print(f"{PROGRAM}: {plot.INSTALL_HINT}", file=err)
        return 2
    if paths.count(STDIN) > 1:
        print(f"{PROGRAM}: standard input (-) can be given once", file=err)
        return 2
    if STDIN in paths and stdin is None:
        try:
            standard_input()
        except SourceError as error:
            print(f"{PROGRAM}: {error}", file=err)
            return 2
    resolved = resolve(paths, run)
    if not resolved.sources:
        for problem in resolved.problems:
            print(f"{PROGRAM}: {problem}", file=err)
        return 2
    try:
        rows = StepCsv(csv) if csv else None
        try:
            return _analyze(resolved, rows, format, plot_file, stdin, out, err)
        finally:
            if rows is not None:
                rows.discard()  # the scratch file of an analysis that did not finish
    except CsvError as error:
        print(f"{PROGRAM}: {error}", file=err)
        return 2


def _analyze(resolved: Resolved, rows: StepCsv | None, format: str, plot_file: str | None, stdin: TextIO | None,
             out: TextIO, err: TextIO) -> int:
    """The analysis of the sources: its report to ``out``, its rows to ``rows``."""
    points = plot.PlotData() if plot_file else None
    analysis = Analysis(rows=rows.add if rows else None, points=points.add if points else None)
    analysis.warnings += resolved.problems
    sources, capped = within_series_cap(resolved.sources, Limits().max_series)
    if capped is not None:
        analysis.warnings.append(capped)
    progress = _Progress(err, len(sources)) if err.isatty() else None
    reading = _Reading(progress)
    failed = 0
    for number, source in enumerate(sources, 1):
        read = analysis.add(source, (stdin.buffer if stdin else standard_input()) if source.name == STDIN else None,
                            progress=reading.block_read)
        failed += not read
        if progress:
            progress.file_done(number)
    if progress:
        progress.clear()
    if failed == len(sources):
        for warning in analysis.warnings:
            print(f"{PROGRAM}: {warning}", file=err)
        return 2
    for warning in analysis.warnings:
        print(f"{PROGRAM}: warning: {warning}", file=err)
    report = analysis.report()
    analysis.close()
    try:
        out.write(RENDERERS[format](report))
        out.flush()
    except BrokenPipeError:  # analyze ... | head
        _silence_stdout()
    if rows is not None:
        rows.close()
    if points is not None and plot_file is not None:
        plot.write_plot(plot_file, points, report)
    return 0


class _Reading:
    """What follows each block read: the progress line, and with the cyclic collector off (analyze_main) a
    collection of the cycles every CYCLES_COLLECTED_EVERY bytes."""

    def __init__(self, progress: _Progress | None) -> None:
        self._progress = progress
        self._collected_at = 0  # the bytes read at the last collection

    def block_read(self, name: str, bytes_read: int) -> None:
        """``bytes_read``: of all the sources so far."""
        if self._progress is not None:
            self._progress.show(name, bytes_read)
        if bytes_read - self._collected_at >= CYCLES_COLLECTED_EVERY and not gc.isenabled():
            gc.collect()
            self._collected_at = bytes_read


class _Progress:
    """One line on a terminal's standard error, redrawn at most five times a second."""

    def __init__(self, stream: TextIO, files: int) -> None:
        self._stream = stream
        self._files = files
        self._done = 0
        self._shown = 0.0

    def show(self, name: str, bytes_read: int) -> None:
        now = time.monotonic()
        if now - self._shown < 0.2:
            return
        self._shown = now
        self._stream.write(f"\ranalyze: {self._done}/{self._files} files, {bytes_read / 1e6:,.0f} MB read ({name})"
                           "\033[K")
        self._stream.flush()

    def file_done(self, number: int) -> None:
        self._done = number

    def clear(self) -> None:
        self._stream.write("\r\033[K")
        self._stream.flush()


def _silence_stdout() -> None:
    # Python flushes stdout again at exit: point it at /dev/null so that raises nothing.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
