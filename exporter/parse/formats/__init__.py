"""The log formats, and how a file's format is chosen.

Every module of this package is one format and registers itself (registry.py); importing
the package imports them all. A file's format is the configuration's override, else the
format its role calls for (scheduler.log), else the first of BUILTIN_FORMATS, in detection
order, whose parser reads one of its lines.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.parse import custom_regex
from exporter.parse.formats.registry import Banner, Format, SegmentShape, registered

__all__ = ["BUILTIN_FORMATS", "BUILTIN_NAMES", "Banner", "Format", "FormatSelection", "SegmentShape", "custom_format",
           "selection"]


def _import_format_modules() -> None:
    # A directory listing rather than pkgutil.iter_modules: ten times cheaper, and this runs
    # at every start (the catch-up benchmark counts imports).
    for entry in sorted(os.scandir(os.path.dirname(__file__)), key=lambda entry: entry.name):
        name, extension = os.path.splitext(entry.name)
        if extension == ".py" and not name.startswith("_") and name != "registry":
            importlib.import_module(f"{__name__}.{name}")


_import_format_modules()
# Auto-detection order, and every format a file can be given by name.
BUILTIN_FORMATS: tuple[Format, ...] = tuple(sorted((fmt for fmt in registered() if fmt.detection_order is not None),
                                                   key=lambda fmt: (fmt.detection_order, fmt.name)))
BUILTIN_NAMES = (*(fmt.name for fmt in BUILTIN_FORMATS),
                 *sorted(fmt.name for fmt in registered() if fmt.detection_order is None))
_FOR_ROLE = {fmt.role: fmt for fmt in registered() if fmt.role}


def custom_format(name: str, pattern: str, contains: str = "") -> Format:
    """A user-defined format; ValueError with a message for the user when the pattern is unusable."""
    return Format(name, "", contains.encode(), custom_regex.make_parser(custom_regex.compile_pattern(pattern)))


@dataclass(frozen=True, slots=True)
class FormatSelection:
    """Which format each file gets: a config override, the one of its role, or auto-detection."""

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
        # Chosen by the file, never by detection: worker logs print some scheduler lines too.
        return _FOR_ROLE.get(role)

    def _by_name(self, name: str) -> Format:
        for fmt in (*self.custom_formats, *registered()):
            if fmt.name == name:
                return fmt
        raise KeyError(name)  # settings validated every name: unreachable with loaded settings


def path_matches(relative_path: str, pattern: str) -> bool:
    """A glob on the path relative to the log directory; a pattern without '/' also matches the file name."""
    if fnmatch.fnmatchcase(relative_path, pattern):
        return True
    return "/" not in pattern and fnmatch.fnmatchcase(relative_path.rsplit("/", 1)[-1], pattern)


def selection(overrides: Iterable[tuple[str, str]] = (),
              custom: Iterable[tuple[str, str, str]] = ()) -> FormatSelection:
    """A FormatSelection from plain config values: (path pattern, name) and (name, pattern, contains)."""
    return FormatSelection(tuple(overrides), tuple(custom_format(*spec) for spec in custom))
