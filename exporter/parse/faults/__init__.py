"""Ascend fault knowledge: which fault a failure line is, by MindCluster FaultDiag's public knowledge.

``ascend.json`` (built by scripts/build_ascend_faults.py from MindCluster's kg-config.json,
Apache License 2.0; docs/ascend-faults.md) holds one entry per fault: its keywords (each
alternative a list that must appear in order on one line, as FaultDiag matches) or a regex,
the kind it counts as (exporter/kinds.py; none for what counts nothing: a corrected error, a
success message), its code, component and one line of advice. Two tables add the CANN error
codes (``EI0006``) and ACL runtime codes (``507053``) a line may print.

Cost: the file is read and the keyword automaton built on the first line that needs them,
never at import. The block scanner finds candidate lines by ``GATES`` alone (a few literals;
a thousand keywords as anchors made it ten times slower, docs/benchmarks.md); the keywords
and regexes run only on those lines.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any, NamedTuple

try:
    from ahocorasick_rs import AhoCorasick, Implementation
except ImportError:  # pragma: no cover - a platform without the wheel
    AhoCorasick = None  # type: ignore[misc,assignment]

# The literals a line must hold for the knowledge to be consulted (besides every other failure
# literal of parse/signatures.py): a CANN or MindSpore error record, a device fault event, an
# exception or failure message, and host kernel faults that say none of these words.
GATES: tuple[bytes, ...] = (
    b"[ERROR]", b"Event id=0x", b"event_id", b"Sensor Type=0x", b"rror", b"fail", b"Fail", b"FAIL",
    b"xception", b"LOCKUP", b"Kernel panic", b"blocked for more than", b"stalls on", b"ExitStatus",
    # The CANN codes of the table that parse/signatures.py's own CANN anchors do not cover
    # (tests/test_faults.py checks that every one is covered).
    b"E19999", b"E30008", b"E39999", b"E89999", b"EN9999", b"EZ9903", b"EE1001",
)

# Log levels that make a line no failure, whatever it says (CANN and MindSpore ``[WARNING]``,
# the NPU driver's ``[ascend] [drv_pcie] [INFO]``): looked for near the line's start.
# glog and c10 (``W0801 16:07:20``, ``[W socket.cpp:436]``) at the start; syslog's ``|warning|``.
_QUIET_LEVEL = re.compile(r"\[(?:INFO|WARNING|WARN|DEBUG|TRACE)\]|^\s*\[?[IW]\d{0,4} |\|(?:info|notice|warning|debug)\|")
_LEVEL_REACH = 120
_CANN_CODE = re.compile(r"(E(?<!\wE)[A-Z0-9]\d{4})\b")
_RUNTIME_CODE = re.compile(r"(?:error code is |error code:|error code |failed: |runtime result = |ret=|retCode=)(\d{6})\b")
# Where each log family prints, for a tie between two faults the same keywords name: the
# training console's own reading first.
_SOURCE_ORDER = {"worker": 0, "plog": 1, "device": 2, "kernel": 3}


class Fault(NamedTuple):
    """One fault of the knowledge (a NamedTuple: 800 of them are made on first use, cheaply)."""

    id: str  # MindCluster's code for it (0x80C78008, AISW_CANN_HCCL_027), or the CANN/runtime code
    kind: str | None  # the error kind it counts as; None: recognised, counts nothing
    code: str  # the code exported as a label value (a CANN or runtime code where there is one)
    component: str  # HCCL, RUNTIME, DRV, NPU, OS, MindSpore, PyTorch, ...
    fault: str  # its short name
    advice: str
    source: str  # where it is printed: worker, plog, device, kernel
    family: str = ""  # MindCluster's log family
    explains: tuple[str, ...] = ()  # the faults it causes, by id (MindCluster's rules)


class Found(NamedTuple):
    """A line's fault, with the code the line itself printed where the knowledge knows it."""

    fault: Fault
    code: str


