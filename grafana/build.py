#!/usr/bin/env python3
"""Build the Grafana dashboards from code with grafana-foundation-sdk.

    python grafana/build.py            # write grafana/dashboards/*.json
    python grafana/build.py --check    # exit 1 when the committed JSON differs from a fresh build
    python grafana/build.py --print    # print {file name: dashboard} as one JSON document

The JSON files are committed so users can import them without Python; a test keeps them
equal to this code. Metric and alert names are the contracts of DESIGN.md 3.3 and 3.4.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import yaml
from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    dashboard,
    prometheus,
    stat,
    statushistory,
    table,
    text,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

from exporter.thresholds import STALL_FLOOR_SECONDS, STRAGGLER_FACTOR

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"

# The provisioned datasource (grafana/provisioning/datasources/prometheus.yaml) has this uid;
# panels use the ${datasource} variable so another Prometheus can be picked in the UI.
DATASOURCE_UID = "prometheus"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["trainlog"]

OVERVIEW_UID = "trainlog-overview"
RANKS_UID = "trainlog-ranks"
EXPORTER_UID = "trainlog-exporter"

RUNBOOK_URL = "https://github.com/trainlog-exporter/trainlog-exporter/blob/main/docs/runbooks/{}.md"
RUNBOOKS_INDEX = "https://github.com/trainlog-exporter/trainlog-exporter/tree/main/docs/runbooks"
RULES_DIR = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "rules"


def shipped_alert_names() -> tuple[str, ...]:
    """Every alert of deploy/prometheus/rules, the main file first: the runbook list follows the rules."""
    files = sorted(RULES_DIR.glob("*.yml"), key=lambda path: (path.name != "trainlog-alerts.yml", path.name))
    return tuple(rule["alert"] for path in files
                 for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"] if "alert" in rule)


ALERT_NAMES = shipped_alert_names()

# Label selectors. The rank variable's "All" is ".+": it keeps every rank and leaves out
# scheduler.log, whose series have no rank label.
RUN = 'run="$run"'
SELECTED = 'run="$run", node=~"$node", rank=~"$rank"'
WORKERS = 'run="$run", rank!=""'
# ExporterDown carries no run label: "$run|" keeps it visible on every run's dashboard.
FIRING = 'ALERTS{alertstate="firing", alertname=~"Training.*", run=~"$run|"}'
EXPORTERS = 'job=~"$job", instance=~"$instance"'

# Seconds without a log line before a rank turns yellow / red (the floor of the stall threshold), where a panel
# shows seconds; and the share of the rank's own stall threshold (training_stall_threshold_seconds, learned from
# its pace, never below the floor: as trainlog:rank:silence_over_threshold_seconds) where it shows that.
SILENCE_WARNING_SECONDS = 60
SILENCE_CRITICAL_SECONDS = STALL_FLOOR_SECONDS
SILENCE_WARNING_SHARE = 0.5
SILENCE_CRITICAL_SHARE = 1.0
# Step time relative to the run's median at which a rank turns yellow / red (stragglers).
STRAGGLER_WARNING_RATIO = 1.2
STRAGGLER_CRITICAL_RATIO = STRAGGLER_FACTOR
# How many ranks the per-rank panels draw at most: readable at 8 ranks and at 1024.
TOP_RANKS = 5
TOP_RANKS_TABLE = 20

NO_LOSS = "no loss (pipeline stage that prints none)"


# ---------------------------------------------------------------- building blocks


def query(expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    """A range query (an instant table query when instant=True)."""
    target = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)
    if instant:
        return target.instant().format(PromQueryFormat.TABLE)
    return target.range()


def queries(*targets: tuple[str, str]) -> list[prometheus.Dataquery]:
    """Range queries from (expr, legend) pairs, with refIds A, B, C, ..."""
    return [query(expr, legend, chr(ord("A") + index)) for index, (expr, legend) in enumerate(targets)]


def place(panel, title: str, description: str, width: int, height: int, unit: str | None = None):
    """Title, description, datasource, size and unit: what every panel sets."""
    panel = panel.title(title).description(description).datasource(DATASOURCE).span(width).height(height)
    return panel.unit(unit) if unit else panel


def steps(*pairs: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    """Absolute thresholds; the first pair's value is None (the base colour)."""
    return dashboard.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(
        [models.Threshold(value=value, color=color) for value, color in pairs]
    )


def value_text(texts: dict[str, tuple[str, str]]) -> models.ValueMap:
    """A value mapping: value -> (text, colour)."""
    return models.ValueMap(options={value: models.ValueMappingResult(text=label, color=color)
                                    for value, (label, color) in texts.items()})


def link(title: str, url: str, *, new_tab: bool = False) -> dashboard.DashboardLink:
    return dashboard.DashboardLink(title).type(models.DashboardLinkType.LINK).url(url).target_blank(new_tab)


def dashboard_url(uid: str, *extra_params: str) -> str:
    """A link to another trainlog dashboard keeping the time range, datasource and run."""
    params = ["${__url_time_range}", "${datasource:queryparam}", "${run:queryparam}", *extra_params]
    return f"/d/{uid}/{uid}?" + "&".join(params)


