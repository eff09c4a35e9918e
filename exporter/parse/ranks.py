"""Which global rank a line belongs to: launcher prefixes and the node's rank offset.

A line may carry, outermost first: a launcher's prefix (``srun --label``'s task number
``3: ``, pdsh's host ``worker-1: ``), a bracketed number some collectors put first
(``[80746] ``), and torchrun's prefixes (``[default3]:``, ``[rank3]: ``).
"""

from __future__ import annotations

from exporter.parse.patterns import lazy

# torchrun --tee/--redirects prefixes: ``[default3]:`` (role name + LOCAL rank) and the
# ``[rank3]: `` of init_process_group's excepthook and c10 logs (GLOBAL rank). They stack.
RANK_PREFIX = lazy(rb"\[([A-Za-z_]+)(\d+)\]: ?")
# The prefixes torchrun prints unless given another --role: anchors, so that a block holding
# one is parsed line by line (LineParser.parse_block).
PREFIX_ANCHORS = (b"[default", b"[rank")
# What the step-field kernel declines as another stream's line: ``[`` name bytes ``]:`` at its
# start (a superset of RANK_PREFIX: a line declined for nothing is only read the slower way).
LINE_TAG = (b"[", b"]:")
# ``srun --label``: the task number, which is the global rank with one task per rank (padded
# to the width of the largest); pdsh (DeepSpeed's multi-node launcher): the host name.
LAUNCHER_PREFIX = lazy(rb"(?: *(?P<task>\d{1,6})|(?P<host>[A-Za-z][A-Za-z0-9.-]*)): ")
# The first bytes of a line that may start with a rank prefix (torchrun's, a bracketed PID,
# ``srun --label``'s task number, padded with spaces): other lines skip the prefix search.
RANK_PREFIX_STARTS = frozenset({b"[", b" ", *(str(digit).encode() for digit in range(10))})
# A bracketed number before everything else: a PID or a line number (``[80746] [rank0]:``).
_PROCESS_PREFIX = lazy(rb"\[\d+\] ")
# Words that end in ": " at the start of a line without being a host: exception types,
# CANN codes (``EI9999: ``), ``ERR02200``.
_NOT_A_HOST = lazy(r"[\w.]*(?:Error|Exception|Warning|Exit)|E[A-Z0-9]\d{4}|ERR\d+")


def global_rank(rank: int, local: bool, rank_offset: int) -> int:
    """A rank as a file or a line names it, made global: a node-local one (torchrun's
    ``[default3]:`` prefix, its per-local-rank log directories) is shifted by the node's offset."""
    return rank + rank_offset if local else rank


def strip_host_prefix(line: bytes) -> tuple[str | None, bytes]:
    """The host a pdsh prefix names (``worker-1: ``) and the line without it; (None, line) without one.

    A host name holds a digit or a dash: ``stderr: ``, ``Solution: `` and a logger's
    ``torch.distributed.elastic.multiprocessing.api: `` are text.
    """
    match = LAUNCHER_PREFIX.match(line)
    if match is None or match.group("host") is None:
        return None, line
    host = match.group("host").decode("ascii")
    if not any(char.isdigit() or char == "-" for char in host) or _NOT_A_HOST.fullmatch(host):
        return None, line
    return host, line[match.end():]


def strip_rank_prefixes(line: bytes, rank_offset: int) -> tuple[int | None, bytes]:
    """The global rank a line's prefixes name (None: none, the file's rank) and the line without them."""
    found: dict[bool, int] = {}  # local -> the rank of that kind, the last prefix of each kind wins
    end = 0
    label = LAUNCHER_PREFIX.match(line)
    if label is not None and label.group("task") is not None:
        found[False], end = int(label.group("task")), label.end()
    process = _PROCESS_PREFIX.match(line, end)
    if process is not None:
        end = process.end()
    match = RANK_PREFIX.match(line, end)
    while match is not None:
        found[match.group(1) != b"rank"] = int(match.group(2))
        end = match.end()
        match = RANK_PREFIX.match(line, end)
    if not found:
        return None, line[end:]
    local = False not in found  # a global rank, when one is printed, says it all
    return global_rank(found[local], local, rank_offset), line[end:]