class Knowledge:
    """The loaded table: keyword alternatives behind one automaton, regexes, code tables."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.faults: list[Fault] = []
        self.codes: dict[str, Fault] = {}  # CANN and runtime codes
        self._alternatives: list[tuple[int, tuple[str, ...], int]] = []  # (fault, keywords, weight)
        self._regexes: list[tuple[int, re.Pattern[str]]] = []
        for table in ("cann_codes", "runtime_codes"):
            for row in data[table]:
                self.codes[row["code"]] = Fault(row["code"], row["kind"], row["code"], row["component"], row["fault"],
                                                row["advice"], "worker")
        for row in data["faults"]:
            index = len(self.faults)
            self.faults.append(Fault(row["id"], row["kind"], row["code"], row["component"], row["fault"],
                                     row.get("advice", ""), row["source"], row["family"],
                                     tuple(row.get("explains", ()))))
            for keywords in row.get("keywords", ()):
                self._alternatives.append((index, tuple(keywords), sum(map(len, keywords))))
            if row.get("regex"):
                self._regexes.append((index, re.compile(row["regex"])))
        self.by_id = {fault.id: fault for fault in self.faults}
        # Every code a label may carry, and the fault it names (the first fault of a shared code).
        self.by_code: dict[str, Fault] = {}
        for fault in (*self.codes.values(), *self.faults):
            self.by_code.setdefault(fault.code, fault)
            self.by_code.setdefault(fault.id, fault)
        # Each alternative's longest keyword stands for it in the automaton; the others are checked after.
        keywords = sorted({max(words, key=len) for _, words, _ in self._alternatives})
        self._keywords = keywords
        number = {word: position for position, word in enumerate(keywords)}
        # For each keyword, the alternatives it is the longest keyword of: an alternative is
        # tried only when that one is present (then all of its keywords, in order).
        self._by_keyword: list[list[int]] = [[] for _ in keywords]
        for position, (_, words, _) in enumerate(self._alternatives):
            self._by_keyword[number[max(words, key=len)]].append(position)
        self._automaton = (AhoCorasick(keywords, implementation=Implementation.NoncontiguousNFA) if AhoCorasick is not None and keywords
                           else None)

    def _present(self, text: str) -> set[int]:
        if self._automaton is not None:
            return {found for found, _, _ in self._automaton.find_matches_as_indexes(text, overlapping=True)}
        return {position for position, word in enumerate(self._keywords) if word in text}

    def fault_of(self, text: str) -> Fault | None:
        """The fault whose keywords (all, in order) or regex a line holds; the most specific when several do."""
        best: tuple[int, int, int] | None = None
        for keyword in self._present(text):
            for position in self._by_keyword[keyword]:
                index, words, weight = self._alternatives[position]
                if not _in_order(words, text):
                    continue
                rank = (-weight, _SOURCE_ORDER.get(self.faults[index].source, 9), index)
                if best is None or rank < best:
                    best = rank
        for index, pattern in self._regexes:
            if pattern.search(text) is not None:
                rank = (-len(pattern.pattern), _SOURCE_ORDER.get(self.faults[index].source, 9), index)
                if best is None or rank < best:
                    best = rank
        return self.faults[best[2]] if best is not None else None

    def code_in(self, text: str) -> Fault | None:
        """The CANN or runtime code a line prints, where the tables know it."""
        for pattern in (_RUNTIME_CODE, _CANN_CODE):
            for found in pattern.finditer(text):
                fault = self.codes.get(found.group(1))
                if fault is not None:
                    return fault
        return None


def _in_order(words: tuple[str, ...], text: str) -> bool:
    at = 0
    for word in words:
        at = text.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


_loaded: Knowledge | None = None


def knowledge() -> Knowledge:
    """The table, read on first use."""
    global _loaded
    if _loaded is None:
        text = resources.files(__package__).joinpath("ascend.json").read_text(encoding="utf-8")
        _loaded = Knowledge(json.loads(text))
    return _loaded


def quiet_level(text: str) -> bool:
    """Whether the line says it is informational (``[INFO]``, ``[WARNING]``) before any ``[ERROR]``."""
    head = text[:_LEVEL_REACH]
    quiet = _QUIET_LEVEL.search(head)
    if quiet is None:
        return False
    error = head.find("[ERROR]")
    return error < 0 or error > quiet.start()


def recognise(text: str) -> Found | None:
    """A line's fault: by its keywords first, else by a code it prints. ``Found.fault.kind`` is None
    for what counts nothing (an informational fault, or any fault on an ``[INFO]``/``[WARNING]`` line)."""
    table = knowledge()
    fault = table.fault_of(text)
    coded = table.code_in(text)
    # A code the line prints says more than keywords of a generic fault ("npuSynchronizeDevice ... error
    # code is 507046" is a stream sync timeout, not just a failed call).
    if fault is None or (fault.kind == "other" and coded is not None and coded.kind not in (None, "other")):
        fault = coded
    if fault is None:
        return None
    code = coded.code if coded is not None else fault.code
    if quiet_level(text) and fault.kind is not None:
        return Found(Fault(fault.id, None, code, fault.component, fault.fault, "", fault.source), code)
    return Found(fault, code)


def known_code(code: object) -> str:
    """A code as a label value: one the knowledge names, else "" (a label's values stay bounded)."""
    return code if isinstance(code, str) and code in knowledge().by_code else ""


def describe(code: str) -> Fault | None:
    """The fault a code names (a CANN or runtime code, or MindCluster's), for advice and component."""
    return knowledge().by_code.get(code)