def rank_drilldown() -> dashboard.DashboardLink:
    """A data link from a rank's series to that rank in the ranks dashboard."""
    return link("Rank ${__field.labels.rank} on ${__field.labels.node}: per-rank view",
                dashboard_url(RANKS_UID, "var-node=${__field.labels.node}", "var-rank=${__field.labels.rank}"))


def ranks_panel_link() -> dashboard.DashboardLink:
    return link("Per-rank view (Training ranks dashboard)", dashboard_url(RANKS_UID))


def overview_panel_link() -> dashboard.DashboardLink:
    return link("Run view (Training overview dashboard)", dashboard_url(OVERVIEW_UID))


def series_panel(title: str, description: str, width: int, height: int, unit: str, *targets: tuple[str, str]):
    """A time series panel with a multi-series tooltip and a bottom legend."""
    panel = place(timeseries.Panel(), title, description, width, height, unit)
    return (panel.targets(queries(*targets))
            .legend(common.VizLegendOptions().display_mode(common_models.LegendDisplayMode.LIST)
                    .placement(common_models.LegendPlacement.BOTTOM).show_legend(True))
            .tooltip(common.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                     .sort(common_models.SortOrder.DESCENDING))
            .line_width(1).fill_opacity(0).show_points(common_models.VisibilityMode.NEVER)
            .span_nulls(False))


def bars_panel(title: str, description: str, width: int, height: int, *targets: tuple[str, str]):
    """Counts per interval as bars: incidents over time."""
    return (series_panel(title, description, width, height, "none", *targets)
            .draw_style(common_models.GraphDrawStyle.BARS).fill_opacity(80)
            .stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL))
            .no_value("none in this time range"))


def stat_panel(title: str, description: str, width: int, unit: str, *targets: tuple[str, str]):
    panel = place(stat.Panel(), title, description, width, 4, unit)
    return (panel.targets(queries(*targets))
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
            .graph_mode(common_models.BigValueGraphMode.NONE)
            .color_mode(common_models.BigValueColorMode.VALUE))


