"""Failure signatures: the registry of every failure line the exporter recognizes.

``SIGNATURES`` is the one table: each ``Signature`` names the kinds it can give, the byte
literals (anchors) a line must hold before its matcher runs, the matcher, and the real
line that shows it (in ``fixture`` under tests/fixtures/, tests/test_signatures.py checks
both). The first signature in table order whose matcher accepts a line names the failure,
so specific signatures (a watchdog timeout, an out-of-memory reported as a CUDA error, an
AI Core exception reported with a CANN code) come before generic ones.

``classify`` looks at one line on its own. Tracebacks, torchrun's ChildFailedError summary
and the detail lines below an exception span several lines: exporter/parse/tracebacks.py
assembles those and uses the helpers here for their exception and continuation lines.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass

from exporter.parse import faults
from exporter.parse.patterns import lazy
from exporter.parse.records import ErrorEvent

try:
    from ahocorasick_rs import BytesAhoCorasick
except ImportError:  # pragma: no cover - a platform without the wheel
    BytesAhoCorasick = None  # type: ignore[misc,assignment]

Detail = dict[str, str | float]
Matcher = Callable[[str], ErrorEvent | None]

TRACEBACK_START = b"Traceback (most recent call last):"
CHILD_FAILED = b"ChildFailedError:"
ROOT_CAUSE = b"Root Cause (first observed failure)"
TERMINATE = b"terminate called after throwing an instance of '"
WHAT = b"what():"


@dataclass(frozen=True, slots=True)
class Signature:
    """One failure signature: what it names, when it is tried, and the real line that shows it."""

    name: str
    kinds: tuple[str, ...]  # the kinds its matcher can give (a signal exit names one by its signal)
    anchors: tuple[bytes, ...]  # the matcher runs only on lines holding one of these (parse/scan.py)
    match: Matcher
    fixture: str  # the fixture file, under tests/fixtures/, holding ``example``
    example: str  # a line a real program printed, byte for byte
    # Lines below it belong to the same failure (an exception's message, CANN's "TraceBack"
    # lines, NCCL's "Last error:"): they add detail, never a second event.
    continued: bool = False
    # A fuller report of the same failure usually follows (torchrun's ChildFailedError summary
    # after its agent's ``failed (exitcode: ...)`` line): the event waits for it, to the block's end.
    superseded: bool = False


# --- signal exits -------------------------------------------------------------------------

# The kind a process ended by a signal counts as; other signals (SIGABRT, SIGTERM, ...) and
# plain non-zero exits are child failures, ``elastic``, with the signal in the detail.
_SIGNAL_KINDS = {"SIGKILL": "killed", "SIGSEGV": "segfault", "SIGBUS": "hardware"}


def signal_name(exitcode: int) -> str | None:
    """The signal a negative exit code names (SIGABRT for -6): torch < 2.6 does not print it."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def exit_kind(signal_name: str | None) -> str:
    """The kind of a child that exited, by the signal that ended it (None: a non-zero exit code)."""
    return _SIGNAL_KINDS.get(signal_name or "", "elastic")


def _exit_event(exitcode: int, detail: Detail) -> ErrorEvent:
    name = signal_name(exitcode)
    if name:
        detail["signal"] = name
    return ErrorEvent(exit_kind(name), {"exitcode": exitcode, **detail})


# --- torch elastic, DeepSpeed launcher ----------------------------------------------------

# torchrun's agent, every logger layout: ``ERROR:torch.distributed.elastic.multiprocessing.api:failed``,
# ``... api: [ERROR] failed``, glog ``E0325 ... api.py:869] failed``.
_ELASTIC_FAILED = lazy(r"\bfailed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_DEEPSPEED_EXIT = lazy(r"sigkill_handler\] .* exits with return code = (-?\d+)")


def _elastic_failed(text: str) -> ErrorEvent | None:
    match = _ELASTIC_FAILED.search(text)
    if match is None:
        return None
    code, local_rank, pid = match.groups()
    return _exit_event(int(code), {"local_rank": int(local_rank), "pid": int(pid)})


# torchrun's agent told to stop: ``Received 15 death signal, shutting down workers`` (torch 2.4 names the signal,
# ``Received Signals.SIGTERM death signal``).
_DEATH_SIGNAL = lazy(r"Received (?:(?P<number>\d+)|Signals\.(?P<name>SIG[A-Z0-9]+)) death signal")


def _death_signal(text: str) -> ErrorEvent | None:
    match = _DEATH_SIGNAL.search(text)
    if match is None:
        return None
    name = match.group("name") or signal_name(-int(match.group("number")))
    return ErrorEvent("terminated", {"signal": name} if name else {})


# msrun's own console (mindspore/parallel/cluster/process_entity/_api.py, join_processes): a worker's
# ``subprocess.Popen.poll()`` return code, the negated signal of a worker a signal ended (-9 SIGKILL, -6 SIGABRT,
# -11 SIGSEGV), else its exit status. Older msrun prints no code (``Worker process 12345 exit with exception.``,
# mindspore-ai/mindspore 1d200336): a worker's failed exit, ``elastic``. The worker is named by pid only: the
# pipeline puts the event on the rank whose worker log's MindSpore records name that pid (follow/discover.PidRanks).
_MSRUN_EXIT = lazy(r"Worker process (\d+) exit with exception\.(?: Error code: (-?\d+)\.)?")


