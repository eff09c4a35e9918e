"""msrun's scheduler.log (MindSpore meta_server_node.cc, cluster_context.cc).

Worker registration, cluster initialization, ``The node: 3 is timed out.``, ``Node 0 has
unregistered.``. The scheduler repeats a node's timeout line every few seconds until it
gives up: ``SchedulerLog`` counts a node's timeout once until the node registers again, so
``node_timeout`` counts nodes that timed out, not lines. Likewise one initialization prints
two lines (meta server and cluster context) and counts once.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.patterns import lazy
from exporter.parse.records import SchedulerEvent

_REGISTERED = lazy(
    r"The new node: (?P<id>\S+?)\(role: (?P<role>\w+)\)(?:, rank id: (?P<rank>\d+))?(?:, device id: \d+)?"
    r"(?:, hostname: (?P<hostname>[^,]+))?(?:, ip: (?P<ip>[^\s,]+))?.*? is registered successfully"
    r"(?:\. Currently registered node number: (?P<registered>\d+), expected node number: (?P<expected>\d+))?")
_INITIALIZED = ("topology has been constructed successfully", "luster is successfully initialized")
_TIMED_OUT = lazy(r"\b[Nn]ode:? (?P<id>\S+?) is timed out")
_UNREGISTERED = lazy(r"\bNode (?P<id>\S+) has unregistered")


def parse(text: str) -> SchedulerEvent | None:
    """One scheduler event; None for any other line."""
    if "is registered successfully" in text:
        return _registered(text)
    if "is timed out" in text:
        match = _TIMED_OUT.search(text)
        return None if match is None else SchedulerEvent("node_timeout", match.group("id"))
    if "has unregistered" in text:
        match = _UNREGISTERED.search(text)
        return None if match is None else SchedulerEvent("worker_exited", match.group("id"))
    if any(marker in text for marker in _INITIALIZED):
        return SchedulerEvent("cluster_initialized")
    return None


def _registered(text: str) -> SchedulerEvent | None:
    match = _REGISTERED.search(text)
    if match is None:
        return None
    fields = match.groupdict()
    detail: dict[str, str | float] = {name: fields[name] for name in ("role", "hostname", "ip") if fields[name]}
    detail.update({name: int(fields[name]) for name in ("registered", "expected") if fields[name]})
    rank = fields["rank"]
    return SchedulerEvent("worker_registered", fields["id"], int(rank) if rank else None, detail)


class SchedulerLog:
    """Per-file memory of the scheduler: which rank each node is, which nodes timed out."""

    __slots__ = ("_ranks", "_timed_out", "_initialized")

    def __init__(self) -> None:
        self._ranks: dict[str, int] = {}
        self._timed_out: set[str] = set()
        self._initialized = False

    def observe(self, event: SchedulerEvent) -> SchedulerEvent | None:
        """The event with its node's rank filled in; None for a repeated line of the same event."""
        if event.kind == "cluster_initialized":
            repeated, self._initialized = self._initialized, True
            return None if repeated else event
        node = event.node_id
        if node is None:
            return event
        if event.kind == "worker_registered":
            self._initialized = False  # registrations precede a (re)initialization
            self._timed_out.discard(node)
            if event.node_rank is not None:
                self._ranks[node] = event.node_rank
            return event
        if event.kind == "node_timeout":
            if node in self._timed_out:
                return None
            self._timed_out.add(node)
        if event.node_rank is None:
            event.node_rank = self._ranks.get(node)
        return event


# Chosen for scheduler.log by its role, never detected. Scheduler logs are short: every line
# is looked at (no prefilter; the checks above are plain substring tests).
FORMAT = register(Format("msrun_scheduler", "mindspore", b"", parse, role="scheduler"))