def table_panel(title: str, description: str, width: int, height: int, *targets: tuple[str, str],
                hide: tuple[str, ...] = (), rename: dict[str, str] | None = None):
    """Instant queries as one table: merged on their labels, helper columns hidden."""
    panel = place(table.Panel(), title, description, width, height)
    instant = [query(expr, legend, chr(ord("A") + index), instant=True) for index, (expr, legend) in enumerate(targets)]
    exclude = dict.fromkeys(("Time", "__name__", "job", "instance", *hide), True)
    return (panel.targets(instant)
            .with_transformation(models.DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(models.DataTransformerConfig(
                id_val="organize", options={"excludeByName": exclude, "renameByName": rename or {}}))
            .footer(common.TableFooterOptions().show(False).reducer(["sum"]))
            .cell_height(common_models.TableCellHeight.SM))


def colour_cells(column: str, unit: str | None = None) -> tuple[models.MatcherConfig, list[models.DynamicConfigValue]]:
    """An override colouring a table column's cells by the panel thresholds."""
    properties = [models.DynamicConfigValue(id_val="custom.cellOptions",
                                            value={"type": "color-background", "mode": "basic"})]
    if unit:
        properties.append(models.DynamicConfigValue(id_val="unit", value=unit))
    return models.MatcherConfig(id_val="byName", options=column), properties


def column_link(column: str, title: str, url: str) -> tuple[models.MatcherConfig, list[models.DynamicConfigValue]]:
    """An override making a table column's cells links."""
    return (models.MatcherConfig(id_val="byName", options=column),
            [models.DynamicConfigValue(id_val="links", value=[{"title": title, "url": url, "targetBlank": True}])])


# ---------------------------------------------------------------- variables


def datasource_variable() -> dashboard.DatasourceVariable:
    return (dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
            .current(models.VariableOption(selected=True, text="Prometheus", value=DATASOURCE_UID)))


def label_variable(name: str, label: str, metric: str, *, all_value: str | None = None,
                   sort: models.VariableSort = models.VariableSort.ALPHABETICAL_ASC) -> dashboard.QueryVariable:
    """label_values(metric, name); multi-valued with "All" when all_value is given (regex)."""
    variable = (dashboard.QueryVariable(name).label(label).datasource(DATASOURCE)
                .query(f"label_values({metric}, {name})")
                .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(sort))
    if all_value is not None:
        variable = (variable.multi(True).include_all(True).all_value(all_value)
                    .current(models.VariableOption(selected=True, text="All", value="$__all")))
    return variable


def training_variables() -> list:
    """datasource, run, node and rank: every training dashboard has them, in this order."""
    return [
        datasource_variable(),
        label_variable("run", "Run", "training_log_lines_total"),
        label_variable("node", "Node", f"training_log_lines_total{{{RUN}}}", all_value=".*"),
        label_variable("rank", "Rank", f'training_log_lines_total{{{RUN}, node=~"$node"}}', all_value=".+",
                       sort=models.VariableSort.NUMERICAL_ASC),
    ]


def new_dashboard(uid: str, title: str, description: str, variables: list) -> dashboard.Dashboard:
    board = (dashboard.Dashboard(title).uid(uid).description(description).tags(TAGS)
             .time("now-6h", "now").refresh("30s").timezone("browser").editable()
             .tooltip(models.DashboardCursorSync.CROSSHAIR)
             .link(dashboard.DashboardLink("Training dashboards").type(models.DashboardLinkType.DASHBOARDS)
                   .tags(TAGS).as_dropdown(True).include_vars(True).keep_time(True))
             .link(link("Runbooks", RUNBOOKS_INDEX, new_tab=True).icon("doc")))
    for variable in variables:
        board = board.with_variable(variable)
    return board


def annotation(name: str, colour: str, expr: str) -> dashboard.AnnotationQuery:
    return dashboard.AnnotationQuery().name(name).datasource(DATASOURCE).enable(True).icon_color(colour).expr(expr)


def errors_annotation() -> dashboard.AnnotationQuery:
    return annotation("Errors", "red",
                      f"sum by (node, rank, kind) (increase(training_errors_total{{{RUN}}}[$__interval])) > 0")


def with_sections(board: dashboard.Dashboard, sections: Iterable[tuple[str, Iterable]]) -> dashboard.Dashboard:
    """A row per section, its panels laid out below it."""
    for title, panels in sections:
        board = board.with_row(dashboard.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    return board


# ---------------------------------------------------------------- training overview


def training_overview() -> dashboard.Dashboard:
    board = new_dashboard(
        OVERVIEW_UID, "Training overview",
        "One training run: progress, loss, optimizer, speed, incidents and firing alerts. "
        "Aggregated across the selected ranks (median, min, max, top ranks) so it reads the same at 8 and at "
        "1024 ranks.",
        training_variables(),
    )
    board = (board
             .annotation(annotation("Anomalies", "orange", "sum by (node, rank, kind) "
                                    f"(increase(training_anomalies_total{{{RUN}}}[$__interval])) > 0"))
             .annotation(errors_annotation())
             .annotation(annotation("Firing alerts", "purple", FIRING)))
    board = with_sections(board, (("Progress", progress_panels()), ("Loss", loss_panels()),
                                  ("Optimizer", optimizer_panels()), ("Speed", speed_panels()),
                                  ("Goodput and restarts", goodput_panels()), ("Incidents", incident_panels())))
    return board.with_row(dashboard.Row("Runbooks").with_panel(runbooks_panel()))


def progress_panels() -> Iterator:
    # Run-level numbers read the recording rules of deploy/prometheus/rules (one series per run,
    # evaluated once for every viewer), not an aggregate over every rank's series per refresh.
    step, total = f"trainlog:run:training_step:max{{{RUN}}}", f"trainlog:run:training_total_steps:max{{{RUN}}}"
    yield stat_panel("Step", "Latest global step of the run (the most advanced rank).", 4, "none", (step, "step"))
    yield stat_panel("Total steps", "Total printed with the step (step:[ x/ total]).", 4, "none", (total, "total"))
    yield (stat_panel("Progress", "Step / total steps.", 4, "percentunit", (f"{step} / {total}", "progress"))
           .decimals(1))
    yield stat_panel("ETA", "Remaining steps times the median step time across ranks.", 4, "dtdurations",
                     (f"({total} - {step}) * trainlog:run:training_step_duration_seconds:median{{{RUN}}}", "eta"))
    yield (stat_panel("Ranks", "Ranks whose log is followed, and how many of them print steps "
                      "(with pipeline parallelism only the last stage prints the loss).", 4, "none",
                      (f"trainlog:run:ranks:count{{{RUN}}}", "logging"),
                      (f"count(training_step{{{RUN}}}) or vector(0)", "printing steps"))
           .text_mode(common_models.BigValueTextMode.VALUE_AND_NAME)
           .links([ranks_panel_link()]))
    yield (stat_panel("Firing alerts", "Training alerts firing now for this run (and exporter-down alerts).", 4, "none",
                      (f"count({FIRING}) or vector(0)", "firing"))
           .thresholds(steps((None, "green"), (1, "red")))
           .color_mode(common_models.BigValueColorMode.BACKGROUND))
    yield firing_alerts_panel()


def loss_panels() -> Iterator:
    yield (series_panel("Loss", "Median, min and max across the selected ranks, and the smoothed loss the plateau "
                        "detector watches. With data parallelism the replicas print the same loss.", 12, 8, "none",
                        (f"quantile(0.5, training_loss{{{SELECTED}}})", "median"),
                        (f"min(training_loss{{{SELECTED}}})", "min"),
                        (f"max(training_loss{{{SELECTED}}})", "max"),
                        (f"quantile(0.5, training_loss_smoothed{{{SELECTED}}})", "smoothed (median)"))
           .no_value(NO_LOSS))
    yield (series_panel("Auxiliary losses", "Every extra loss printed with the step (MoE load balancing, MTP, ...), "
                        "median across the selected ranks. Load-balancing losses use the right axis.", 12, 8, "none",
                        (f"quantile by (name) (0.5, training_aux_loss{{{SELECTED}}})", "{{name}}"))
           .override_by_regexp(".*balanc.*", [models.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])
           .no_value("no auxiliary loss printed"))
    yield (series_panel(f"Loss: {TOP_RANKS} highest ranks", "The ranks with the highest loss at each instant; "
                        "click a series for that rank's view.", 12, 8, "none",
                        (f"topk({TOP_RANKS}, training_loss{{{SELECTED}}})", "rank {{rank}} ({{node}})"))
           .data_links([rank_drilldown()]).no_value(NO_LOSS))
    yield (series_panel("Steps since the smoothed loss improved", "Median across the selected ranks of the steps "
                        "since the plateau detector last saw the smoothed loss improve (TrainingLossPlateau).",
                        12, 8, "none",
                        (f"quantile(0.5, training_step{{{SELECTED}}} - training_loss_best_step{{{SELECTED}}})",
                         "steps"))
           .no_value(NO_LOSS))


def optimizer_panels() -> Iterator:
    yield series_panel("Learning rate", "Learning rate of the latest step (the same on every rank).", 8, 8, "sci",
                       (f"max(training_learning_rate{{{SELECTED}}})", "lr"))
    yield (series_panel("Gradient norm", "Median and max across the selected ranks. A printed 'NaN' (not obtained) "
                        "leaves no sample; a real NaN counts as an anomaly.", 8, 8, "none",
                        (f"quantile(0.5, training_grad_norm{{{SELECTED}}})", "median"),
                        (f"max(training_grad_norm{{{SELECTED}}})", "max"))
           .no_value("no gradient norm printed"))
    yield (series_panel("Other step metrics", "Other numeric fields printed with the step (loss scale, MFU, ...), "
                        "median across the selected ranks.", 8, 8, "none",
                        (f"quantile by (name) (0.5, training_metric{{{SELECTED}}})", "{{name}}"))
           .no_value("the framework prints no other numeric field"))


def speed_panels() -> Iterator:
    yield (series_panel("Step time", f"Median across the selected ranks and the {TOP_RANKS} slowest ranks: "
                        "a straggler stands out above the median.", 12, 8, "s",
                        (f"quantile(0.5, training_step_duration_seconds{{{SELECTED}}})", "median"),
                        (f"topk({TOP_RANKS}, training_step_duration_seconds{{{SELECTED}}})",
                         "rank {{rank}} ({{node}})"))
           .data_links([rank_drilldown()]).links([ranks_panel_link()]))
    yield (series_panel("Throughput", f"As printed by the framework (unit in training_info's throughput_unit): "
                        f"median and the {TOP_RANKS} slowest ranks.", 12, 8, "none",
                        (f"quantile(0.5, training_throughput{{{SELECTED}}})", "median"),
                        (f"bottomk({TOP_RANKS}, training_throughput{{{SELECTED}}})", "rank {{rank}} ({{node}})"))
           .data_links([rank_drilldown()]))


def goodput(window: str) -> str:
    """Productive / (productive + lost) step time of the selected ranks over ``window`` (DESIGN 3.3)."""
    productive = f"sum(increase(training_productive_seconds_total{{{SELECTED}}}[{window}]))"
    return f"{productive} / ({productive} + sum(increase(training_lost_seconds_total{{{SELECTED}}}[{window}])))"


def goodput_panels() -> Iterator:
    lost = f"training_lost_seconds_total{{{SELECTED}}}"
    # Every rank of a synchronous job restarts together: the job's restarts are the most any rank counted.
    restarts = f"training_restarts_total{{{SELECTED}}}"
    yield (stat_panel("Goodput", "Share of the selected ranks' step time in the time range that trained the model: "
                      "productive / (productive + lost). Lost: replayed steps after restarts, start-up, checkpoint "
                      "saves, stalls (TrainingGoodputLow).", 6, "percentunit", (goodput("$__range"), "goodput"))
           .decimals(1).thresholds(steps((None, "red"), (0.5, "orange"), (0.9, "green"))))
    yield stat_panel("Productive time", "Step time of the selected ranks in the time range that moved past the "
                     "highest step reached before, summed over the ranks.", 6, "s",
                     (f"sum(increase(training_productive_seconds_total{{{SELECTED}}}[$__range]))", "productive"))
    yield stat_panel("Lost time", "Step and wall time of the selected ranks in the time range that trained nothing, "
                     "summed over the ranks and the kinds.", 6, "s",
                     (f"sum(increase({lost}[$__range]))", "lost"))
    yield (stat_panel("Restarts", "Times the job started again in the time range (a start banner after steps, the "
                      "step going back, msrun's workers registering again): the most any selected rank counted "
                      "(TrainingRestartLoop).", 6, "none",
                      (f"max(round(increase({restarts}[$__range])))", "restarts"))
           .thresholds(steps((None, "green"), (1, "orange"), (3, "red"))))
    yield (series_panel("Goodput over the last hour", "Productive share of the selected ranks' step time over a "
                        "sliding hour.", 8, 8, "percentunit", (goodput("1h"), "goodput"))
           .min(0).max(1))
    yield (series_panel("Lost time by kind", "Seconds lost per interval, summed over the selected ranks: replayed "
                        "(steps re-run after a restart), startup (a (re)start to its first step), checkpoint (a "
                        "one-step save above the baseline), stall (gaps between step records).", 8, 8, "s",
                        (f"sum by (kind) (increase({lost}[$__rate_interval]))", "{{kind}}"))
           .draw_style(common_models.GraphDrawStyle.BARS).fill_opacity(80)
           .stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL)))
    yield (bars_panel("Restarts", "Restarts per interval: the most any selected rank counted.", 8, 8,
                      (f"max(increase({restarts}[$__rate_interval]))", "restarts")))