def _msrun_exit(text: str) -> ErrorEvent | None:
    match = _MSRUN_EXIT.search(text)
    if match is None:
        return None
    detail: Detail = {"pid": int(match.group(1)), "launcher": "msrun"}
    return ErrorEvent("elastic", detail) if match.group(2) is None else _exit_event(int(match.group(2)), detail)


def worker_pid(record: object) -> int | None:
    """The process msrun's report of a worker's exit names (it names no rank), else None (any other record)."""
    if type(record) is not ErrorEvent or record.rank is not None or record.detail.get("launcher") != "msrun":
        return None
    pid = record.detail.get("pid")
    return pid if type(pid) is int else None


def _deepspeed_exit(text: str) -> ErrorEvent | None:
    match = _DEEPSPEED_EXIT.search(text)
    return None if match is None else _exit_event(int(match.group(1)), {"launcher": "deepspeed"})


# --- NCCL ---------------------------------------------------------------------------------

_WATCHDOG = lazy(
    r"Watchdog caught collective operation timeout: "
    r"Work(?P<backend>[NH]CCL)\((?P<args>.*?)\) ran for (?P<ms>\d+) milliseconds")
_WATCHDOG_RANK = lazy(r"\[Rank (\d+)\] Watchdog caught")
_WORK_ARG = lazy(r"(\w+(?:\(ms\))?)=(\[[^\]]*\]|[^,]*)")
_WORK_FIELDS = {"SeqNum": "seq_num", "OpType": "op", "NumelIn": "numel_in", "NumelOut": "numel_out"}
# torch >= 2.2 also prints the short forms, with the process group's rank in ``[PG ... Rank N]``.
_WATCHDOG_SHORT = lazy(
    r"Rank (?P<rank>\d+)\]\s+(?:(?P<timeout>Timeout at NCCL work)|Exception \(either an error or timeout\) "
    r"detected by watchdog at work): (?P<seq>\d+)")
_ASYNC_EXCEPTION = lazy(r"Collective Work[NH]CCL\((?P<args>.*?)\) raised the following async exception")
_NCCL_ERROR_IN = lazy(r"NCCL error in: [^,]*, (?P<reason>[^,]*?)(?:, NCCL version (?P<version>[\w.+-]+))?\s*$")
_NCCL_CODE = lazy(
    r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError))\b")
# What each of those codes holds: "nccl" alone is in every line of an NCCL_DEBUG=INFO console on a host named for
# NCCL, and in its libraries' paths, which would send each such line through the matchers. "Error" is an anchor
# already (the fault knowledge's): the scanner keeps its anchors in one kernel (native.KERNEL_ANCHORS).
_NCCL_CODE_ANCHORS = (b"Error", b"ncclInvalid")
_DIST_BACKEND = lazy(r"DistBackendError: (?P<message>\S.*?)\s*$")


def _work_detail(args: str, detail: Detail) -> Detail:
    for name, raw in _WORK_ARG.findall(args):
        value = raw.strip()
        if name == "Timeout(ms)" and value.isdigit():
            detail["timeout_seconds"] = int(value) / 1000
        elif name in _WORK_FIELDS:
            detail[_WORK_FIELDS[name]] = int(value) if value.isdigit() else value
    return detail


def _nccl_timeout(text: str) -> ErrorEvent | None:
    match = _WATCHDOG.search(text)
    if match is None:
        return None
    detail = _work_detail(match.group("args"), {"elapsed_seconds": int(match.group("ms")) / 1000})
    rank = _WATCHDOG_RANK.search(text)
    if rank is not None:
        detail["pg_rank"] = int(rank.group(1))
    # torch_npu's ProcessGroupHCCL prints the same watchdog text for HCCL work.
    return ErrorEvent("nccl_timeout" if match.group("backend") == "NCCL" else "hccl_timeout", detail)


def _watchdog_short(text: str) -> ErrorEvent | None:
    match = _WATCHDOG_SHORT.search(text)
    if match is None:
        return None
    # "error or timeout": only "Timeout at" says which.
    kind = "nccl_timeout" if match.group("timeout") else "nccl"
    return ErrorEvent(kind, {"seq_num": int(match.group("seq")), "pg_rank": int(match.group("rank"))})


def _async_exception(text: str) -> ErrorEvent | None:
    match = _ASYNC_EXCEPTION.search(text)
    if match is None:
        return None
    detail = _work_detail(match.group("args"), {})
    version = _NCCL_ERROR_IN.search(text) or re.search(r"NCCL version ([\w.+-]+)", text)
    if version is not None:
        detail["nccl_version"] = version.group(version.lastindex or 1)
    return ErrorEvent("nccl", detail)


def _nccl(text: str) -> ErrorEvent | None:
    match = _NCCL_ERROR_IN.search(text)
    if match is None:
        return None
    detail: Detail = {"reason": match.group("reason")}
    if match.group("version"):
        detail["nccl_version"] = match.group("version")
    return ErrorEvent("nccl", detail)


def _dist_backend(text: str) -> ErrorEvent | None:
    match = _DIST_BACKEND.search(text)
    return None if match is None else ErrorEvent("nccl", {"message": match.group("message")[:200]})


def _nccl_code(text: str) -> ErrorEvent | None:
    match = _NCCL_CODE.search(text)
    return None if match is None else ErrorEvent("nccl", {"nccl_error": match.group(1)})


# --- gloo (torch.distributed on the CPU) ----------------------------------------------------

