"""Run every benchmark of trainlog-exporter in one go and judge the targets.

    python -m benchmarks.run           # full run (a few minutes), exits 1 when a target is missed
    python -m benchmarks.run --smoke   # a few seconds: proves the script works, judges nothing
    python benchmarks/run.py           # the same: runs itself again as the module above

Targets are ratios measured in the same run on the same files (absolute numbers are
context only: shared machines are noisy). Prints a table, writes results/latest.json
(results/smoke.json for a smoke run).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Started as a file: the package imports below need the repository root on the module path.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks.run", *sys.argv[1:]], environment)

import argparse
import json
import platform
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import catchup, fleet, formats, hostile, real_console, repeats, scale, scrapers, steady
from benchmarks.generate import LogShape, write_worker_log
from benchmarks.measure import run_measured, warm
from tests.support.exporter_process import exporter_command

RESULTS = Path(__file__).resolve().parent / "results"
Results = dict[str, Any]  # one run's measurements by benchmark, as written to results/*.json


@dataclass(frozen=True, slots=True)
class Size:
    """How big each benchmark is."""

    catchup_lines: int
    catchup_rounds: int  # each contender's best of as many interleaved runs: a shared machine's pauses hit any one
    steady_seconds: float
    steady_ranks: int
    noise_per_second: int
    chatter_per_second: int  # heavy chatter: noise lines a second per rank (an NCCL_DEBUG=INFO console)
    chatter_seconds: float
    scale_files: int
    scrape_clients: int
    scrape_seconds: float
    scrape_ranks: int
    fleet_nodes: int  # exporter processes of 8 ranks each, scraped by one Prometheus
    fleet_steps: int
    hostile_seconds: float  # each of the three hostile loads (benchmarks/hostile.py)
    trickling: int  # connections trickling request heads
    flooding: int  # clients sending wrong passwords
    sending: int  # clients sending 1 GiB bodies
    repeats: int  # copies of one step line (benchmarks/repeats.py)
    format_lines: int  # each format's real log continued to as many lines (benchmarks/formats.py)


FULL = Size(catchup_lines=2_000_000, catchup_rounds=5, steady_seconds=60, steady_ranks=8, noise_per_second=100,
            chatter_per_second=1000, chatter_seconds=30,
            scale_files=1024, scrape_clients=50, scrape_seconds=10, scrape_ranks=8, fleet_nodes=32, fleet_steps=200,
            hostile_seconds=20, trickling=256, flooding=32, sending=16, repeats=10_000_000,
            format_lines=1_000_000)
SMOKE = Size(catchup_lines=20_000, catchup_rounds=1, steady_seconds=2, steady_ranks=2, noise_per_second=20,
             chatter_per_second=5000, chatter_seconds=6,  # a few 10 ms CPU ticks (1,000 a second for 3 s: one)
             scale_files=16, scrape_clients=50, scrape_seconds=2, scrape_ranks=8, fleet_nodes=2, fleet_steps=20,
             hostile_seconds=2, trickling=16, flooding=4, sending=2, repeats=20_000, format_lines=2_000)


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    measured: float | None  # None: could not be measured in this run
    limit: float
    higher_is_better: bool
    unit: str

    @property
    def holds(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured >= self.limit if self.higher_is_better else self.measured < self.limit

    def row(self) -> str:
        comparison = ">=" if self.higher_is_better else "<"
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[self.holds]
        value = "not measured" if self.measured is None else f"{self.measured:.3g}{self.unit}"
        return f"| {self.name} | {value} | {comparison} {self.limit:g}{self.unit} | {verdict} |"


def targets(results: Results) -> list[Target]:
    """Every target of the performance issue, from one run's results."""
    rates = {name: row["lines_per_second"] for name, row in results["catchup"].items()}
    exporter = rates["exporter"]
    consoles = results["real_console"]
    return [
        Target("catch-up: exporter / mtail lines per second", exporter / rates["mtail"] if "mtail" in rates else None,
               10, True, "x"),
        Target("catch-up: exporter / grep|awk lines per second", exporter / rates["grep_awk"], 1, True, "x"),
        Target("catch-up: wc -l / exporter lines per second", rates["wc"] / exporter, 10, False, "x"),
        Target("steady: exporter CPU, share of one core", 100 * results["steady"]["cpu_share_of_one_core"], 1, False,
               "%"),
        Target("steady: write to /metrics latency p99", results["steady"]["latency_p99_ms"], 250, False, " ms"),
        Target(f"heavy chatter ({results['chatter']['lines_per_second']:,} lines/s over {results['chatter']['ranks']} "
               "ranks): exporter CPU, share of one core", 100 * results["chatter"]["cpu_share_of_one_core"], 5,
               False, "%"),
        Target(f"scale: RSS with {results['scale']['files']} files", results["scale"]["rss_mb"], 80, False, " MB"),
        Target(f"scale: /metrics render with {results['scale']['files']} files", results["scale"]["render_median_ms"],
               50, False, " ms"),
        Target(f"scrapers: /metrics p99 with {results['scrapers']['exporter']['clients']} scrapers",
               results["scrapers"]["exporter"]["p99_ms"], 1000, False, " ms"),
        Target("scrapers: failed scrapes", results["scrapers"]["exporter"]["errors"], 1, False, ""),
        Target(f"hostile: /metrics p99 with credentials while {results['hostile']['trickle']['trickling']} "
               "connections trickle heads", results["hostile"]["trickle"]["p99_ms"], 250, False, " ms"),
        Target(f"hostile: /metrics p99 with credentials while {results['hostile']['flood']['flooding']} clients "
               "send wrong passwords", results["hostile"]["flood"]["p99_ms"], 250, False, " ms"),
        Target(f"hostile: peak RSS above idle while {results['hostile']['bodies']['sending']} clients send 1 GiB "
               "bodies", results["hostile"]["bodies"]["peak_above_idle_mb"], 16, False, " MiB"),
        Target(f"repeats: RSS after {results['repeats']['repeats']:,} copies of one step line, above a 1,000-line "
               "log's", results["repeats"]["after_repeats"]["rss_mb"] - results["repeats"]["after_baseline"]["rss_mb"],
               16, False, " MiB"),
        Target(f"repeats: checkpoint after {results['repeats']['repeats']:,} copies / after 1,000 lines",
               results["repeats"]["after_repeats"]["checkpoint_bytes"]
               / max(1, results["repeats"]["after_baseline"]["checkpoint_bytes"]), 1.5, False, "x"),
        # The fast path serves every real log (issue 29): a prefixed log, real consoles, analyze's CSV.
        Target("prefixed catch-up / unprefixed catch-up lines per second",
               results["catchup_prefixed"]["lines_per_second"] / _beside(results["catchup_prefixed"], exporter),
               0.5, True, "x"),
        Target("prefixed catch-up: lines per second", results["catchup_prefixed"]["lines_per_second"] / 1e6, 1, True,
               " M"),
        *(target for name, row in consoles.items() if not row.get("chatter") for target in (
            Target(f"real console {name}: catch-up / unprefixed catch-up lines per second",
                   row["contenders"]["exporter"]["lines_per_second"]
                   / row["contenders"].get("unprefixed", {"lines_per_second": exporter})["lines_per_second"],
                   0.5, True, "x"),
            Target(f"real console {name}: catch-up lines per second",
                   row["contenders"]["exporter"]["lines_per_second"] / 1e6, 1, True, " M"),
            Target(f"real console {name}: analyze --csv lines per second",
                   row["contenders"]["analyze_csv"]["lines_per_second"] / 1e6, 1, True, " M"),
            Target(f"real console {name}: analyze --format json wall / grep|awk wall",
                   row["contenders"]["analyze_json"]["wall_seconds"] / row["contenders"]["grep_awk"]["wall_seconds"],
                   2, False, "x"))),
        # Every format's step lines at block speed (issue 29): the consoles' floor, on a real log of each.
        *(Target(f"format {name}: catch-up lines per second", row["contenders"]["exporter"]["lines_per_second"] / 1e6,
                 1, True, " M") for name, row in results["formats"].items()),
        Target("analyze --csv: lines per second", results["analyze_csv"]["lines_per_second"] / 1e6, 1, True, " M"),
        Target("analyze: wall seconds / grep|awk wall seconds",
               results["analyze"]["wall_seconds"] / results["catchup"]["grep_awk"]["wall_seconds"], 2, False, "x"),
    ]