def incident_panels() -> Iterator:
    yield bars_panel("Anomalies and errors", "Anomalies (step detectors) and failures (log signatures) per interval.",
                     12, 8,
                     (f"sum by (kind) (increase(training_anomalies_total{{{SELECTED}}}[$__rate_interval])) > 0",
                      "anomaly {{kind}}"),
                     (f"sum by (kind) (increase(training_errors_total{{{SELECTED}}}[$__rate_interval])) > 0",
                      "error {{kind}}"))
    in_range = "[$__range])) > 0"
    yield (table_panel(
        "Anomalies and errors in the time range", "Which rank had what, how often, and the step or time of the latest.",
        12, 8,
        # round(): increase() extrapolates to the range's edges, counts are whole.
        ("label_replace(round(sum by (node, rank, kind) "
         f'(increase(training_anomalies_total{{{SELECTED}}}{in_range}), "class", "anomaly", "", "")'
         " or label_replace(round(sum by (node, rank, kind) "
         f'(increase(training_errors_total{{{SELECTED}}}{in_range}), "class", "error", "", "")',
         "count"),
        (f"max by (node, rank, kind) (training_last_anomaly_step{{{SELECTED}}})"
         f" and on (node, rank, kind) (increase(training_anomalies_total{{{SELECTED}}}[$__range]) > 0)", "last step"),
        (f"1000 * max by (node, rank, kind) (training_last_error_timestamp_seconds{{{SELECTED}}})"
         f" and on (node, rank, kind) (increase(training_errors_total{{{SELECTED}}}[$__range]) > 0)", "last seen"),
        rename={"Value #A": "count", "Value #B": "latest at step", "Value #C": "latest seen"})
        .override_by_name("latest seen", [models.DynamicConfigValue(id_val="unit", value="dateTimeAsIso")])
        .no_value("no anomaly or error in this time range"))


