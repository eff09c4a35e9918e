"""Fleet: one exporter per node of 8 ranks, all scraped by one real Prometheus that evaluates the shipped rules.

``simulate`` writes one run of ``nodes x 8`` ranks, its worker logs split into a directory per
node (``node-<i>/msrun_log``, scheduler.log on node 0), and one exporter process follows each
directory on its own port, as a sidecar per pod would. Prometheus scrapes them all and
evaluates deploy/prometheus/rules/*.yml; measured, once every rule group has run a few
times:

- rule evaluation: Prometheus' own ``prometheus_rule_group_last_duration_seconds`` per group;
- the dashboards' queries (grafana/dashboards/*.json, every variable at "All") through the
  HTTP API, each timed as the median of a few answers;
- series and samples: the head series (``prometheus_tsdb_head_series``), the samples each
  scrape brings (``scrape_samples_scraped``), both per rank;
- Prometheus memory (``process_resident_memory_bytes``), and that of an idle Prometheus
  without targets, so that the memory per series can be extrapolated (docs/scaling.md).

    python -m benchmarks.fleet --nodes 32     # this part alone; benchmarks.run runs it with the others
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.simulate import RunConfig, simulate, write_run
from exporter.simulate.scenario import RANKS_PER_NODE, SCHEDULER_LOG, worker_log
from tests.support.dashboards import BUILTIN_VARIABLES, queries, substitute
from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.net import eventually, http_get
from tests.support.prometheus import PrometheusServer

RULES = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
RUN = "fleet"
SCRAPE_INTERVAL = 2  # seconds, scrapes and rule evaluations
EVALUATIONS = 5  # of every rule group before measuring
QUERY_REPEATS = 3
# Every dashboard variable at Grafana's "All" (a regex matching any value), the run at the fleet's.
ALL_VALUES = {**BUILTIN_VARIABLES, "run": RUN, "node": ".*", "rank": ".*", "job": ".*", "instance": ".*"}


def write_fleet(directory: Path, nodes: int, steps: int) -> list[Path]:
    """The log directory of each node, holding its 8 ranks' worker logs of one simulated run."""
    everything = directory / "all"
    write_run(simulate(RunConfig(ranks=nodes * RANKS_PER_NODE, steps=steps)), everything)
    log_dirs = []
    for node in range(nodes):
        log_dir = directory / f"node-{node}" / "msrun_log"
        log_dir.mkdir(parents=True)
        for rank in range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE):
            shutil.move(everything / worker_log(rank), log_dir / worker_log(rank))
        log_dirs.append(log_dir)
    shutil.move(everything / SCHEDULER_LOG, log_dirs[0] / SCHEDULER_LOG)
    return log_dirs


def prometheus_metrics(prometheus: PrometheusServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus' own /metrics: (sample name, sorted labels) -> value."""
    status, body = http_get(prometheus.url + "/metrics", timeout=10)
    assert status == 200, status
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body) for sample in family.samples}


def _of(metrics: dict, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in metrics.items() if sample == name}


def idle_prometheus_rss_mb(directory: Path) -> float:
    """Memory of a Prometheus with the same rules and nothing to scrape: the base the series add to."""
    with PrometheusServer(directory, [], rule_files=RULES, scrape_interval=f"{SCRAPE_INTERVAL}s") as idle:
        time.sleep(2 * SCRAPE_INTERVAL)
        return _of(prometheus_metrics(idle), "process_resident_memory_bytes")[()] / 2**20


def start_exporters(stack: ExitStack, log_dirs: list[Path]) -> list[ExporterProcess]:
    """One exporter per node directory, started a few at a time (each waits until it answers)."""
    def start(node: int) -> ExporterProcess:
        # Its own state file beside (not in) its log directory: "" named the working directory, which a
        # state file can no longer be.
        return ExporterProcess("--log-dir", str(log_dirs[node]), "--run", RUN, "--node", f"node-{node}",
                               "--state-file", str(log_dirs[node].parent / "exporter-state.json"),
                               ready_within=120).start()

    with ThreadPoolExecutor(max_workers=4) as pool:
        exporters = list(pool.map(start, range(len(log_dirs))))
    for exporter in exporters:
        stack.callback(exporter.stop)
    return exporters


