"""Failure signatures: one matcher per error kind, cheap byte prefilters first."""

from __future__ import annotations

import re

from exporter.parse.records import ErrorEvent

# (kind, byte prefilter, pattern). Order matters: the first match wins, so specific
# signatures (a NCCL timeout) come before generic ones (a CUDA error).
_SIGNATURES: tuple[tuple[str, bytes, re.Pattern[str]], ...] = (
    ("oom", b"out of memory", re.compile(r"(CUDA|NPU|HBM|device) out of memory", re.IGNORECASE)),
    ("oom", b"Out of Memory", re.compile(r"Out of Memory!+")),
    ("nccl_timeout", b"Watchdog caught collective operation timeout",
     re.compile(r"Watchdog caught collective operation timeout.*?OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<timeout_ms>\d+)")),
    ("nccl", b"NCCL error", re.compile(r"NCCL error")),
    ("hccl", b"HCCL", re.compile(r"HCCL[^\n]*(error|fail|timeout)", re.IGNORECASE)),
    ("cuda", b"CUDA error", re.compile(r"CUDA error: (?P<message>.+)")),
    ("segfault", b"Segmentation fault", re.compile(r"Segmentation fault")),
    ("segfault", b"Fatal Python error", re.compile(r"Fatal Python error")),
    ("elastic", b"ChildFailedError", re.compile(r"ChildFailedError")),
)

TRACEBACK_START = "Traceback (most recent call last):"
# The exception line that ends a traceback: ``module.ErrorType: message`` or a bare type.
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)|[A-Z]\w*)(:|$)")


def match_signature(line: bytes) -> ErrorEvent | None:
    """The first failure signature in a raw line, or None."""
    for kind, prefilter, pattern in _SIGNATURES:
        if prefilter in line:
            text = line.decode("utf-8", "replace")
            match = pattern.search(text)
            if match is not None:
                return ErrorEvent(kind, _detail(match.groupdict()))
    return None


def _detail(groups: dict[str, str | None]) -> dict[str, str | float]:
    detail: dict[str, str | float] = {}
    for name, value in groups.items():
        if value is None:
            continue
        if name == "timeout_ms":
            detail["timeout_seconds"] = int(value) / 1000
        else:
            detail[name] = value.strip()
    return detail


def exception_type(text: str) -> str | None:
    """The exception type of a traceback's final line, or None if the line is not one."""
    if text[:1].isspace():
        return None
    match = _EXCEPTION_LINE.match(text)
    return match.group("type") if match else None
