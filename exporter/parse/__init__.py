"""Lines to records: format parsers and failure matchers, pure and I/O free."""

from exporter.parse.formats import BUILTIN_FORMATS, Format, FormatSelection
from exporter.parse.line_parser import LineParser, ParsedBatch
from exporter.parse.records import ErrorEvent, Record, RunInfo, SchedulerEvent, StepBatch, StepRecord

__all__ = ["BUILTIN_FORMATS", "Format", "FormatSelection", "LineParser", "ParsedBatch", "Record", "StepRecord",
           "StepBatch", "ErrorEvent", "SchedulerEvent", "RunInfo"]