def measure_analyze(log: Path, shape: LogShape, rounds: int, csv: Path | None = None) -> dict[str, object]:
    """``analyze LOG --format json`` (with ``csv``: ``--csv CSV`` too), best of ``rounds``, its report checked
    against what the generator wrote (and the CSV's rows: one per step line)."""
    best = None
    for _ in range(rounds):
        warm(log)
        result = run_measured(exporter_command("analyze", str(log), "--format", "json",
                                               *(("--csv", str(csv)) if csv else ())))
        if csv is not None and (rows := csv.read_text().count("\n") - 1) != shape.steps:
            raise AssertionError(f"analyze --csv: {rows} rows, expected {shape.steps}")
        (run,) = json.loads(result.stdout)["runs"]
        (rank,) = run["ranks"]
        if (rank["last_step"], rank["lines"], rank["errors"].get("traceback", 0), rank["errors"].get("oom", 0)) != (
                shape.steps, shape.lines, shape.tracebacks, shape.ooms):
            raise AssertionError(f"analyze report: {rank}, expected {shape}")
        if best is None or result.wall_seconds < best.wall_seconds:
            best = result
    assert best is not None
    return {"wall_seconds": best.wall_seconds, "cpu_seconds": best.cpu_seconds,
            "max_rss_mb": None if best.max_rss_kb is None else best.max_rss_kb / 1024,
            "lines_per_second": shape.lines / best.wall_seconds}


