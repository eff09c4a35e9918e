"""Lines to records: format parsers and failure matchers, pure and I/O free."""

from exporter.parse.line_parser import LineParser
from exporter.parse.records import ErrorEvent, Record, RunInfo, SchedulerEvent, StepRecord

__all__ = ["LineParser", "Record", "StepRecord", "ErrorEvent", "SchedulerEvent", "RunInfo"]