def firing_alerts_panel():
    runbook = RUNBOOK_URL.format("${__data.fields.alertname}")
    return (table_panel("Firing training alerts", "Alerts firing now; click the alert name for its runbook.", 24, 5,
                        (FIRING, "firing"), hide=("Value", "alertstate"))
            .with_override(*column_link("alertname", "Runbook for ${__data.fields.alertname}", runbook))
            .no_value("no training alert is firing"))


def runbooks_panel():
    lines = [f"- [{name}]({RUNBOOK_URL.format(name)})" for name in ALERT_NAMES]
    content = "Every training alert and its runbook (the check sequence to follow):\n\n" + "\n".join(lines) + "\n"
    return (text.Panel().title("Alert runbooks").description("The runbook_url of every alert rule.")
            .span(24).height(10).mode(TextMode.MARKDOWN).content(content))


# ---------------------------------------------------------------- ranks


def training_ranks() -> dashboard.Dashboard:
    board = new_dashboard(
        RANKS_UID, "Training ranks",
        "Per-rank view of one run: which rank stopped printing first, stragglers, errors by rank and kind, "
        "pipeline stages that print no loss.",
        training_variables(),
    )
    return with_sections(board.annotation(errors_annotation()),
                         (("Liveness", liveness_panels()), ("Ranks", rank_table_panels()),
                          ("Speed", straggler_panels()), ("Errors", rank_error_panels())))


def silence_thresholds() -> dashboard.ThresholdsConfig:
    return steps((None, "green"), (SILENCE_WARNING_SECONDS, "yellow"), (SILENCE_CRITICAL_SECONDS, "red"))


def silence_share_thresholds() -> dashboard.ThresholdsConfig:
    return steps((None, "green"), (SILENCE_WARNING_SHARE, "yellow"), (SILENCE_CRITICAL_SHARE, "red"))


def silence_share(selector: str) -> str:
    """Each rank's silence as a share of its own stall threshold: red (1) where TrainingStalled judges it stalled."""
    return (f"(time() - training_last_log_timestamp_seconds{{{selector}}})"
            f" / on (run, node, rank) clamp_min(training_stall_threshold_seconds{{{selector}}}, {STALL_FLOOR_SECONDS})")