class TagRanks:
    """strip_rank_prefixes' rank of lines beginning with a tag (``[default3]:``, ``[80746] [rank0]: ``), remembered
    by the line's bytes up to its first ``]:`` (and a space) when no other tag follows them: the rank then depends on
    those bytes alone. An interleaved console's lines repeat a few such tags."""

    __slots__ = ("_rank_offset", "_ranks")

    def __init__(self, rank_offset: int) -> None:
        self._rank_offset = rank_offset
        self._ranks: dict[bytes, int | None] = {}

    def rank(self, line: bytes) -> int | None:
        close = line.find(b"]:", 0, _TAG_REACH)
        end = close + 2 + (line[close + 2:close + 3] == b" ")
        if close < 0 or line[end:end + 1] == b"[":
            return strip_rank_prefixes(line, self._rank_offset)[0]
        tag = line[:end]
        if tag in self._ranks:
            return self._ranks[tag]
        rank = strip_rank_prefixes(line, self._rank_offset)[0]
        if len(self._ranks) < _TAGS_KEPT:
            self._ranks[tag] = rank
        return rank


# A tag is looked for this far into a line; at most this many are remembered (a log of a million ranks' tags).
_TAG_REACH = 64
_TAGS_KEPT = 4096


def has_srun_label(line: bytes) -> bool:
    """True when a line starts with ``srun --label``'s task number."""
    match = LAUNCHER_PREFIX.match(line)
    return match is not None and match.group("task") is not None


ROLE_PREFIX = lazy(rb"\[([A-Za-z_]+)\d+\]:")


def split_glued(line: bytes) -> list[bytes]:
    """A line of torchrun's --tee console cut where another rank's line was glued to it.

    torchrun's tail threads (one per rank and stream) write to the console at once, and a line of
    one rank sometimes ends without its newline before the next rank's (seen on torch 2.13.0:
    ``[default0]:step=8/30 ... step_time=0.21[default2]:step=8/30 loss=...``). A line starting with a
    role prefix (``[default0]:``) is cut before each later prefix of the same role: torch itself
    prints none (its own ``[rank0]:`` names another role).
    """
    start = ROLE_PREFIX.match(line)
    if start is None:
        return [line]
    tag = b"[" + start.group(1)
    cut = line.find(tag, start.end())
    if cut < 0:
        return [line]
    parts, begin = [], 0
    while cut >= 0:
        glued = ROLE_PREFIX.match(line, cut)
        if glued is not None and glued.group(1) == start.group(1):
            parts.append(line[begin:cut])
            begin = cut
        cut = line.find(tag, cut + 1)
    parts.append(line[begin:])
    return parts


# How many lines a cut line waits for its rest before it is read as it is (a rank killed in mid-line).
MAX_LINES_CUT_WAITS = 100_000


class CutLines(dict[bytes, tuple[bytes, int]]):
    """The lines of torchrun's ``--tee`` console cut by another's (split_glued), each until its rest comes.

    A tail thread reads a rank's output file while the rank writes it: a read that ends in mid-line hands
    out the line so far, written with its prefix and no newline, and the rest comes with the rank's next
    piece (``[default1]:step=250766/10[default1]:0000 loss=...``; ``[default0]:...grad_norm=1.0210090``,
    another rank's line, thousands of lines later ``[default0]:53593521 step_time=...``). A cut line is
    held by its prefix, the rank's next piece completes it. torchrun's stdout and stderr tails print the
    same prefix: a rank's stderr line written between a cut stdout line and its rest would be taken as
    the rest (a read ending in mid-line is rare, a stderr line in that gap rarer still). A dict (a prefix ->
    its cut line, the lines it waited): empty, it costs a line-by-line read one truth test a line.
    """

    def hold(self, piece: bytes) -> bool:
        """A piece that ended where another began: held, its rank's next piece is its rest. False (not held)
        for torch's own ``[rank3]:`` prefix: that is no tail's, which prefixes each piece it writes."""
        prefix = ROLE_PREFIX.match(piece)
        assert prefix is not None, "split_glued cuts before role prefixes only"
        if prefix.group(1) == b"rank":
            return False
        self[prefix.group()] = (piece, 0)
        return True

    def joined(self, piece: bytes) -> bytes:
        """``piece``, after the line it completes when its prefix's line was cut."""
        prefix = ROLE_PREFIX.match(piece) if piece[:1] == b"[" else None
        if prefix is None:
            return piece
        held = self.pop(prefix.group(), None)
        return piece if held is None else held[0] + piece[prefix.end():]

    def waited(self, lines: int) -> list[bytes]:
        """``lines`` more lines went by: the cut lines that waited MAX_LINES_CUT_WAITS for their rest, to be
        read as they are."""
        expired = []
        for prefix, (piece, waited) in list(self.items()):
            if waited + lines >= MAX_LINES_CUT_WAITS:
                expired.append(piece)
                del self[prefix]
            else:
                self[prefix] = (piece, waited + lines)
        return expired

    def take(self) -> list[bytes]:
        """Every cut line still held (the file ended), to be read as it is."""
        pieces = [piece for piece, _ in self.values()]
        self.clear()
        return pieces