def machine() -> dict[str, object]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "load_average_1m_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "kernel": platform.release(),
        "mtail": _first_line(["mtail", "--version"]),
        "wc": _first_line(["wc", "--version"]),
    }


def _first_line(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None


def _beside(row: dict, unprefixed: float) -> float:
    """The unprefixed catch-up's lines a second in the rounds ``row`` was measured in (catchup.Yardstick), else the
    catch-up's own (a result of a run before the yardstick)."""
    return row.get("unprefixed_beside", {"lines_per_second": unprefixed})["lines_per_second"]


def run(size: Size, workdir: Path) -> Results:
    started = time.time()
    log = workdir / "catchup" / "worker_0.log"
    log.parent.mkdir(parents=True)
    print(f"generating {size.catchup_lines} lines ...", file=sys.stderr)
    shape = write_worker_log(log, size.catchup_lines)
    results: Results = {"machine": machine(), "size": asdict(size), "log": asdict(shape)}
    print("catch-up ...", file=sys.stderr)
    results["catchup"] = catchup.measure(log, shape, size.catchup_rounds)
    prefixed_log = workdir / "prefixed" / "worker_0.log"
    prefixed_log.parent.mkdir()
    prefixed_shape = write_worker_log(prefixed_log, size.catchup_lines, prefix=catchup.PREFIX)
    yardstick = catchup.Yardstick(log, shape)
    results["catchup_prefixed"] = catchup.measure_prefixed(prefixed_log, prefixed_shape, size.catchup_rounds,
                                                           yardstick)
    prefixed_log.unlink()
    print("real consoles ...", file=sys.stderr)
    results["real_console"] = real_console.measure(workdir / "consoles", size.catchup_lines, size.catchup_rounds,
                                                   yardstick)
    print("formats ...", file=sys.stderr)
    results["formats"] = formats.measure(workdir / "formats", size.format_lines, 1)
    print("steady state ...", file=sys.stderr)
    results["steady"] = steady.measure(workdir / "steady", size.steady_ranks, size.noise_per_second,
                                       size.steady_seconds)
    print("heavy chatter ...", file=sys.stderr)
    results["chatter"] = steady.measure(workdir / "chatter", size.steady_ranks, size.chatter_per_second,
                                        size.chatter_seconds)
    print("scale ...", file=sys.stderr)
    results["scale"] = scale.measure(workdir / "scale", size.scale_files)
    print("scrapers ...", file=sys.stderr)
    results["scrapers"] = scrapers.measure(workdir / "scrapers", size.scrape_ranks, size.scrape_clients,
                                           size.scrape_seconds)
    print(f"fleet of {size.fleet_nodes} exporters ...", file=sys.stderr)
    results["fleet"] = fleet.measure(workdir / "fleet", size.fleet_nodes, size.fleet_steps)
    results["fleet"]["per_rank"] = fleet.per_rank(results["fleet"])
    print("hostile clients ...", file=sys.stderr)
    results["hostile"] = hostile.measure(workdir / "hostile", size.trickling, size.flooding, size.sending,
                                         size.hostile_seconds)
    print(f"{size.repeats:,} repeats of one step line ...", file=sys.stderr)
    results["repeats"] = repeats.measure(workdir / "repeats", size.repeats)
    print("analyze ...", file=sys.stderr)
    results["analyze"] = measure_analyze(log, shape, size.catchup_rounds)
    results["analyze_csv"] = measure_analyze(log, shape, size.catchup_rounds, csv=workdir / "steps.csv")
    results["seconds"] = time.time() - started
    return results


def report(results: Results, judged: list[Target]) -> str:
    lines = ["| catch-up contender | lines/s | wall s | CPU s | peak RSS MB |", "| --- | ---: | ---: | ---: | ---: |"]
    for row in sorted(results["catchup"].values(), key=lambda row: -row["lines_per_second"]):
        rss = "n/a" if row["max_rss_mb"] is None else f"{row['max_rss_mb']:.1f}"
        lines.append(f"| {row['what']} | {row['lines_per_second']:,.0f} | {row['wall_seconds']:.3f} | "
                     f"{row['cpu_seconds']:.3f} | {rss} |")
    lines += [
        "",
        _exporter_summary(results["catchup"]["exporter"], results["log"]["lines"]),
        _prefixed_summary(results["catchup_prefixed"], results["catchup"]["exporter"]),
        _steady_summary(results["steady"]),
        "heavy chatter, " + _steady_summary(results["chatter"]),
        _scale_summary(results["scale"]),
        _scrapers_summary(results["scrapers"]),
        _fleet_summary(results["fleet"]),
        _hostile_summary(results["hostile"]),
        _repeats_summary(results["repeats"]),
        _analyze_summary(results["analyze"], results["catchup"]),
        "analyze --format json --csv: " + _analyze_summary(results["analyze_csv"], results["catchup"]),
        real_console.summary(results["real_console"]),
        formats.summary(results["formats"]),
        "",
        "| target | measured | limit | verdict |",
        "| --- | ---: | ---: | --- |",
        *(target.row() for target in judged),
    ]
    return "\n".join(lines)


def _prefixed_summary(row: dict, unprefixed: dict) -> str:
    slower = _beside(row, unprefixed["lines_per_second"]) / row["lines_per_second"]
    return (f"exporter catch-up of {row['lines']:,} lines behind torchrun's {catchup.PREFIX.strip()} prefix: "
            f"{row['lines_per_second']:,.0f} lines/s, wall {row['wall_seconds']:.3f} s ({slower:.1f}x slower a line "
            f"than unprefixed in the same rounds)")


def _exporter_summary(row: dict, lines: int) -> str:
    seconds = row["seconds"]
    native = "; ".join(f"{part} {'native' if built else 'Python'}" for part, built in row["speedups"].items()
                       if part != "AVX2")
    native += ", with AVX2" if row["speedups"]["AVX2"] else ", byte-wise scan"
    return (f"exporter catch-up: imports {seconds['imports']:.3f} s, reading {seconds['reading']:.3f} s "
            f"({lines / seconds['reading']:,.0f} lines/s once started); {native}")


def _steady_summary(row: dict) -> str:
    return (f"steady: {row['ranks']} ranks, {row['lines_per_second']} lines/s: "
            f"CPU {100 * row['cpu_share_of_one_core']:.2f}% of a core, RSS {row['rss_mb']:.1f} MB, "
            f"latency p50 {row['latency_p50_ms']:.0f} ms, p99 {row['latency_p99_ms']:.0f} ms "
            f"({row['latency_samples']} step lines)")


def _scale_summary(row: dict) -> str:
    return (f"scale: {row['files']} files: RSS {row['rss_mb']:.1f} MB, /metrics ({row['metrics_samples']} samples, "
            f"{row['metrics_bytes'] / 1e6:.1f} MB) median {row['render_median_ms']:.1f} ms, "
            f"max {row['render_max_ms']:.1f} ms")


def _scrapers_summary(row: dict) -> str:
    def one(name: str, load: dict) -> str:
        return (f"{name} {load['requests']} scrapes, p50 {load['p50_ms']:.0f} ms, p99 {load['p99_ms']:.0f} ms, "
                f"max {load['max_ms']:.0f} ms, {load['errors']} errors")
    exporter, peer = row["exporter"], row["prometheus_client"]
    return (f"scrapers: {exporter['clients']} for {exporter['seconds']:g} s on {row['ranks']} ranks: "
            f"{one('exporter', exporter)}; {one('prometheus-client start_http_server', peer)}")


def _fleet_summary(row: dict) -> str:
    slowest = max(row["dashboards"].items(), key=lambda item: item[1]["total_ms"])
    groups = ", ".join(f"{group} {ms:.1f}" for group, ms in sorted(row["rule_group_ms"].items()))
    return (f"fleet: {row['nodes']} exporters x 8 ranks, one Prometheus: rule evaluation "
            f"{row['rule_evaluation_ms']:.1f} ms per cycle ({groups}); "
            f"dashboard {slowest[0]}: {slowest[1]['queries']} queries in {slowest[1]['total_ms']:.0f} ms "
            f"(slowest {slowest[1]['max_ms']:.1f} ms); {row['per_rank']['series']:.1f} series and "
            f"{row['per_rank']['samples_per_scrape']:.1f} samples per scrape per rank; Prometheus RSS "
            f"{row['prometheus_rss_mb']:.0f} MB (idle {row['idle_prometheus_rss_mb']:.0f} MB)")


def _hostile_summary(row: dict) -> str:
    def one(load: dict) -> str:
        return (f"{load['scrapes']} scrapes with credentials, p50 {load['p50_ms']:.0f} ms, "
                f"p99 {load['p99_ms']:.0f} ms, max {load['max_ms']:.0f} ms, {load['failures']} failed")
    trickle, flood, bodies = row["trickle"], row["flood"], row["bodies"]
    return (f"hostile: {trickle['trickling']} connections trickling heads ({trickle['closed_and_reopened']} closed at "
            f"the deadline and reopened): {one(trickle)}; {flood['flooding']} clients with wrong passwords "
            f"(answers {flood['answers']}): {one(flood)}; {bodies['sending']} clients sending 1 GiB bodies "
            f"({bodies['connections']} connections, each closed after the answer, {bodies['bytes_accepted_mb']:.0f} MB "
            "taken by the kernels' socket buffers in all): peak RSS "
            f"{bodies['peak_above_idle_mb']:+.1f} MiB over {bodies['rss_before_kb'] / 1024:.1f} MiB, {one(bodies)}")


def _repeats_summary(row: dict) -> str:
    def one(run: dict) -> str:
        return (f"{run['lines']:,} lines read in {run['seconds']:.1f} s, RSS {run['rss_mb']:.1f} MB (peak "
                f"{run['peak_rss_mb']:.1f}), checkpoint {run['checkpoint_bytes']:,} bytes")
    return (f"repeats: one step line {row['repeats']:,} times: {one(row['after_repeats'])}; the same line 1,000 "
            f"times: {one(row['after_baseline'])}")


def _analyze_summary(row: dict, catchup: dict) -> str:
    rss = "n/a" if row["max_rss_mb"] is None else f"{row['max_rss_mb']:.1f} MB"
    return (f"analyze --format json: {row['lines_per_second']:,.0f} lines/s, wall {row['wall_seconds']:.3f} s, "
            f"CPU {row['cpu_seconds']:.2f} s, peak RSS {rss}; serve's catch-up wall "
            f"{catchup['exporter']['wall_seconds']:.3f} s, grep|awk {catchup['grep_awk']['wall_seconds']:.3f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds, no verdict on the targets")
    parser.add_argument("--output", type=Path,
                        help="JSON results (default results/latest.json, smoke.json with --smoke)")
    arguments = parser.parse_args()
    size = SMOKE if arguments.smoke else FULL
    output = arguments.output or RESULTS / ("smoke.json" if arguments.smoke else "latest.json")
    with tempfile.TemporaryDirectory(prefix="trainlog-bench-") as workdir:
        results = run(size, Path(workdir))
    judged = targets(results)
    results["targets"] = [{**asdict(target), "holds": target.holds} for target in judged]
    results["smoke"] = arguments.smoke
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(report(results, judged))
    if arguments.smoke:
        print("\nsmoke run: sizes too small to judge the targets; the script works.")
        return 0
    missed = [target.name for target in judged if not target.holds]
    if missed:
        print(f"\n{len(missed)} target(s) missed: " + "; ".join(missed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