def liveness_panels() -> Iterator:
    yield (stat_panel("Newest line of the run", "Seconds since any rank of the run printed a line (TrainingStalled "
                      f"fires when every rank is silent past its own stall threshold, at least {STALL_FLOOR_SECONDS} "
                      "s: see the silence table and history for each rank's share of it).", 6, "s",
                      (f"time() - max(training_last_log_timestamp_seconds{{{WORKERS}}})", "silence"))
           .thresholds(silence_thresholds()).color_mode(common_models.BigValueColorMode.BACKGROUND))
    yield (stat_panel("First stalled rank", "Of the selected ranks that print steps, the one silent the longest: "
                      "when the run hangs, the rank that stopped first points at the cause. Ranks that never printed "
                      "a step (pipeline stages without loss) are left out, as in TrainingFirstStalledRank.", 6, "s",
                      (f"time() - bottomk(1, training_last_log_timestamp_seconds{{{SELECTED}}}"
                       f" and on (node, rank) training_step{{{RUN}}})", "rank {{rank}} ({{node}})"))
           .text_mode(common_models.BigValueTextMode.VALUE_AND_NAME)
           .thresholds(silence_thresholds()).color_mode(common_models.BigValueColorMode.BACKGROUND))
    yield (stat_panel("Ranks that print no loss", "Ranks with log lines but no loss: with pipeline parallelism "
                      "only the last stage prints the loss, so these are expected there.", 6, "none",
                      (f"count(training_log_lines_total{{{SELECTED}}} unless on (node, rank) training_loss{{{RUN}}})"
                       " or vector(0)", "no loss"))
           .thresholds(steps((None, "text"))))
    yield (stat_panel("Ranks with errors", "Selected ranks that logged a failure signature since the exporter started.",
                      6, "none",
                      (f"count(sum by (node, rank) (training_errors_total{{{SELECTED}}}) > 0) or vector(0)", "ranks"))
           .thresholds(steps((None, "green"), (1, "red"))).color_mode(common_models.BigValueColorMode.BACKGROUND))
    yield (table_panel("Seconds since the last log line", "Every selected rank, the longest silent first, and its "
                       "silence as a share of its own stall threshold (learned from its pace, never below "
                       f"{STALL_FLOOR_SECONDS} s): red past it.", 12, 10,
                       (f"time() - training_last_log_timestamp_seconds{{{SELECTED}}}", "silence"),
                       (silence_share(SELECTED), "of its stall threshold"),
                       hide=("run",), rename={"Value #A": "seconds since last line",
                                              "Value #B": "of its stall threshold"})
           .thresholds(silence_share_thresholds())
           .override_by_name("seconds since last line", [models.DynamicConfigValue(id_val="unit", value="s")])
           .with_override(*colour_cells("of its stall threshold", "percentunit"))
           .sort_by([common.TableSortByFieldState().display_name("seconds since last line").desc(True)]))
    yield (place(statushistory.Panel(), f"Silence: {TOP_RANKS_TABLE} longest silent ranks",
                 "Each rank's silence as a share of its own stall threshold (learned from its pace, never below "
                 f"{STALL_FLOOR_SECONDS} s), over time: a rank that stopped printing turns red (past its threshold) "
                 "before the others.", 12, 10, "percentunit")
           .targets([query(f"topk({TOP_RANKS_TABLE}, {silence_share(SELECTED)})", "rank {{rank}} ({{node}})")])
           .thresholds(silence_share_thresholds())
           .color_scheme(dashboard.FieldColor().mode(models.FieldColorModeId.THRESHOLDS))
           .show_value(common_models.VisibilityMode.NEVER))


def rank_table_panels() -> Iterator:
    per_rank = "max by (node, rank) "
    yield (table_panel(
        "Per-rank state",
        "Latest values per rank. Ranks that print no loss (pipeline stages before the last) are labelled "
        "as such; click a rank for its run view.", 24, 10,
        (per_rank + f"(training_step{{{SELECTED}}})", "step"),
        (f"count by (node, rank) (training_loss{{{SELECTED}}})"
         f" or on (node, rank) (0 * max by (node, rank) (training_log_lines_total{{{SELECTED}}}))", "loss printed"),
        (per_rank + f"(training_loss{{{SELECTED}}})", "loss"),
        (per_rank + f"(training_step_duration_seconds{{{SELECTED}}})", "step time"),
        (per_rank + f"(time() - training_last_log_timestamp_seconds{{{SELECTED}}})", "silence"),
        (f"sum by (node, rank) (training_errors_total{{{SELECTED}}})", "errors"),
        rename={"Value #A": "step", "Value #B": "loss printed", "Value #C": "loss", "Value #D": "step time",
                "Value #E": "seconds since last line", "Value #F": "errors"})
        .override_by_name("loss printed", [models.DynamicConfigValue(id_val="mappings", value=[
            value_text({"1": ("yes", "green"), "0": (NO_LOSS, "blue")}).to_json()])])
        .override_by_name("loss", [models.DynamicConfigValue(id_val="noValue", value=NO_LOSS)])
        .override_by_name("step time", [models.DynamicConfigValue(id_val="unit", value="s")])
        .override_by_name("seconds since last line", [models.DynamicConfigValue(id_val="unit", value="s")])
        .with_override(*column_link("rank", "Rank ${__data.fields.rank}: run view",
                                    dashboard_url(OVERVIEW_UID, "var-node=${__data.fields.node}",
                                                  "var-rank=${__data.fields.rank}")))
        .sort_by([common.TableSortByFieldState().display_name("rank")]))
    yield (series_panel(f"Loss per rank ({TOP_RANKS_TABLE} highest of the selection)",
                        "Pick ranks with the rank variable to compare them.", 24, 8, "none",
                        (f"topk({TOP_RANKS_TABLE}, training_loss{{{SELECTED}}})", "rank {{rank}} ({{node}})"))
           .no_value(NO_LOSS).links([overview_panel_link()]))