# gloo's transport names its source file (``gloo/transport/tcp/pair.cc``) before the message: a
# bare "Connection reset by peer" elsewhere (a download, a socket of the data loader) is not one.
_GLOO = lazy(
    r"gloo/transport/\w+/\w+\.cc:\d+\] (?:(?P<closed>Connection closed by peer)|Read error (?P<peer>\S+): "
    r"(?P<reset>Connection reset by peer)|Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) operation to complete)")
_PEER = lazy(r"by peer (\[[^\]]*\]:\d+)")


def _gloo(text: str) -> ErrorEvent | None:
    match = _GLOO.search(text)
    if match is None:
        return None
    detail: Detail = {"backend": "gloo"}
    if match.group("ms"):
        detail["op"] = match.group("op")
        detail["timeout_seconds"] = int(match.group("ms")) / 1000
        return ErrorEvent("collective_timeout", detail)
    peer = match.group("peer") or _PEER.search(text)
    detail["reason"] = "peer closed" if match.group("closed") else "peer reset"
    if peer is not None:
        detail["peer"] = peer if isinstance(peer, str) else peer.group(1)
    return ErrorEvent("collective", detail)


# --- MindSpore's CPU collectives (msrun on the CPU) ------------------------------------------

# MindSpore's own ring all-reduce over TCP (collective_ops_impl.cc): a receive not done within its timeout names
# the request ``[rank it waited for,counter]``; the kernel that ran it fails after it.
_MS_RING = lazy(r"RunRing\w*\] Ring (?P<op>\w+) wait (?:receiving \[(?P<peer>\d+),\d+\]|sending \S+) failed")
_MS_KERNEL = lazy(r"\] (?P<op>AllReduce|AllGather|ReduceScatter|Broadcast)CPUKernelMod launch failed")


def _mindspore_cpu_collective(text: str) -> ErrorEvent | None:
    ring = _MS_RING.search(text)
    if ring is not None:
        detail: Detail = {"backend": "mindspore_cpu", "op": ring.group("op")}
        if ring.group("peer"):
            detail["peer_rank"] = int(ring.group("peer"))
        return ErrorEvent("collective_timeout", detail)
    kernel = _MS_KERNEL.search(text)
    if kernel is None:
        return None
    return ErrorEvent("collective", {"backend": "mindspore_cpu", "op": kernel.group("op"), "reason": "kernel failed"})


# --- c10d store, rendezvous ---------------------------------------------------------------

_STORE_TIMEOUT = lazy(
    r"DistStoreError: Timed out after (?P<seconds>\d+) seconds waiting for (?:clients|workers)\. "
    r"(?P<joined>\d+)/(?P<expected>\d+)"
    r"|(?P<rendezvous>RendezvousTimeoutError)"
    r"|client socket has timed out after (?P<client_seconds>\d+)")


def _store_timeout(text: str) -> ErrorEvent | None:
    match = _STORE_TIMEOUT.search(text)
    if match is None:
        return None
    detail: Detail = {"reason": "rendezvous" if match.group("rendezvous") else "store"}
    seconds = match.group("seconds") or match.group("client_seconds")
    if seconds:
        detail["timeout_seconds"] = int(seconds)
    if match.group("joined"):
        detail["joined"], detail["expected"] = int(match.group("joined")), int(match.group("expected"))
    return ErrorEvent("nccl_timeout", detail)


# --- device memory ------------------------------------------------------------------------

_DEVICE_OOM = lazy(r"\b(CUDA|NPU|HIP|XPU|MPS)\b(?: error:)? out of memory")
_REQUESTED = lazy(r"Tried to allocate ([\d.]+ ?[KMGTP]?i?B)")
_DEVICE_INDEX = lazy(r"\b(GPU|NPU) (\d+)\b")
_MINDSPORE_OOM = lazy(
    r"Out of Memory!!! Request memory size: (?P<requested>\d+)B"
    r"|memory isn't enough and alloc failed.*?alloc size: (?P<alloc>\d+)B"
    r"|alloc size : (?P<size>\d+) is more than total mem size : (?P<total>\d+)")
