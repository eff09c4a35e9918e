"""Multi-line failures: Python tracebacks, torchrun's ChildFailedError summary, and the
detail lines below a failure printed outside a traceback.

One ``Block`` follows one rank stream of a file (tee'd files interleave the tracebacks of
several ranks). A traceback yields one ``traceback`` event plus at most one event of a
specific kind (``oom``, ``nccl``, ...), both decided at the final exception line but
emitted when the block ends: the lines after it may still classify it (MindSpore prints an
empty ``RuntimeError: `` and the cause below) or chain it to the next traceback ("During
handling of the above exception ..."), which makes the pair one failure, of the first
specific kind seen. ``flush`` emits what is known of a pending failure at the end of a
read batch, so a crash that is the last thing a rank writes is never held back; the block
stays open, and its end emits only the events not emitted yet (an ``oom`` its later lines
showed). So what a failure counts as never depends on where a read split its lines; only
the facts of an event emitted early are those known at the time.
A failure line outside a traceback (``torch.distributed.DistBackendError: NCCL error in:``,
a CANN code) counts when it is read; the block that follows it (``Block.continuation``)
only absorbs its detail lines (``ncclSystemError: ...``, CANN's ``TraceBack`` lines), so
that they never count as failures of their own.
"""

from __future__ import annotations

from exporter.parse import signatures
from exporter.parse.patterns import lazy
from exporter.parse.records import ErrorEvent

# Lines that start a new log record end the continuation of an exception: timestamped
# logger lines, glog/c10 (``W0801 16:07:20``, ``[W801 16:07:20``), MindSpore
# (``[ERROR] MODULE(pid,``), a crash's own report (``Fatal Python error:``, C++ ``terminate``).
# CANN's ``[ERROR] 2025-03-26-17:01:03 (PID:159`` is a continuation.
_NEW_RECORD = lazy(
    r"^\s?(?:\[?\d{4}-\d\d-\d\d[ T_-]\d|\[?[IWEF]\d{3,4} \d|\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] [A-Z_]+\(\d"
    r"|Fatal Python error: |terminate called )")
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
_ELASTIC_FIELD = lazy(r"^\s*(time|host|rank|exitcode|error_file)\s*: (.*?)\s*$")
_RANK_FIELD = lazy(r"(-?\d+) \(local_rank: (\d+)\)")
_EXITCODE_FIELD = lazy(r"(-?\d+)(?: \(pid: (\d+)\))?(?:\s+\((SIG\w+)\))?")
_FAILURE_ENTRY = lazy(r"^\[\d+\]:\s*$")

# A traceback this long without its exception line, or an exception followed by this many
# continuation lines, is not one we understand: give up rather than hold state forever.
MAX_BLOCK_LINES = 500

_FRAMES, _AFTER, _BLANK_AFTER, _CHAINED, _ELASTIC = range(5)