def straggler_panels() -> Iterator:
    median = f"quantile(0.5, training_step_duration_seconds{{{RUN}}})"
    yield (series_panel("Step time per rank", f"The {TOP_RANKS} slowest selected ranks against the run's median.",
                        12, 9, "s",
                        (median, "run median"),
                        (f"topk({TOP_RANKS}, training_step_duration_seconds{{{SELECTED}}})",
                         "rank {{rank}} ({{node}})"))
           .override_by_name("run median", [models.DynamicConfigValue(id_val="custom.lineWidth", value=3)]))
    yield (place(bargauge.Panel(), f"Step time / run median ({TOP_RANKS_TABLE} slowest)",
                 "A straggler stands out above 1 (TrainingStraggler compares with the median too).", 12, 9, "none")
           .targets([query(f"topk({TOP_RANKS_TABLE}, training_step_duration_seconds{{{SELECTED}}}"
                           f" / on (run) group_left quantile by (run) (0.5, training_step_duration_seconds{{{RUN}}}))",
                           "rank {{rank}} ({{node}})", instant=True).format(PromQueryFormat.TIME_SERIES)])
           .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
           .display_mode(common_models.BarGaugeDisplayMode.BASIC)
           .orientation(common_models.VizOrientation.HORIZONTAL)
           .decimals(2).min(0)
           .thresholds(steps((None, "green"), (STRAGGLER_WARNING_RATIO, "yellow"), (STRAGGLER_CRITICAL_RATIO, "red"))))
    yield (series_panel("Steps behind the most advanced rank", f"The {TOP_RANKS} selected ranks furthest behind.",
                        24, 7, "none",
                        (f"topk({TOP_RANKS}, scalar(max(training_step{{{RUN}}})) - training_step{{{SELECTED}}})",
                         "rank {{rank}} ({{node}})")))


def rank_error_panels() -> Iterator:
    yield (table_panel("Errors by rank and kind", "Failure signatures per rank since the exporter started "
                       "(its checkpoint keeps them across restarts), with the time of the latest.", 12, 9,
                       (f"sum by (node, rank, kind) (training_errors_total{{{SELECTED}}}) > 0", "count"),
                       (f"1000 * max by (node, rank, kind) (training_last_error_timestamp_seconds{{{SELECTED}}})",
                        "latest"),
                       rename={"Value #A": "count", "Value #B": "latest seen"})
           .override_by_name("latest seen", [models.DynamicConfigValue(id_val="unit", value="dateTimeAsIso")])
           .no_value("no error on the selected ranks"))
    yield bars_panel("Errors over time", "Failure signatures per interval, by kind.", 12, 9,
                     (f"sum by (kind) (increase(training_errors_total{{{SELECTED}}}[$__rate_interval])) > 0",
                      "{{kind}}"))
    yield (table_panel("Cluster events (scheduler.log)", "msrun scheduler events: registrations, exits, node timeouts.",
                       24, 6, (f"sum by (node, kind) (training_scheduler_events_total{{{RUN}}})", "count"),
                       rename={"Value": "count"})
           .thresholds(steps((None, "text"))))


# ---------------------------------------------------------------- exporter health


def exporter_health() -> dashboard.Dashboard:
    board = new_dashboard(
        EXPORTER_UID, "Training log exporter health",
        "The trainlog-exporter sidecars themselves: files followed, bytes read and bytes still to read, rotations, "
        "truncations, lines it could not parse or dropped (by reason), series dropped by the cardinality guard, "
        "scrape duration.",
        [
            datasource_variable(),
            label_variable("job", "Job", "trainlog_files_followed", all_value=".*"),
            label_variable("instance", "Instance", 'trainlog_files_followed{job=~"$job"}', all_value=".*"),
        ],
    )
    return with_sections(board, (("Now", exporter_now_panels()), ("Reading", exporter_reading_panels()),
                                 ("Scrapes", exporter_scrape_panels())))


BY_INSTANCE = "sum by (instance) "


def exporter_now_panels() -> Iterator:
    yield stat_panel("Exporters up", "Scraped exporters that answered the last scrape.", 3, "none",
                     (f"sum(up{{{EXPORTERS}}})", "up"))
    yield stat_panel("Files followed", "Log files followed now, all exporters.", 3, "none",
                     (f"sum(trainlog_files_followed{{{EXPORTERS}}})", "files"))
    yield stat_panel("Ranks served", "Rank series exposed, all exporters.", 3, "none",
                     (f'count(training_log_lines_total{{{EXPORTERS}, rank!=""}}) or vector(0)', "ranks"))
    yield (stat_panel("Bytes behind", "Bytes the followed files hold beyond what the exporters have read: near 0 "
                      "when they keep up, large during a catch-up, growing when they fall behind.", 3, "bytes",
                      (f"sum(trainlog_file_lag_bytes{{{EXPORTERS}}}) or vector(0)", "behind"))
           .thresholds(steps((None, "green"), (64 << 20, "orange"))))
    yield (stat_panel("Lines dropped", "Lines whose content never reached the state, whole or in part, all reasons "
                      "(see Lines dropped by reason).", 3, "none",
                      (f"sum(trainlog_lines_dropped_total{{{EXPORTERS}}})", "dropped"))
           .thresholds(steps((None, "green"), (1, "orange"))))
    yield (stat_panel("Series dropped", "Series or values not created because a cardinality limit was reached.",
                      3, "none", (f"sum(trainlog_series_dropped_total{{{EXPORTERS}}})", "dropped"))
           .thresholds(steps((None, "green"), (1, "red"))))
    yield (stat_panel("Bytes lost", "Bytes possibly lost to a truncation with a partial line pending.", 3, "bytes",
                      (f"sum(trainlog_bytes_lost_total{{{EXPORTERS}}})", "lost"))
           .thresholds(steps((None, "green"), (1, "orange"))))
    yield stat_panel("Scrape duration", "Slowest scrape of the selected exporters.", 3, "s",
                     (f"max(scrape_duration_seconds{{{EXPORTERS}}})", "max"))


