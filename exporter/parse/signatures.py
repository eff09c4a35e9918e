"""Failure signatures: one matcher per error kind, cheap byte prefilters first.

``classify`` looks at one line on its own. Tracebacks and torchrun's ChildFailedError
summary span several lines: exporter/parse/tracebacks.py assembles those and uses the helpers
here for their exception and continuation lines. The rules are those of
docs/formats-research.md section 0 (one event per traceback, ``NCCL error in:`` rather than
a bare "NCCL error", ...).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

from exporter.parse.records import ErrorEvent

try:
    from ahocorasick_rs import BytesAhoCorasick
except ImportError:  # pragma: no cover - a platform without the wheel
    BytesAhoCorasick = None  # type: ignore[misc,assignment]

Detail = dict[str, str | float]

TRACEBACK_START = b"Traceback (most recent call last):"
CHILD_FAILED = b"ChildFailedError:"
TERMINATE = b"terminate called after throwing an instance of '"
WHAT = b"what():"

_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: "
    r"Work(?P<backend>[NH]CCL)\((?P<args>.*?)\) ran for (?P<ms>\d+) milliseconds")
_WATCHDOG_RANK = re.compile(r"\[Rank (\d+)\] Watchdog caught")
_WORK_ARG = re.compile(r"(\w+(?:\(ms\))?)=(\[[^\]]*\]|[^,]*)")
_WORK_FIELDS = {"SeqNum": "seq_num", "OpType": "op", "NumelIn": "numel_in", "NumelOut": "numel_out"}

_DEVICE_OOM = re.compile(r"\b(CUDA|NPU|HIP|XPU|MPS)\b(?: error:)? out of memory")
_REQUESTED = re.compile(r"Tried to allocate ([\d.]+ ?[KMGTP]?i?B)")
_DEVICE_INDEX = re.compile(r"\b(GPU|NPU) (\d+)\b")
_MINDSPORE_OOM = re.compile(r"Out of Memory!!! Request memory size: (\d+)B")
_MINDSPORE_ALLOC = re.compile(r"memory isn't enough and alloc failed.*?alloc size: (\d+)B")

_NCCL_ERROR_IN = re.compile(r"NCCL error in: [^,]*, (?P<reason>[^,]*?)(?:, NCCL version (?P<version>[\w.+-]+))?\s*$")
_NCCL_CODE = re.compile(
    r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError))\b")

# ``\b(E[IJ]\d{4})\b``, written to start with its literal: ``re`` then skips to each "E"
# instead of trying every position (20 times faster on a line without a code).
_CANN_CODE = re.compile(r"(E(?<!\wE)[IJ]\d{4})\b")
_HCCL_TEXT = re.compile(r"HCCL function error|HCCL error in:|call hccl api failed|function error: Hccl\w*")
_HCCL_RET = re.compile(r"error code is (\d+)")
_ERR_CODE = re.compile(r"\b(ERR\d{5})\b")

_CUDA_ERROR = re.compile(r"CUDA error: (?P<message>.*?)\s*$")

_FATAL_PYTHON = re.compile(r"Fatal Python error: (?P<what>.+?)\s*$")
# What faulthandler names the signal, and the kind that crash counts as.
_FATAL_SIGNALS = {
    "Segmentation fault": ("segfault", "SIGSEGV"),
    "Bus error": ("segfault", "SIGBUS"),
    "Aborted": ("other", "SIGABRT"),
    "Floating point exception": ("other", "SIGFPE"),
    "Illegal instruction": ("other", "SIGILL"),
}
_SHELL_SEGFAULT = re.compile(r"(?:\b(?P<pid>\d+) +)?Segmentation fault(?:\s+\(core dumped\)|\s*$)")
_SIGSEGV = re.compile(r"Signal 11 \(SIGSEGV\)")

# ``module.ErrorType: message`` or a bare type, as Python prints the last line of a traceback.
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|[A-Z]\w*)(?::|$)")
# Standalone lines only count as exception lines when the type says so (not "Solution:").
_STANDALONE_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)):")


def _nccl_timeout(text: str) -> ErrorEvent | None:
    match = _WATCHDOG.search(text)
    if match is None:
        return None
    detail: Detail = {"elapsed_seconds": int(match.group("ms")) / 1000}
    for name, raw in _WORK_ARG.findall(match.group("args")):
        value = raw.strip()
        if name == "Timeout(ms)" and value.isdigit():
            detail["timeout_seconds"] = int(value) / 1000
        elif name in _WORK_FIELDS:
            detail[_WORK_FIELDS[name]] = int(value) if value.isdigit() else value
    rank = _WATCHDOG_RANK.search(text)
    if rank is not None:
        detail["pg_rank"] = int(rank.group(1))
    # torch_npu's ProcessGroupHCCL prints the same watchdog text for HCCL work.
    return ErrorEvent("nccl_timeout" if match.group("backend") == "NCCL" else "hccl", detail)


def _device_oom(text: str) -> ErrorEvent | None:
    match = _DEVICE_OOM.search(text)
    if match is None:
        return None
    detail: Detail = {"device": match.group(1).lower()}
    requested = _REQUESTED.search(text)
    if requested is not None:
        detail["requested"] = requested.group(1)
    index = _DEVICE_INDEX.search(text, match.end())
    if index is not None:
        detail[index.group(1).lower()] = int(index.group(2))
    return ErrorEvent("oom", detail)


def _mindspore_oom(text: str) -> ErrorEvent | None:
    match = _MINDSPORE_OOM.search(text) or _MINDSPORE_ALLOC.search(text)
    if match is None:
        return None
    return ErrorEvent("oom", {"device": "npu", "requested_bytes": int(match.group(1))})


def _nccl(text: str) -> ErrorEvent | None:
    match = _NCCL_ERROR_IN.search(text)
    if match is None:
        return None
    detail: Detail = {"reason": match.group("reason")}
    if match.group("version"):
        detail["nccl_version"] = match.group("version")
    return ErrorEvent("nccl", detail)


def _nccl_code(text: str) -> ErrorEvent | None:
    match = _NCCL_CODE.search(text)
    return None if match is None else ErrorEvent("nccl", {"nccl_error": match.group(1)})


def _hccl(text: str) -> ErrorEvent | None:
    code = _CANN_CODE.search(text)
    if code is None and _HCCL_TEXT.search(text) is None:
        return None
    detail: Detail = {}
    if code is not None:
        detail["code"] = code.group(1)
    ret = _HCCL_RET.search(text)
    if ret is not None:
        detail["hccl_ret"] = int(ret.group(1))
    err = _ERR_CODE.search(text)
    if err is not None:
        detail["err_code"] = err.group(1)
    return ErrorEvent("hccl", detail)


def _cuda(text: str) -> ErrorEvent | None:
    match = _CUDA_ERROR.search(text)
    if match is not None:
        return ErrorEvent("cuda", {"cuda_error": match.group("message")})
    return ErrorEvent("cuda") if "torch.AcceleratorError" in text else None


def _fatal_python(text: str) -> ErrorEvent | None:
    match = _FATAL_PYTHON.search(text)
    if match is None:
        return None
    kind, signal_name = _FATAL_SIGNALS.get(match.group("what"), ("other", None))
    detail: Detail = {"message": match.group(0).strip()}
    if signal_name:
        detail["signal"] = signal_name
    return ErrorEvent(kind, detail)


def _segfault(text: str) -> ErrorEvent | None:
    match = _SHELL_SEGFAULT.search(text)
    if match is None:
        return ErrorEvent("segfault", {"signal": "SIGSEGV"}) if _SIGSEGV.search(text) else None
    detail: Detail = {"signal": "SIGSEGV"}
    if match.group("pid"):
        detail["pid"] = int(match.group("pid"))
    return ErrorEvent("segfault", detail)


# (byte prefilter, matcher). Order matters: the first match wins, so specific signatures
# (a watchdog timeout, an out-of-memory reported as a CUDA error) come before generic ones.
_SIGNATURES: tuple[tuple[bytes, Callable[[str], ErrorEvent | None]], ...] = (
    (b"Watchdog caught collective operation timeout", _nccl_timeout),
    (b"out of memory", _device_oom),
    (b"Out of Memory!!!", _mindspore_oom),
    (b"memory isn't enough", _mindspore_oom),
    (b"NCCL error in:", _nccl),
    (b"nccl", _nccl_code),
    # A CANN code is E[IJ] and four digits. Three bytes rather than "EI"/"EJ": those appear in
    # ordinary words, and a two-byte anchor slows the block scanner five times (parse/scan.py).
    *((f"E{series}{digit}".encode(), _hccl) for series in "IJ" for digit in "0123456789"),
    (b"HCCL", _hccl),
    (b"hccl api failed", _hccl),
    (b"function error: Hccl", _hccl),
    (b"CUDA error", _cuda),
    (b"AcceleratorError", _cuda),
    (b"Fatal Python error: ", _fatal_python),
    (b"Segmentation fault", _segfault),
    (b"SIGSEGV", _segfault),
)


# One search for every literal above: most lines contain none, and one regular expression
# scan costs about half of the separate substring tests.
FAILURE_LITERALS = tuple(sorted(
    {prefilter for prefilter, _ in _SIGNATURES} | {TRACEBACK_START, CHILD_FAILED, TERMINATE}, key=len, reverse=True))
FAILURE_GATE = re.compile(b"|".join(re.escape(literal) for literal in FAILURE_LITERALS))


def _present_prefilters() -> Callable[[bytes], set[int] | None]:
    """The indexes in _SIGNATURES of the prefilters a line holds, in one pass (overlaps included)."""
    if BytesAhoCorasick is None:
        return lambda line: None
    automaton = BytesAhoCorasick([prefilter for prefilter, _ in _SIGNATURES])
    return lambda line: {index for index, _, _ in automaton.find_matches_as_indexes(line, overlapping=True)}


_present = _present_prefilters()


def classify(line: bytes) -> ErrorEvent | None:
    """The first failure signature in a raw line (a launcher prefix already removed), or None."""
    present = _present(line)  # one pass instead of a substring test per signature
    if present is None:
        present = {index for index, (prefilter, _) in enumerate(_SIGNATURES) if prefilter in line}
    for index in sorted(present):  # in the order of _SIGNATURES: the first that matches names the failure
        event = _SIGNATURES[index][1](line.decode("utf-8", "replace"))
        if event is not None:
            return event
    return None


def exception_type(text: str) -> str | None:
    """The exception type of a traceback's final line, or None if the line is not one."""
    if text[:1].isspace():
        return None
    match = _EXCEPTION_LINE.match(text)
    return match.group("type") if match else None


def standalone_exception_type(text: str) -> str | None:
    """The type of an exception printed outside a traceback (``torch.OutOfMemoryError: ...``)."""
    match = _STANDALONE_EXCEPTION.match(text)
    return match.group("type") if match else None


def continuation_detail(text: str) -> Detail:
    """What a line after an exception adds to its event: NCCL code, CANN codes."""
    detail: Detail = {}
    for name, pattern in (("nccl_error", _NCCL_CODE), ("code", _CANN_CODE), ("err_code", _ERR_CODE)):
        match = pattern.search(text)
        if match is not None:
            detail[name] = match.group(1)
    return detail


def signal_name(exitcode: int) -> str | None:
    """SIGABRT for a child that exited with -6: torch < 2.6 does not print the name."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None
