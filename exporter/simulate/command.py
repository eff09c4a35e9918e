"""``trainlog-exporter simulate``: write a fire-drill run to a directory."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

from exporter.simulate.incidents import describe_kinds, parse_incident
from exporter.simulate.scenario import STEP_MS, RunConfig, plan_run, simulate
from exporter.simulate.writer import write_run


def add_simulate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="directory to write worker_{i}.log and scheduler.log into (msrun layout)")
    parser.add_argument("--ranks", type=int, default=8, metavar="N", help="number of ranks (default 8)")
    parser.add_argument("--steps", type=int, default=1000, metavar="N", help="training steps (default 1000)")
    parser.add_argument("--step-interval", dest="step_interval", type=float, default=0.0, metavar="SECONDS",
                        help="write one step every SECONDS, live like a trainer (default 0: everything at once)")
    parser.add_argument("--inject", action="extend", nargs="+", default=[], metavar="SPEC",
                        help=f"incident to inject (repeatable): {describe_kinds()}")
    parser.add_argument("--pp-stages", dest="pp_stages", type=int, default=1, metavar="K",
                        help="pipeline stages: only the last stage's ranks print step records (default 1)")
    parser.add_argument("--seed", type=int, default=0, metavar="N",
                        help="random seed: same seed, same numbers (default 0)")
    parser.add_argument("--mode", choices=("pynative", "graph"), default=None,
                        help="step records as PyNative LossCallback or graph-mode MFLossMonitor prints them (default: "
                             "PyNative, graph mode when diverge or norm_shift print TrainingStateMonitor values; "
                             "--mode pynative prints those values beside LossCallback records)")


def run_simulate(out: Path, ranks: int, steps: int, step_interval: float, inject: list[str],
                 pp_stages: int, seed: int, mode: str | None = None) -> int:
    """The subcommand; returns the exit status (2 for a bad option or --inject spec)."""
    try:
        if step_interval < 0:
            raise ValueError(f"--step-interval must not be negative, got {step_interval}")
        incidents = tuple(parse_incident(spec) for spec in inject)
        seconds_per_slot = step_interval or STEP_MS / 1000
        # Written at once, the run ends now; written live, it starts now.
        start = datetime.now() - (timedelta(0) if step_interval else timedelta(seconds=steps * seconds_per_slot))
        config = RunConfig(ranks, steps, incidents, pp_stages, seed, start.replace(microsecond=0), seconds_per_slot,
                           mode)
        config.check()
    except ValueError as error:
        print(f"trainlog-exporter simulate: {error}", file=sys.stderr)
        return 2
    pace = f"one step every {step_interval:g}s" if step_interval else "all at once"
    specs = ", ".join(incident.spec for incident in incidents) or "none"
    print(f"simulate: {ranks} ranks x {steps} steps into {out}, {pace}; incidents: {specs}", file=sys.stderr)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        completed = write_run(simulate(config), out, step_interval, stop)
    except OSError as error:
        print(f"trainlog-exporter simulate: cannot write to {out}: {error.strerror or error}", file=sys.stderr)
        return 1
    if completed and step_interval and plan_run(config).hung:
        # A hung trainer is alive and silent: stay so, for --process-pattern and stall alerts.
        print("simulate: every rank is stuck; staying alive without writing (stop with Ctrl-C)", file=sys.stderr)
        stop.wait()
    return 0