_HOST_PINNED_OOM = lazy(r"cudaHostAlloc failed, ret\[(\d+)\], out of memory")
# c10's CPU allocator: ``DefaultCPUAllocator: can't allocate memory: you tried to allocate 1125899906842624 bytes``.
_CPU_OOM = lazy(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")


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
    match = _MINDSPORE_OOM.search(text)
    if match is None:
        return None
    detail: Detail = {"device": "npu", "requested_bytes": int(match.group("requested") or match.group("alloc")
                                                              or match.group("size"))}
    if match.group("total"):
        detail["total_bytes"] = int(match.group("total"))
    return ErrorEvent("oom", detail)


def _host_pinned_oom(text: str) -> ErrorEvent | None:
    # minddata's pinned host buffer for the device queue: the data pipeline stops with it.
    match = _HOST_PINNED_OOM.search(text)
    return None if match is None else ErrorEvent("oom", {"device": "host_pinned", "ret": int(match.group(1))})


# MindSpore's device context, the CPU's too: ``AllocateMemory] Allocate memory failed for size: 281474976710656``.
_MS_ALLOCATE = lazy(r"Allocate memory failed for size: (\d+)")


def _mindspore_allocate(text: str) -> ErrorEvent | None:
    match = _MS_ALLOCATE.search(text)
    return None if match is None else ErrorEvent("oom", {"requested_bytes": int(match.group(1))})


def _cpu_oom(text: str) -> ErrorEvent | None:
    match = _CPU_OOM.search(text)
    return None if match is None else ErrorEvent("oom", {"device": "cpu", "requested_bytes": int(match.group(1))})


# --- Ascend: CANN codes, runtime codes, HCCL ----------------------------------------------

# A CANN error code (``EI0006``, ``EZ9999``, ``EL0004``, ``E39009``), written to start with its
# literal: ``re`` then skips to each "E" instead of trying every position.
_CANN_CODE = lazy(r"(E(?<!\wE)[A-Z0-9]\d{4})\b")
# CANN 8 names the code: ``Memory_Allocation_Failure(EL0004):``.
_CANN_NAMED = lazy(r"\b([A-Z][\w/]*?)\((E[A-Z0-9]\d{4})\)")
# The kind a CANN code gives, by its name, its code, or its family (the letter after "E").
_CANN_NAME_KINDS = {"Memory_Allocation_Failure": "oom", "Device_Absent/Abnormal": "hardware",
                    "Inner_Error_Device_Status_Abnormal": "hardware"}
_CANN_CODE_KINDS = {"EL0004": "oom", "EL0001": "hardware", "E39009": "hardware"}
_CANN_FAMILY_KINDS = {"I": "hccl", "J": "hccl"}  # HCCL, HCCP
_HCCL_TEXT = lazy(r"HCCL function error|HCCL error in:|call hccl api failed|function error: Hccl\w*"
                        r"|HcclCommInitRootInfo fail|hccl fftsplus (?:task )?timeout|Stream synchronize timeout")
_HCCL_RET = lazy(r"error code is (\d+)")
_ERR_CODE = lazy(r"\b(ERR\d{5})\b")
# ACL runtime codes as torch_npu and the ACL samples print them.
_RUNTIME_CODE = lazy(r"(?:error code is |error code:|failed: |runtime result = )(\d{6})\b")
# The codes the signature below is anchored on; what each counts as is the fault knowledge's (parse/faults/).
_RUNTIME_CODE_ANCHORS = (b"507014", b"507015", b"507010", b"507048", b"107020")
_DEVICE_FAULT = lazy(
    r"there is an (?:exception of )?(?P<core>aicore|aivec) error|(?P<heartbeat>lost heartbeat)")


def _cann_code_kind(code: str, name: str | None) -> str:
    return (_CANN_NAME_KINDS.get(name or "") or _CANN_CODE_KINDS.get(code)
            or _CANN_FAMILY_KINDS.get(code[1], "other"))


def _ascend_detail(text: str, detail: Detail) -> Detail:
    """The codes a line adds to an Ascend failure: CANN code, HCCL return code, ERRxxxxx."""
    code = _CANN_CODE.search(text)
    if code is not None:
        detail.setdefault("code", code.group(1))
    ret = _HCCL_RET.search(text)
    if ret is not None and len(ret.group(1)) < 6:
        detail.setdefault("hccl_ret", int(ret.group(1)))
    err = _ERR_CODE.search(text)
    if err is not None:
        detail.setdefault("err_code", err.group(1))
    return detail


def _runtime_code(text: str) -> ErrorEvent | None:
    match = _RUNTIME_CODE.search(text)
    fault = None if match is None else faults.knowledge().codes.get(match.group(1))
    if match is None or fault is None or fault.kind is None:
        return None
    return ErrorEvent(fault.kind, _ascend_detail(text, {"runtime_code": int(match.group(1)), "reason": fault.fault}))


def _device_fault(text: str) -> ErrorEvent | None:
    match = _DEVICE_FAULT.search(text)
    if match is None:
        return None
    reason = "device heartbeat lost" if match.group("heartbeat") else f"{match.group('core')} exception"
    return ErrorEvent("hardware", _ascend_detail(text, {"reason": reason}))


def _hccl(text: str) -> ErrorEvent | None:
    match = _HCCL_TEXT.search(text)
    if match is None:
        return None
    return ErrorEvent("hccl", _ascend_detail(text, {"reason": match.group(0)}))


def _cann_code(text: str) -> ErrorEvent | None:
    named = _CANN_NAMED.search(text)
    code = named.group(2) if named else None
    if code is None:
        found = _CANN_CODE.search(text)
        code = found.group(1) if found else None
    if code is None:
        return None
    detail = _ascend_detail(text, {"code": code})
    if named is not None:
        detail["error"] = named.group(1)
    return ErrorEvent(_cann_code_kind(code, named.group(1) if named else None), detail)


# --- CUDA, the host, the hardware ---------------------------------------------------------

_CUDA_ERROR = lazy(r"CUDA error: (?P<message>.*?)\s*$")
_XID = lazy(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)")
_FALLEN_OFF = lazy(r"fallen off the bus")
_WORKER_SIGNAL = lazy(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<what>[^.]+)\.")
# How strsignal and faulthandler name a signal, and the signal that is.
_SIGNAL_TEXTS = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Killed": "SIGKILL",
                 "Aborted": "SIGABRT", "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
_OOM_KILLER = lazy(r"Out of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<process>[^)]*)\)")
# A shell's report of a job it lost to SIGKILL, bare or as ``run.sh: line 66: 777016 Killed  cmd``;
# "Killed" inside a sentence is not one (nor "Killed process", the kernel's second line).
# Also behind a timestamp a collector put first (moreutils' ``ts``: ``[2026-12-03 09:18:10] Killed``).
_SHELL_KILLED = lazy(
    r"(?:^|: line \d+: +(?P<pid>\d+) +|(?<=\])|^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[^\s\]]*\]? +)"
    r"(?:Killed|已杀死)(?P<command> {2,}\S.*)?\s*$")

_FATAL_PYTHON = lazy(r"Fatal Python error: (?P<what>.+?)\s*$")
_SHELL_SEGFAULT = lazy(r"(?:\b(?P<pid>\d+) +)?Segmentation fault(?:\s+\(core dumped\)|\s*$)")
_SIGSEGV = lazy(r"Signal 11 \(SIGSEGV\)(?: received by PID (\d+))?")


def _cuda(text: str) -> ErrorEvent | None:
    match = _CUDA_ERROR.search(text)
    if match is not None:
        return ErrorEvent("cuda", {"cuda_error": match.group("message")})
    return ErrorEvent("cuda") if "torch.AcceleratorError" in text else None


def _xid(text: str) -> ErrorEvent | None:
    match = _XID.search(text)
    if match is not None:
        return ErrorEvent("hardware", {"xid": int(match.group("xid")), "pci": match.group("pci")})
    return ErrorEvent("hardware", {"reason": "fallen off the bus"}) if _FALLEN_OFF.search(text) else None


def _signal_kind(what: str) -> tuple[str, str | None]:
    """A crash by a signal, named as strsignal names it: its kind (``other`` unless it has one) and signal."""
    name = _SIGNAL_TEXTS.get(what)
    return _SIGNAL_KINDS.get(name or "", "other"), name


def _worker_signal(text: str) -> ErrorEvent | None:
    match = _WORKER_SIGNAL.search(text)
    if match is None:
        return None
    kind, name = _signal_kind(match.group("what"))
    detail: Detail = {"pid": int(match.group("pid")), "process": "dataloader_worker"}
    if name:
        detail["signal"] = name
    return ErrorEvent(kind, detail)


def _oom_killer(text: str) -> ErrorEvent | None:
    match = _OOM_KILLER.search(text)
    if match is None:
        return None
    return ErrorEvent("killed", {"signal": "SIGKILL", "reason": "oom_killer", "pid": int(match.group("pid")),
                                 "process": match.group("process")})


def _shell_killed(text: str) -> ErrorEvent | None:
    match = _SHELL_KILLED.search(text)
    if match is None:
        return None
    detail: Detail = {"signal": "SIGKILL"}
    if match.group("pid"):
        detail["pid"] = int(match.group("pid"))
    return ErrorEvent("killed", detail)


def _fatal_python(text: str) -> ErrorEvent | None:
    match = _FATAL_PYTHON.search(text)
    if match is None:
        return None
    kind, name = _signal_kind(match.group("what"))
    detail: Detail = {"message": match.group(0).strip()}
    if name:
        detail["signal"] = name
    return ErrorEvent(kind, detail)


def _segfault(text: str) -> ErrorEvent | None:
    match = _SHELL_SEGFAULT.search(text)
    detail: Detail = {"signal": "SIGSEGV"}
    if match is None:
        received = _SIGSEGV.search(text)
        if received is None:
            return None
        if received.group(1):
            detail["pid"] = int(received.group(1))
        return ErrorEvent("segfault", detail)
    if match.group("pid"):
        detail["pid"] = int(match.group("pid"))
    return ErrorEvent("segfault", detail)


# --- the registry ---------------------------------------------------------------------------

_TORCH, _ELASTIC, _NCCL = "formats/errors_torch.log", "real/errors_torchelastic.log", "real/errors_nccl.log"
_ASCEND, _HOST, _ASCEND_WRITTEN = "real/errors_ascend.log", "real/errors_host.log", "formats/errors_ascend.log"
# Printed here by the real suite's runs (tests/real/, torch 2.13.0 under torchrun with gloo).
_DDP_OOM, _DDP_HANG = "real/torchrun_ddp_oom.log", "real/torchrun_ddp_hang_rank0.log"
_ASCEND_FAULTS = "real/errors_ascend_faults.log"  # MindCluster FaultDiag's fixtures and docs (SOURCES.md)
KNOWLEDGE_KINDS = ("hccl", "hccl_timeout", "hardware", "oom", "killed", "segfault", "terminated", "other")


def _knowledge_event(found: faults.Found) -> ErrorEvent | None:
    fault = found.fault
    if fault.kind is None:
        return None
    return ErrorEvent(fault.kind, {"code": found.code, "component": fault.component, "fault": fault.fault,
                                   "fault_id": fault.id})


def _knowledge(text: str) -> ErrorEvent | None:
    found = faults.recognise(text)
    return None if found is None else _knowledge_event(found)
# And by its MindSpore runs (mindspore 2.10.0 under msrun, 4 CPU workers).
_MS_OOM, _MS_HANG = "real/msrun_oom_worker_1.log", "real/msrun_hang_worker_2.log"
_MS_CONSOLE = "real/msrun_kill/msrun.log"

SIGNATURES: tuple[Signature, ...] = (
    Signature("nccl_watchdog_timeout", ("nccl_timeout", "hccl_timeout"),
              (b"Watchdog caught collective operation timeout",),
              _nccl_timeout, _NCCL,
              "[E ProcessGroupNCCL.cpp:464] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
              "OpType=ALLREDUCE, Timeout(ms)=10000) ran for 10917 milliseconds before timing out."),
    Signature("nccl_watchdog_short", ("nccl_timeout", "nccl"),
              (b"detected by watchdog at work", b"Timeout at NCCL work"),
              _watchdog_short, _NCCL,
              "[80749] [rank3]:[E321 02:07:08.465224069 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception (either an "
              "error or timeout) detected by watchdog at work: 1580, last "
              "enqueued NCCL work: 1582, last completed NCCL "
              "work: 1579."),
    Signature("device_oom", ("oom",), (b"out of memory",), _device_oom, _ASCEND_WRITTEN,
              "torch.OutOfMemoryError: NPU out of memory. Tried to allocate "
              "674.00 MiB (NPU 3; 60.96 GiB total capacity; "
              "59.80 GiB already allocated; 59.80 GiB current active; 311.27 MiB free; 60.12 GiB reserved in total by "
              "PyTorch)"),
    Signature("mindspore_oom", ("oom",), (b"Out of Memory!!!", b"memory isn't enough", b"more than total mem size"),
              _mindspore_oom, _ASCEND,
              "[ERROR] PRE_ACT(54175,fffdbcff91e0,python):2024-10-22-11:24:55.301.443 [mindspore/ccsrc/backend/common/"
              "mem_reuse/mem_dynamic_allocator.cc:392] AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : "
              "29356337664 plus TotalUsedByEventMemStatistics : 0 and plus "
              "alloc size : 301990400 is more than total mem "
              "size : 29464985600."),
    Signature("minddata_pinned_oom", ("oom",), (b"cudaHostAlloc failed",), _host_pinned_oom, _ASCEND,
              "[ERROR] "
              "MD(14433,7fea2effd700,python):2021-12-12-14:13:43.932.181 [mindspore/ccsrc/minddata/dataset/util/"
              "arena.cc:250] Init] cudaHostAlloc failed, ret[2], out of memory"),
    Signature("cpu_allocator_oom", ("oom",), (b"DefaultCPUAllocator: can't allocate memory",), _cpu_oom, _DDP_OOM,
              "[default1]:[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
              "can't allocate memory: you tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate "
              "memory)"),
    Signature("mindspore_allocate", ("oom",), (b"Allocate memory failed for size",), _mindspore_allocate, _MS_OOM,
              "[WARNING] ME(3937,7f5a65ffc6c0,python):2026-12-03-08:43:07.567.363 [mindspore/ccsrc/runtime/"
              "hardware_abstract/device_context/device_context.cc:113] AllocateMemory] Allocate memory failed for "
              "size: 281474976710656"),
    Signature("nvidia_xid", ("hardware",), (b"NVRM: Xid", b"fallen off the bus"), _xid, _HOST,
              "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"),
    Signature("dataloader_worker_signal", ("hardware", "killed", "segfault", "other"), (b"is killed by signal: ",),
              _worker_signal, _HOST,
              "RuntimeError: DataLoader worker (pid 56811) is killed by signal: Bus error. It is possible that "
              "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."),
    Signature("acl_runtime_code", ("hardware", "hccl_timeout"), _RUNTIME_CODE_ANCHORS,
              _runtime_code, _ASCEND,
              "[ERROR] aclrtSynchronizeStream(stream) failed: 507014 (/home/zhongxuan/ptoas-board-monitor/runtime/runs/"
              "20260627_182124_manual_pr864/npu_validation/Qwen3DecodeA3/qwen3_decode_incore_6/main.cpp:126)",
              continued=True),
    Signature("ascend_device_fault", ("hardware",), (b"aicore error", b"aivec error", b"lost heartbeat"),
              _device_fault, _ASCEND,
              "        Device[1] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]"),
    Signature("cann_named_code", ("oom", "hardware", "hccl", "other"),
              (b"Memory_Allocation_Failure", b"Device_Absent", b"Inner_Error_Device", b"AclNN_Inner_Error"),
              _cann_code, _ASCEND,
              "[ERROR] RecentErrMsg: [PID: 1613532] 2026-03-24-12:14:45.885.234 Memory_Allocation_Failure(EL0004): "
              "Failed to allocate memory.", continued=True),
    # Not b"HCCL" alone: every line of HCCL's own log, INFO and WARNING too, names its module HCCL.
    Signature("hccl", ("hccl",), (b"HCCL function error", b"HCCL error in:", b"hccl api failed",
                                  b"function error: Hccl", b"HcclCommInitRootInfo", b"fftsplus",
                                  b"Stream synchronize timeout"),
              _hccl, _ASCEND,
              "[ERROR] "
              "HCCL(36035,mindie_llm_backend_connector):2025-05-13-02:25:58.068.817 [op_base.cc:974][36818][Init]"
              "[CommRootInfoConfig]errNo[0x0000000005000002]HcclCommInitRootInfo failed.", continued=True),
    # A CANN code is E, a letter or digit and four digits. Three-byte anchors for the HCCL
    # families ("EI"/"EJ" appear in ordinary words, and a two-byte anchor slows the block scanner
    # five times, parse/scan.py); the other families by the codes CANN prints for inner errors.
    Signature("cann_code", ("hccl", "oom", "hardware", "other"),
              (*(f"E{series}{digit}".encode() for series in "IJ" for digit in "0123456789"),
               b"EE9999", b"EZ9999", b"EH9999", b"EL0004", b"EE1002"),
              _cann_code, _ASCEND,
              "[rank1]: EE9999: Inner Error!", continued=True),
    Signature("nccl_error_in", ("nccl",), (b"NCCL error in:",), _nccl, _NCCL,
              "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
              ":1333, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.6",
              continued=True),
    Signature("nccl_async_exception", ("nccl",), (b"raised the following async exception",), _async_exception, _NCCL,
              "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
              "following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), "
              "NCCL version 2.25.1", continued=True),
    Signature("dist_backend_error", ("nccl",), (b"DistBackendError: ",), _dist_backend, _TORCH,
              "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
              "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
              "2.26.2", continued=True),
    Signature("nccl_code", ("nccl",), _NCCL_CODE_ANCHORS, _nccl_code, _NCCL,
              "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "),
    Signature("gloo", ("collective", "collective_timeout"),
              (b"Connection closed by peer", b"Connection reset by peer", b"Timed out waiting "),
              _gloo, _DDP_HANG,
              "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
              "Timed out waiting 5000ms for recv operation to complete"),
    Signature("mindspore_cpu_collective", ("collective_timeout", "collective"),
              (b"] Ring ", b"CPUKernelMod launch failed"), _mindspore_cpu_collective, _MS_HANG,
              "[ERROR] DISTRIBUTED(6159,7ff1acffa6c0,python):2026-12-03-08:45:30.082.155 [mindspore/ccsrc/cluster/rpc/"
              "core/collective_ops_impl.cc:162] RunRingAllReduce] Ring ReduceScatter wait receiving [1,127] failed."),
    Signature("store_timeout", ("nccl_timeout",),
              (b"DistStoreError: Timed out", b"RendezvousTimeoutError", b"client socket has timed out"),
              _store_timeout, _HOST,
              "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/3 clients joined."),
    Signature("cuda_error", ("cuda",), (b"CUDA error", b"AcceleratorError"), _cuda, _NCCL,
              "(RayWorkerVllm pid=5304) [E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread terminated with "
              "exception: CUDA error: unknown error"),
    Signature("oom_killer", ("killed",), (b"Out of memory: Kill",), _oom_killer, _HOST,
              "[3017506.733819] Out of memory: Kill process 25635 (python) score 974 or sacrifice child"),
    Signature("shell_killed", ("killed",), (b"Killed", "已杀死".encode()), _shell_killed, _HOST,
              "run.sh: line 66: 777016 Killed                  CUDA_VISIBLE_DEVICES=$gpu python train.py"),
    Signature("deepspeed_launcher_exit", ("killed", "segfault", "hardware", "elastic"), (b"sigkill_handler",),
              _deepspeed_exit, _HOST,
              "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', "
              "'--local_rank=0', '--data_path', 'Dahoas/rm-static', 'Dahoas/full-hh-rlhf', "
              "'Dahoas/synthetic-instruct-gptj-pairwise', "
              "'yitingxie/rlhf-reward-datasets', 'openai/webgpt_comparisons', "
              "'stanfordnlp/SHP', '--data_split', '2,4,4', '--model_name_or_path', 'facebook/opt-125m', "
              "'--per_device_train_batch_size', '2', '--per_device_eval_batch_size', '8', '--max_seq_len', '512', "
              "'--learning_rate', '9.65e-6', '--weight_decay', '0.1', '--num_train_epochs', '2', "
              "'--gradient_accumulation_steps', '1', '--lr_scheduler_type', 'cosine', '--num_warmup_steps', '0', "
              "'--seed', '1234', '--zero_stage', '2', '--deepspeed', '--output_dir', "
              "'/content/DeepSpeedExamples/applications/DeepSpeed-Chat/output/actor-models/125m'] exits with return "
              "code = -9"),
    Signature("msrun_worker_exit", ("killed", "segfault", "hardware", "elastic"), (b"exit with exception.",),
              _msrun_exit, _MS_CONSOLE,
              "[ERROR] ME(29944:140069956213632,MainProcess):2026-12-03-15:28:02.398.000 [mindspore/parallel/cluster/"
              "process_entity/_api.py:365] Worker process 29960 exit with exception. Error code: -9."),
    Signature("torchelastic_failed", ("killed", "segfault", "hardware", "elastic"), (b"failed (exitcode: ",),
              _elastic_failed, _ELASTIC,
              "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 14447) "
              "of binary:", superseded=True),
    Signature("torchelastic_death_signal", ("terminated",), (b" death signal",), _death_signal, _ELASTIC,
              "W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] Received 15 death "
              "signal, shutting down workers"),
    Signature("fatal_python_error", ("segfault", "hardware", "killed", "other"), (b"Fatal Python error: ",),
              _fatal_python, _TORCH, "Fatal Python error: Segmentation fault"),
    Signature("segfault", ("segfault",), (b"Segmentation fault", b"SIGSEGV"), _segfault, _ELASTIC,
              "  traceback : Signal 11 (SIGSEGV) received by PID 6421"),
    # Last in the table, consulted on every candidate line all the same (``match``): MindCluster's
    # knowledge of Ascend faults names the fault, its code, component and advice.
    Signature("ascend_fault_knowledge", KNOWLEDGE_KINDS, faults.GATES, _knowledge, _ASCEND_FAULTS,
              "E30008: AI CPU operator execution time out."),
)


# (anchor, index of its signature in SIGNATURES): one anchor may serve several signatures.
_ANCHORS: tuple[tuple[bytes, int], ...] = tuple(
    (anchor, index) for index, sig in enumerate(SIGNATURES) for anchor in sig.anchors)

FAILURE_LITERALS = tuple(sorted(
    {anchor for anchor, _ in _ANCHORS} | {TRACEBACK_START, CHILD_FAILED, ROOT_CAUSE, TERMINATE}))


def _literal_finder() -> Callable[[bytes], list[int]]:
    """The indexes in FAILURE_LITERALS of the literals a line holds, in one pass.

    Aho-Corasick (ahocorasick_rs): under a microsecond for a 200-byte line, where one regular
    expression of the 84 literals took 13 us. Every line of a prefixed log (torchrun's
    ``[rank3]:``) goes through here, so this was most of its catch-up (docs/benchmarks.md).
    """
    if BytesAhoCorasick is None:
        return lambda line: [index for index, literal in enumerate(FAILURE_LITERALS) if literal in line]
    automaton = BytesAhoCorasick(list(FAILURE_LITERALS))
    return lambda line: [found for found, _, _ in automaton.find_matches_as_indexes(line, overlapping=True)]


_find_literals = _literal_finder()
_KNOWLEDGE = len(SIGNATURES) - 1  # ascend_fault_knowledge
# Signatures of Ascend codes and words whose kind the knowledge refines.
_ASCEND_GENERIC = frozenset({"acl_runtime_code", "ascend_device_fault", "cann_named_code", "hccl", "cann_code",
                             "device_oom", "mindspore_oom"})
# The signatures each literal is an anchor of.
_OWNERS: tuple[tuple[int, ...], ...] = tuple(
    tuple(index for anchor, index in _ANCHORS if anchor == literal) for literal in FAILURE_LITERALS)


def has_failure_literal(line: bytes) -> bool:
    """Whether a line holds any failure literal: most lines hold none and are no failure."""
    return bool(_find_literals(line))


def match(line: bytes) -> tuple[Signature, ErrorEvent] | None:
    """The first signature (in table order) that matches a raw line, with its event; None if none does.

    The fault knowledge (parse/faults/) is consulted on every line holding a failure literal: a
    fault it calls no failure (a corrected error, an ``[INFO]`` or ``[WARNING]`` line) makes the
    line none; a fault it knows names a line no signature does, overrides the kind of the generic
    Ascend signatures (a bare CANN code, a runtime code), and adds its code, component and name
    to a signature's event of the same kind. Another signature's different kind stands: its line
    is its own (an NCCL message that happens to hold a FaultDiag keyword).
    """
    literals = _find_literals(line)
    if not literals:
        return None
    text = line.decode("utf-8", "replace")
    found = None
    for index in sorted({owner for literal in literals for owner in _OWNERS[literal]} - {_KNOWLEDGE}):
        event = SIGNATURES[index].match(text)
        if event is not None:
            found = SIGNATURES[index], event
            break
    known = faults.recognise(text)
    if known is None:
        return found
    event = _knowledge_event(known)
    if event is None:  # no failure to the knowledge; a signature of its own line still knows better
        return None if found is None or found[0].name in _ASCEND_GENERIC else found
    if found is None:
        # An indented line is a detail of the record above it (CANN's TraceBack lines), never a failure of its own.
        return None if text[:1].isspace() else (SIGNATURES[_KNOWLEDGE], event)
    signature, specific = found
    if specific.detail.get("device") == "cuda":  # an NVIDIA device's line: no Ascend fault
        return found
    if signature.name in _ASCEND_GENERIC:  # a code or a word of Ascend's: the knowledge names the fault
        kind = specific.kind if event.kind == "other" else event.kind
    elif event.kind != specific.kind:  # a signature of its own line (NCCL, gloo, a launcher): it knows better
        return found
    else:
        kind = specific.kind
    return signature, ErrorEvent(kind, {**specific.detail, **event.detail}, specific.rank)


def classify(line: bytes) -> ErrorEvent | None:
    """The failure a raw line (a launcher prefix already removed) names, or None."""
    found = match(line)
    return None if found is None else found[1]


# ``module.ErrorType: message`` or a bare type, as Python prints the last line of a traceback.
_EXCEPTION_LINE = lazy(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|[A-Z]\w*)(?::|$)")
# Standalone lines only count as exception lines when the type says so (not "Solution:").
_STANDALONE_EXCEPTION = lazy(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)):")


