"""Scale, in process: the state of N followed files, then /metrics rendered as serve renders it.

The scale benchmark (``benchmarks/scale.py``) times ``GET /metrics`` over HTTP, which a
shared machine's load makes noisy. This builds the same state in this process (the same
generated logs, serve's ``Exporter`` with its follower, its scrape-time readers and its
runtime collectors) and renders ``/metrics`` a number of times, printing the CPU time per
render: a run under ``valgrind --tool=callgrind`` counts its instructions, which do not
depend on the load (docs/benchmarks.md, "Scale: /metrics render and RSS").

With ``--new-step``, every file gets one more step line, read by the follower, before each of
the N renders (a scrape after every rank moved on): CPU per render still times the renders
only; for instructions, take a run with ``--no-render`` (the same lines read, no render) from
it.

    python -m benchmarks.scale_render DIR [--files 1024] [--renders 20] [--openmetrics] [--new-step [--no-render]]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.generate import step_line
from benchmarks.scale import STEPS_PER_FILE, write_rank_logs
from exporter.app import Exporter
from exporter.settings import load_settings


def followed_exporter(directory: Path, files: int, state_home: Path) -> Exporter:
    """serve's Exporter (not started: no server, no threads) after reading ``files`` generated rank logs once.

    ``state_home`` should be new: a checkpoint found there would be resumed, and one is written at stop().
    """
    write_rank_logs(directory, files)
    exporter = Exporter(load_settings(log_dir=[str(directory)], web_listen_address="127.0.0.1:0",
                                      xdg_state_home=state_home))
    exporter.follower.run_once()
    return exporter


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("directory", type=Path)
    arguments.add_argument("--files", type=int, default=1024)
    arguments.add_argument("--renders", type=int, default=20)
    arguments.add_argument("--openmetrics", action="store_true")
    arguments.add_argument("--new-step", action="store_true", help="a step line more in every file before each render")
    arguments.add_argument("--no-render", action="store_true", help="with --new-step: read the lines, render nothing")
    options = arguments.parse_args()
    with tempfile.TemporaryDirectory() as state_home:
        _measure(options, followed_exporter(options.directory, options.files, Path(state_home)))


def _measure(options: argparse.Namespace, exporter: Exporter) -> None:
    try:
        started = time.process_time()
        body = exporter.metrics(options.openmetrics)  # the first render: every series' lines written
        first = time.process_time() - started
        cpu = 0.0
        for render in range(options.renders):
            if options.new_step:
                _new_step(options.directory, options.files, STEPS_PER_FILE + 1 + render)
                exporter.follower.run_once()
            if not options.no_render:
                started = time.process_time()
                exporter.metrics(options.openmetrics)
                cpu += time.process_time() - started
    finally:
        exporter.http.start()  # stop() joins the server's thread (its worker threads run since it was made)
        exporter.stop()
    rendered = options.renders if not options.no_render else 0
    print(json.dumps({"files": options.files, "bytes": len(body),
                      "samples": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
                      "first_render_cpu_ms": 1000 * first,
                      "cpu_ms_per_render": 1000 * cpu / rendered if rendered else None}))


def _new_step(directory: Path, files: int, step: int) -> None:
    for rank in range(files):
        with (directory / f"worker_{rank}.log").open("a") as log:
            log.write(step_line(step, 1000, 3.0 - step / 10, 1.0 + rank / files) + "\n")


if __name__ == "__main__":
    main()