def exporter_reading_panels() -> Iterator:
    def per_instance(function: str, metric: str) -> str:
        return BY_INSTANCE + f"({function}({metric}{{{EXPORTERS}}}[$__rate_interval]))"

    yield series_panel("Files followed", "Per exporter.", 8, 8, "none",
                       (BY_INSTANCE + f"(trainlog_files_followed{{{EXPORTERS}}})", "{{instance}}"))
    yield series_panel("Bytes read", "Per exporter.", 8, 8, "Bps",
                       (per_instance("rate", "trainlog_bytes_read_total"), "{{instance}}"))
    yield series_panel("Lines read", "Per exporter, all ranks.", 8, 8, "cps",
                       (per_instance("rate", "training_log_lines_total"), "{{instance}}"))
    yield series_panel("Rotations and truncations", "Rename rotations followed and copytruncate truncations "
                       "detected, per interval.", 8, 8, "none",
                       (per_instance("increase", "trainlog_rotations_total"), "rotations {{instance}}"),
                       (per_instance("increase", "trainlog_truncations_total"), "truncations {{instance}}"),
                       (per_instance("increase", "trainlog_bytes_lost_total"), "bytes lost {{instance}}"))
    yield series_panel("Unparsed and truncated lines", "Lines matching no format and no failure signature (a "
                       "format change shows here), and lines cut at the line cap.", 8, 8, "cps",
                       (per_instance("rate", "trainlog_lines_unparsed_total"), "unparsed {{instance}}"),
                       (per_instance("rate", "trainlog_lines_truncated_total"), "truncated {{instance}}"))
    yield series_panel("Series dropped", "Cardinality guard: raise the limits or fix the label source.", 8, 8, "none",
                       (per_instance("increase", "trainlog_series_dropped_total"), "{{instance}}"))
    yield series_panel("Lines dropped by reason", "Lines whose content never reached the state: number_out_of_range "
                       "and parse_error (rejected, the rest of their read went on), truncated (the rest of a line "
                       "over the line cap), series_limit (lines of series the cardinality guard keeps out).",
                       12, 8, "cps",
                       (f"sum by (instance, reason) (rate(trainlog_lines_dropped_total{{{EXPORTERS}}}"
                        "[$__rate_interval]))", "{{reason}} {{instance}}"))
    yield series_panel("Bytes behind", "Bytes not read yet, per exporter, and the files furthest behind: an "
                       "exporter that cannot keep up falls further behind here before anything is lost.",
                       12, 8, "bytes",
                       (BY_INSTANCE + f"(trainlog_file_lag_bytes{{{EXPORTERS}}})", "{{instance}}"),
                       (f"topk(5, trainlog_file_lag_bytes{{{EXPORTERS}}})", "{{file}}"))


def exporter_scrape_panels() -> Iterator:
    yield series_panel("Scrape duration", "How long Prometheus took to scrape each exporter.", 12, 8, "s",
                       (f"scrape_duration_seconds{{{EXPORTERS}}}", "{{instance}}"))
    yield series_panel("Samples per scrape", "Grows with ranks and kinds; the cardinality guard caps it.",
                       12, 8, "none", (f"scrape_samples_scraped{{{EXPORTERS}}}", "{{instance}}"))
    yield (table_panel("Runs and nodes served", "Which exporter follows which run and node, and how many ranks.", 24, 6,
                       (f'count by (instance, run, node) (training_log_lines_total{{{EXPORTERS}, rank!=""}})', "ranks"),
                       rename={"Value": "ranks"})
           .with_override(*column_link("run", "Training overview of ${__data.fields.run}",
                                       f"/d/{OVERVIEW_UID}/{OVERVIEW_UID}?${{__url_time_range}}&var-run=${{__data.fields.run}}")))


# ---------------------------------------------------------------- output

DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "training-overview.json": training_overview,
    "training-ranks.json": training_ranks,
    "exporter-health.json": exporter_health,
}


def number_panels(model: models.Dashboard) -> models.Dashboard:
    """Stable panel ids in layout order (links like viewPanel=N rely on them)."""
    next_id = 1
    for panel in model.panels or []:
        for item in [panel, *getattr(panel, "panels", [])]:
            item.id_val = next_id
            next_id += 1
    return model


def render(builder: dashboard.Dashboard) -> str:
    return json.dumps(number_panels(builder.build()), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the files differ from a fresh build")
    mode.add_argument("--print", action="store_true", help="print all dashboards as one JSON document")
    parser.add_argument("--out", type=Path, default=DASHBOARD_DIR, help="dashboard directory (default: %(default)s)")
    arguments = parser.parse_args(argv)
    rendered = render_all()
    if arguments.print:
        dashboards = {name: json.loads(content) for name, content in rendered.items()}
        print(json.dumps(dashboards, indent=2, ensure_ascii=False))
        return 0
    if arguments.check:
        stale = [name for name, content in rendered.items() if _read(arguments.out / name) != content]
        for name in stale:
            print(f"{arguments.out / name}: differs from a fresh build; run python grafana/build.py", file=sys.stderr)
        return 1 if stale else 0
    arguments.out.mkdir(parents=True, exist_ok=True)
    for name, content in rendered.items():
        (arguments.out / name).write_text(content, encoding="utf-8")
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