def exception_type(text: str) -> str | None:
    """The exception type of a traceback's final line, or None if the line is not one."""
    if text[:1].isspace():
        return None
    found = _EXCEPTION_LINE.match(text)
    return found.group("type") if found else None


def standalone_exception_type(text: str) -> str | None:
    """The type of an exception printed outside a traceback (``torch.OutOfMemoryError: ...``)."""
    found = _STANDALONE_EXCEPTION.match(text)
    return found.group("type") if found else None


def continuation_detail(text: str) -> Detail:
    """What a line after an exception adds to its event: NCCL code, CANN codes."""
    detail: Detail = {}
    for name, pattern in (("nccl_error", _NCCL_CODE), ("code", _CANN_CODE), ("err_code", _ERR_CODE)):
        found = pattern.search(text)
        if found is not None:
            detail[name] = found.group(1)
    return detail


def failure_key(event: ErrorEvent, rank: int | None) -> tuple[object, ...] | None:
    """What identifies one failure among the lines that report it, or None when each line is one.

    A timed-out collective prints three lines or more (the watchdog line, its short forms,
    the exception, ``what():``); a child killed by a signal is reported by the agent's
    ``failed (exitcode: -9)`` line and again in its ChildFailedError summary.
    """
    detail = event.detail
    if "seq_num" in detail and event.kind in ("nccl", "nccl_timeout"):
        return "work", detail.get("pg_rank", rank), detail["seq_num"]
    if "pid" in detail and ("exitcode" in detail or "signal" in detail):
        return "exit", detail["pid"]
    return None
