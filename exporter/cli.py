"""Command line: ``trainlog-exporter [serve] ...``; the process entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from exporter import __version__
from exporter.analyze.command import DESCRIPTION, add_analyze_options, analyze_main
from exporter.simulate.command import add_simulate_options, run_simulate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainlog-exporter",
        description="Follow training worker logs and expose per-rank Prometheus metrics.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    # SUPPRESS: an option not given must not hide the environment or the config file.
    serve = commands.add_parser(
        "serve", help="follow logs and serve /metrics (the default)", argument_default=argparse.SUPPRESS
    )
    add_serve_options(serve)
    analyze = commands.add_parser("analyze", help=DESCRIPTION[0].lower() + DESCRIPTION[1:].rstrip("."))
    add_analyze_options(analyze)
    simulate = commands.add_parser(
        "simulate", help="write a simulated msrun run with injected incidents (fire drills)"
    )
    add_simulate_options(simulate)
    # The top-level help is where a first-time user looks: it shows how to serve.
    parser.epilog = ("serve is the default command: 'trainlog-exporter --log-dir DIR' runs "
                     "'trainlog-exporter serve --log-dir DIR'.\n\n" + serve.format_help())
    return parser


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """The serve options; their default is the parser's (build_parser: SUPPRESS)."""
    from exporter.settings import DETECTOR_OPTIONS, Settings  # pydantic: analyze and simulate need none of it

    parser.add_argument("--log-dir", dest="log_dir", action="append", metavar="DIR",
                        help="directory of worker logs (repeatable; env TRAINLOG_LOG_DIR)")
    parser.add_argument("--log-file", dest="log_file", action="append", metavar="PATH",
                        help="a single log file to follow, - for standard input (repeatable; env TRAINLOG_LOG_FILE)")
    parser.add_argument("--web.listen-address", dest="web_listen_address", metavar="HOST:PORT",
                        help="address to serve on (default :10042)")
    parser.add_argument("--web.telemetry-path", dest="web_telemetry_path", metavar="PATH",
                        help="path of the metrics (default /metrics)")
    parser.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                        help="exporter-toolkit web configuration: TLS and basic auth (docs/security.md)")
    parser.add_argument("--run", help="run label (default: the log directory's parent name)")
    parser.add_argument("--node", help="node label (default: $NODE_NAME, then the host name)")
    parser.add_argument("--config", metavar="FILE", help="YAML configuration file")
    parser.add_argument("--state-file", dest="state_file", metavar="PATH",
                        help="checkpoint of offsets and counters (default in $XDG_STATE_HOME/trainlog-exporter)")
    parser.add_argument("--checkpoint-interval", dest="checkpoint_interval", type=float, metavar="SECONDS",
                        help="seconds between checkpoints (default 5)")
    parser.add_argument("--idle-flush-seconds", dest="idle_flush_seconds", type=float, metavar="SECONDS",
                        help="parse a last line left without newline after this long (default: never)")
    parser.add_argument("--poll-interval", dest="poll_interval", type=float, metavar="SECONDS",
                        help="poll instead of inotify (NFS, Lustre)")
    parser.add_argument("--rescan-interval", dest="rescan_interval", type=float, metavar="SECONDS",
                        help="seconds between safety rescans of the log directories (default 2)")
    parser.add_argument("--follow-symlinks-outside", dest="follow_symlinks_outside", action="store_const", const=True,
                        help="follow symbolic links that lead out of the log directory (default: skip them)")
    parser.add_argument("--plog-ranks", dest="plog_ranks", action="store_const", const=True,
                        help="count a CANN process log plog-<pid>_*.log on the rank whose worker log names that pid "
                             "(default: a series of its own; docs/ascend-faults.md)")
    parser.add_argument("--max-line-bytes", dest="max_line_bytes", type=int, metavar="BYTES",
                        help="truncate longer lines (default 1 MiB)")
    parser.add_argument("--log-level", dest="log_level", metavar="LEVEL",
                        help="debug, info, warning or error")
    parser.add_argument("--otlp-endpoint", dest="otlp_endpoint", metavar="URL",
                        help="also push metrics to this OTLP collector, e.g. http://otel-collector:4318 "
                             "(default: $OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT, else off; "
                             "OTEL_EXPORTER_OTLP_PROTOCOL=grpc for OTLP/gRPC, port 4317)")
    parser.add_argument("--rank-offset", dest="rank_offset", type=int, metavar="N",
                        help="global rank of this node's local rank 0, for torchrun's local ranks (default 0)")
    parser.add_argument("--process-pattern", dest="process_pattern", metavar="REGEX",
                        help="expose training_process_up: 1 while a process whose command line matches runs "
                             "(sidecar sharing the pod's process namespace)")
    parser.add_argument("--runbook-url", dest="runbook_url", metavar="URL",
                        help="base URL of the runbooks the status page links, <URL>/<AlertName>.md "
                             "(default: docs/runbooks/ on GitHub)")
    parser.add_argument("--demo", action="store_true",
                        help="also follow a live simulated run written to a temporary directory")
    detectors = parser.add_argument_group("detector thresholds (see docs/detectors.md)")
    for name in DETECTOR_OPTIONS:
        threshold = Settings.model_fields[name]
        detectors.add_argument("--" + name.replace("_", "-"), dest=name, type=type(threshold.default), metavar="N",
                               help=_escape_percent(f"{threshold.description} (default {threshold.default})"))


def _escape_percent(text: str) -> str:
    # argparse expands %(default)s and the like in help texts.
    return text.replace("%", "%%")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["analyze"]:
        return analyze_main(argv[1:])  # its own parser: without serve's settings it starts in half the time
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")  # serve is the default command; a mistyped command is argparse's "invalid choice"
    arguments = vars(build_parser().parse_args(argv))
    command = arguments.pop("command")
    if command == "simulate":
        return run_simulate(**arguments)
    from exporter.settings import ConfigError, load_settings

    try:
        settings = load_settings(**arguments)
    except ConfigError as error:
        print(f"trainlog-exporter: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if command == "serve":
        if not settings.log_dir and not settings.log_file and not settings.demo:
            print("trainlog-exporter: no log directory: give --log-dir DIR, --log-file PATH (or --demo) or set "
                  "TRAINLOG_LOG_DIR", file=sys.stderr)
            return 2
        from exporter.app import serve

        return serve(settings)
    return 2
