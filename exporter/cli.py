"""Command line: ``trainlog-exporter [serve] ...``; the process entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from exporter import __version__
from exporter.settings import ConfigError, load_settings

SUBCOMMANDS = ("serve",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainlog-exporter",
        description="Follow training worker logs and expose per-rank Prometheus metrics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="follow logs and serve /metrics (the default)")
    add_serve_options(serve)
    return parser


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: an option not given must not hide the environment or the config file.
    option = dict(default=argparse.SUPPRESS)
    parser.add_argument("--log-dir", dest="log_dir", action="append", metavar="DIR",
                        help="directory of worker logs (repeatable; env TRAINLOG_LOG_DIR)", **option)
    parser.add_argument("--web.listen-address", dest="web_listen_address", metavar="HOST:PORT",
                        help="address to serve on (default :10042)", **option)
    parser.add_argument("--run", help="run label (default: the log directory's parent name)", **option)
    parser.add_argument("--node", help="node label (default: $NODE_NAME, then the host name)", **option)
    parser.add_argument("--config", metavar="FILE", help="YAML configuration file", **option)
    parser.add_argument("--state-file", dest="state_file", metavar="PATH",
                        help="checkpoint of offsets and counters (default in $XDG_STATE_HOME/trainlog-exporter)",
                        **option)
    parser.add_argument("--checkpoint-interval", dest="checkpoint_interval", type=float, metavar="SECONDS",
                        help="seconds between checkpoints (default 5)", **option)
    parser.add_argument("--idle-flush-seconds", dest="idle_flush_seconds", type=float, metavar="SECONDS",
                        help="parse a last line left without newline after this long (default: never)", **option)
    parser.add_argument("--poll-interval", dest="poll_interval", type=float, metavar="SECONDS",
                        help="poll instead of inotify (NFS, Lustre)", **option)
    parser.add_argument("--max-line-bytes", dest="max_line_bytes", type=int, metavar="BYTES",
                        help="truncate longer lines (default 1 MiB)", **option)
    parser.add_argument("--log-level", dest="log_level", metavar="LEVEL",
                        help="debug, info, warning or error", **option)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*SUBCOMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "serve")  # serve is the default command
    arguments = vars(build_parser().parse_args(argv))
    command = arguments.pop("command")
    try:
        settings = load_settings(**arguments)
    except ConfigError as error:
        print(f"trainlog-exporter: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if command == "serve":
        if not settings.log_dir:
            print("trainlog-exporter: no log directory: give --log-dir DIR or set TRAINLOG_LOG_DIR", file=sys.stderr)
            return 2
        from exporter.app import serve

        return serve(settings)
    return 2
