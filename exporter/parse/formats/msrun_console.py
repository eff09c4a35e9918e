"""msrun's own console, kept beside its logs (``msrun ... --log_dir LOG_DIR > LOG_DIR/msrun.log 2>&1``).

With ``--join True`` msrun tails every worker's log to its console (``tail -f worker_<R>.log``, unranked and
interleaved) and adds a few lines of its own (mindspore/parallel/cluster/process_entity/_api.py). Only one of
those tells what no other file does: ``Worker process 29960 exit with exception. Error code: -9.``, the worker it
saw die, by pid (signatures.py ``msrun_worker_exit``; a SIGKILLed worker prints nothing, and the scheduler times
out whichever node it misses first). The tailed lines are copies of lines read in the workers' own files: read
here too, they would count every step and failure twice on an unranked series. So the console's series keeps only
its launcher's own reports (``launcher_record``); the pipeline puts a worker's exit on the rank whose log names
its pid.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.records import ErrorEvent, Record


def parse(text: str) -> None:
    """No step record: the console's step lines are the workers'."""
    return None


def launcher_record(record: Record) -> bool:
    """One of the console's own records: the launcher's report of a worker's exit (``launcher`` in its detail)."""
    return type(record) is ErrorEvent and "launcher" in record.detail


# Chosen by the file's role (discover.classify: ``msrun*.log``) or the configuration, never detected. The prefilter
# is a literal of msrun's exit line: the console's other lines, as many as all the workers' together, are not looked
# at by a format (failure literals are, and dropped by launcher_record).
FORMAT = register(Format("msrun_console", "mindspore", b"Worker process ", parse, role="launcher"))