class Block:
    """The open traceback or ChildFailedError summary of one rank stream."""

    __slots__ = ("finished", "_state", "_lines", "_exception", "_kind", "_detail", "_emitted",
                 "_chained_kind", "_chained_detail", "_elastic", "_other_failures", "_section",
                 "_separators")

    def __init__(self, elastic: bool = False) -> None:
        self._reset(_ELASTIC if elastic else _FRAMES)

    @classmethod
    def root_cause(cls) -> Block:
        """A ChildFailedError summary read from its ``Root Cause`` line on (its header was not in the log)."""
        block = cls(elastic=True)
        block._section, block._separators = "root", 1  # the closing separator ends it
        return block

    @classmethod
    def continuation(cls) -> Block:
        """The detail lines below a failure already counted: absorbed up to a blank line or a new record."""
        block = cls()
        block._state = _AFTER  # without an exception line of its own: it never emits an event
        return block

    def _reset(self, state: int) -> None:
        self.finished = False
        self._state = state
        self._lines = 0
        self._exception: str | None = None
        self._kind: str | None = None  # the specific kind, once known
        self._detail: signatures.Detail = {}
        self._emitted: set[str] = set()  # the kinds of the events handed out already
        self._chained_kind: str | None = None
        self._chained_detail: signatures.Detail = {}
        self._elastic: signatures.Detail = {"exception": "ChildFailedError"}
        self._other_failures = 0
        self._section = ""
        self._separators = 0

    def feed(self, body: bytes, starts_record: bool) -> tuple[list[ErrorEvent], bool]:
        """Events the line completes, and whether the line belongs to this block."""
        self._lines += 1
        if self._lines > MAX_BLOCK_LINES:
            return self._finish(), False
        text = body.decode("utf-8", "replace").rstrip("\r")
        if self._state == _ELASTIC:
            return self._feed_elastic(text)
        if self._state == _FRAMES:
            return self._feed_frames(text, body)
        blank = not text.strip()
        if text.startswith("Traceback (most recent call last):"):
            if self._state == _CHAINED:
                self._state = _FRAMES
                return [], True
            emitted = self._finish()
            self._reset(_FRAMES)
            return emitted, True
        if self._state == _AFTER:
            if blank:
                self._state = _BLANK_AFTER
                return [], True
            if starts_record or _NEW_RECORD.match(text):
                return self._finish(), False
            self._continue(text, body)
            return [], True
        if blank:
            return [], True
        if text.startswith(_CHAIN_MARKERS):
            self._state = _CHAINED
            self._chained_kind, self._chained_detail = self._kind, self._detail
            return [], True
        return self._finish(), False

    def flush(self) -> list[ErrorEvent]:
        """Emit what is known of a failure that is complete but still open to continuation lines."""
        if self._state in (_AFTER, _BLANK_AFTER, _CHAINED):
            return self._new_events()
        if self._state == _ELASTIC and "exitcode" in self._elastic:
            return self._new_elastic_event()
        return []

    def _feed_frames(self, text: str, body: bytes) -> tuple[list[ErrorEvent], bool]:
        if not text.strip() or text[0].isspace():
            return [], True  # a frame, a source line, a caret line
        exception = signatures.exception_type(text)
        if exception is None:
            return [], False  # another record of the same stream, interleaved
        if exception.endswith("ChildFailedError"):
            # The launcher's own traceback: its summary below is the failure (one elastic event).
            self._state = _ELASTIC
            return [], True
        self._state = _AFTER
        self._exception = exception
        specific = signatures.classify(body)
        if self._chained_kind is not None:  # the first failure is the cause, the chained one its consequence
            self._kind, self._detail = self._chained_kind, dict(self._chained_detail)
        elif specific is not None:
            self._kind, self._detail = specific.kind, specific.detail
        return [], True

    def _continue(self, text: str, body: bytes) -> None:
        if self._kind is None:
            specific = signatures.classify(body)
            if specific is not None:
                self._kind, self._detail = specific.kind, specific.detail
                return
        for name, value in signatures.continuation_detail(text).items():
            self._detail.setdefault(name, value)

    def _new_events(self) -> list[ErrorEvent]:
        """The failure's events not emitted yet: its specific kind once known, and the traceback."""
        exception = self._exception
        if exception is None:  # no exception line yet: no failure to report
            return []
        found = []
        if self._kind is not None and self._kind not in self._emitted:
            found.append(ErrorEvent(self._kind, {"exception": exception, **self._detail}))
        if "traceback" not in self._emitted:
            found.append(ErrorEvent("traceback", {"exception": exception}))
        self._emitted.update(event.kind for event in found)
        return found

    def _finish(self) -> list[ErrorEvent]:
        self.finished = True
        if self._state == _ELASTIC:
            return self._new_elastic_event() if self._separators else []
        return self._new_events()

    def _new_elastic_event(self) -> list[ErrorEvent]:
        """One event for the summary, named by its root cause's signal: SIGKILL is ``killed``, SIGSEGV ``segfault``."""
        if "elastic" in self._emitted:
            return []
        self._emitted.add("elastic")
        detail = dict(self._elastic)
        signal = detail.get("signal")
        kind = signatures.exit_kind(signal if isinstance(signal, str) else None)
        return [ErrorEvent(kind, {"exception": detail.pop("exception"), "other_failures": self._other_failures,
                                  **detail})]

    def _feed_elastic(self, text: str) -> tuple[list[ErrorEvent], bool]:
        stripped = text.strip()
        if stripped and set(stripped) == {"="}:
            self._separators += 1
            if self._separators == 2:
                return self._finish(), True
            return [], True
        if stripped.startswith("Root Cause"):
            self._section = "root"
        elif stripped.startswith("Failures:"):
            self._section = "failures"
        elif self._section == "failures" and _FAILURE_ENTRY.match(stripped):
            self._other_failures += 1
        elif self._section == "root":
            self._root_cause_field(text)
        return [], True

    def _root_cause_field(self, text: str) -> None:
        field = _ELASTIC_FIELD.match(text)
        if field is None:
            return
        name, value = field.groups()
        detail = self._elastic
        if name == "host":
            detail["host"] = value
        elif name == "rank":
            ranks = _RANK_FIELD.match(value)
            if ranks is not None:
                detail["root_cause_rank"], detail["root_cause_local_rank"] = int(ranks.group(1)), int(ranks.group(2))
        elif name == "exitcode":
            exit_match = _EXITCODE_FIELD.match(value)
            if exit_match is not None:
                code, pid, printed_signal = exit_match.groups()
                detail["exitcode"] = int(code)
                if pid:
                    detail["pid"] = int(pid)
                signal_name = printed_signal or signatures.signal_name(int(code))
                if signal_name:
                    detail["signal"] = signal_name
