"""A file's bytes to records: format parsers and failure matchers, pure and I/O free.

``LineParser.parse_block`` is the one entry point; steps leave as StepBatch, whatever the format.
"""

from exporter.parse.formats import BUILTIN_FORMATS, Format, FormatSelection
from exporter.parse.line_parser import LineParser, ParsedBlock
from exporter.parse.records import ErrorEvent, Named, Record, RunInfo, SchedulerEvent, Series, StepBatch

__all__ = ["BUILTIN_FORMATS", "ErrorEvent", "Format", "FormatSelection", "LineParser", "Named", "ParsedBlock",
           "Record", "RunInfo", "SchedulerEvent", "Series", "StepBatch"]