def time_dashboard_queries(prometheus: PrometheusServer) -> dict[str, dict[str, float]]:
    """Per dashboard: how many queries, their total and slowest median answer time (ms)."""
    timings = {}
    for path in DASHBOARDS:
        medians = []
        for title, expr in queries(json.loads(path.read_text())):
            concrete = substitute(expr, ALL_VALUES)
            answers = []
            for _ in range(QUERY_REPEATS):
                begun = time.perf_counter()
                answer = prometheus.answer(concrete)
                answers.append(time.perf_counter() - begun)
                assert answer.get("status") == "success", f"{path.name}: {title}: {answer.get('error')}"
            medians.append(1000 * statistics.median(answers))
        timings[path.stem] = {"queries": len(medians), "total_ms": sum(medians), "max_ms": max(medians)}
    return timings


def measure(directory: Path, nodes: int, steps: int) -> dict[str, object]:
    ranks = nodes * RANKS_PER_NODE
    log_dirs = write_fleet(directory / "logs", nodes, steps)
    idle_mb = idle_prometheus_rss_mb(directory / "idle-prometheus")
    started = time.monotonic()
    with ExitStack() as stack:
        exporters = start_exporters(stack, log_dirs)
        exporters_started = time.monotonic() - started
        prometheus = stack.enter_context(PrometheusServer(
            directory / "prometheus", [f"127.0.0.1:{exporter.port}" for exporter in exporters], rule_files=RULES,
            scrape_interval=f"{SCRAPE_INTERVAL}s"))
        eventually(lambda: len(prometheus.query('up{job="trainlog-exporter"} == 1')) == nodes, 120, interval=0.5,
                   what=f"{nodes} exporters up")
        eventually(lambda: _evaluated(prometheus), 120, interval=0.5, what=f"{EVALUATIONS} evaluations of every group")
        metrics = prometheus_metrics(prometheus)
        dashboards = time_dashboard_queries(prometheus)
        exporter_rss_mb = statistics.median(exporter.memory_kb("VmRSS") / 1024 for exporter in exporters)
        rank_series = _value(prometheus, f'count({{__name__=~"training_.+", run="{RUN}", rank!=""}})')
        samples_per_scrape = _value(prometheus, 'sum(scrape_samples_scraped{job="trainlog-exporter"})')
    groups = {dict(labels)["rule_group"].rsplit(";", 1)[-1]: 1000 * value
              for labels, value in _of(metrics, "prometheus_rule_group_last_duration_seconds").items()}
    head_series = _of(metrics, "prometheus_tsdb_head_series")[()]
    rss_mb = _of(metrics, "process_resident_memory_bytes")[()] / 2**20
    return {
        "nodes": nodes,
        "ranks": ranks,
        "steps": steps,
        "seconds_until_exporters_answered": exporters_started,
        "exporter_rss_mb_median": exporter_rss_mb,
        "rule_group_ms": groups,
        "rule_evaluation_ms": sum(groups.values()),
        "dashboards": dashboards,
        "head_series": head_series,
        "rank_series": rank_series,
        "samples_per_scrape": samples_per_scrape,
        "prometheus_rss_mb": rss_mb,
        "idle_prometheus_rss_mb": idle_mb,
    }


def _value(prometheus: PrometheusServer, expr: str) -> float:
    """The value of an instant query that returns one sample."""
    (sample,) = prometheus.query(expr)
    return float(sample["value"][1])


def _evaluated(prometheus: PrometheusServer) -> bool:
    iterations = _of(prometheus_metrics(prometheus), "prometheus_rule_group_iterations_total")
    return bool(iterations) and min(iterations.values()) >= EVALUATIONS


def per_rank(row: dict) -> dict[str, float]:
    """What one rank costs Prometheus, from a fleet measurement (docs/scaling.md extrapolates it)."""
    ranks = row["ranks"]
    return {
        "series": row["head_series"] / ranks,
        "samples_per_scrape": row["samples_per_scrape"] / ranks,
        "memory_kb": 1024 * max(0.0, row["prometheus_rss_mb"] - row["idle_prometheus_rss_mb"]) / ranks,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workdir", type=Path, required=True)
    options = parser.parse_args()
    row = measure(options.workdir, options.nodes, options.steps)
    print(json.dumps({**row, "per_rank": per_rank(row)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
