"""The log formats, in auto-detection order, and how a file's format is chosen.

Detection order goes from the most specific anchor to the most generic one, so that a
line of one format is never taken for another (``{ Epoch:[..], step:[..]`` before
``{ step:[..]``; DeepSpeed's ``step=N, skipped=`` before plain ``step= loss=``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporter.parse import (
    custom_regex,
    deepspeed,
    hf_trainer,
    jsonl,
    keyvalue,
    megatron,
    mindformers,
    mindformers_static,
    scheduler,
    torchtitan,
)
from exporter.parse.columns import Columns, new_step_columns
from exporter.parse.records import Record


@dataclass(frozen=True, slots=True)
class Format:
    """One log format: a cheap byte test, then the parser proper."""

    name: str
    framework: str  # for training_info; "" when the format is not one framework's
    prefilter: bytes  # every line the parser accepts contains these bytes
    parse: Callable[[str], Record | None]
    # The format's lines carry no loss (DeepSpeed's engine): keep looking for one that does.
    provisional: bool = False
    # Gathers a block's step lines into one StepBatch (parse/columns.py), for the formats
    # whose logs hold enough step lines to be worth it.
    columns: Callable[[], Columns] | None = None


BUILTIN_FORMATS: tuple[Format, ...] = (
    Format("mindformers_static", mindformers_static.FRAMEWORK, mindformers_static.PREFILTER, mindformers_static.parse),
    Format("mindformers_pynative", "mindformers", mindformers.PREFILTER, mindformers.parse_pynative,
           columns=new_step_columns),
    Format("megatron", megatron.FRAMEWORK, megatron.PREFILTER, megatron.parse),
    Format("hf_trainer", hf_trainer.FRAMEWORK, hf_trainer.PREFILTER, hf_trainer.parse),
    Format("torchtitan", torchtitan.FRAMEWORK, torchtitan.PREFILTER, torchtitan.parse),
    Format("deepspeed", deepspeed.FRAMEWORK, deepspeed.PREFILTER, deepspeed.parse, provisional=True),
    Format("jsonl", jsonl.FRAMEWORK, jsonl.PREFILTER, jsonl.parse),
    Format("keyvalue", keyvalue.FRAMEWORK, keyvalue.PREFILTER, keyvalue.parse_keyvalue),
)
# Chosen by the file (scheduler.log), never by detection: worker logs print some of its lines too.
SCHEDULER_FORMAT = Format("msrun_scheduler", scheduler.FRAMEWORK, scheduler.PREFILTER, scheduler.parse)
BUILTIN_NAMES = tuple(fmt.name for fmt in (*BUILTIN_FORMATS, SCHEDULER_FORMAT))


def custom_format(name: str, pattern: str, contains: str = "") -> Format:
    """A user-defined format; ValueError with a message for the user when the pattern is unusable."""
    return Format(name, "", contains.encode(), custom_regex.make_parser(custom_regex.compile_pattern(pattern)))


@dataclass(frozen=True, slots=True)
class FormatSelection:
    """Which format each file gets: a config override, the scheduler's, or auto-detection."""

    overrides: tuple[tuple[str, str], ...] = ()  # (path pattern, format name), first match wins
    custom_formats: tuple[Format, ...] = ()

    def candidates(self) -> tuple[Format, ...]:
        """Auto-detection order: the user's own formats first, they were defined for these logs."""
        return (*self.custom_formats, *BUILTIN_FORMATS)

    def forced(self, relative_path: str, role: str) -> Format | None:
        """The format a file must use, or None to detect it from its first step lines."""
        for pattern, name in self.overrides:
            if path_matches(relative_path, pattern):
                return self._by_name(name)
        return SCHEDULER_FORMAT if role == "scheduler" else None

    def _by_name(self, name: str) -> Format:
        for fmt in (*self.custom_formats, *BUILTIN_FORMATS, SCHEDULER_FORMAT):
            if fmt.name == name:
                return fmt
        raise KeyError(name)  # settings validated every name: unreachable with loaded settings


def path_matches(relative_path: str, pattern: str) -> bool:
    """A glob on the path relative to the log directory; a pattern without '/' also matches the file name."""
    if fnmatch.fnmatchcase(relative_path, pattern):
        return True
    return "/" not in pattern and fnmatch.fnmatchcase(relative_path.rsplit("/", 1)[-1], pattern)


def selection(overrides: Iterable[tuple[str, str]] = (), custom: Iterable[tuple[str, str, str]] = ()) -> FormatSelection:
    """A FormatSelection from plain config values: (path pattern, name) and (name, pattern, contains)."""
    return FormatSelection(tuple(overrides), tuple(custom_format(*spec) for spec in custom))


