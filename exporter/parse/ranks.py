"""Which global rank a line belongs to: torchrun's per-line prefixes and the node's rank offset."""

from __future__ import annotations

import re

# torchrun --tee/--redirects prefixes: ``[default3]:`` (role name + LOCAL rank) and the
# ``[rank3]: `` of init_process_group's excepthook and c10 logs (GLOBAL rank). They stack.
RANK_PREFIX = re.compile(rb"\[([A-Za-z_]+)(\d+)\]: ?")
# The prefixes torchrun prints unless given another --role: anchors, so that a block holding
# one is parsed line by line (LineParser.parse_block).
PREFIX_ANCHORS = (b"[default", b"[rank")
# What the step-field kernel declines as another stream's line: ``[`` name bytes ``]:`` at its
# start (a superset of RANK_PREFIX: a line declined for nothing is only read the slower way).
LINE_TAG = (b"[", b"]:")


def global_rank(rank: int, local: bool, rank_offset: int) -> int:
    """A rank as a file or a line names it, made global: a node-local one (torchrun's
    ``[default3]:`` prefix, its per-local-rank log directories) is shifted by the node's offset."""
    return rank + rank_offset if local else rank


def strip_rank_prefixes(line: bytes, rank_offset: int) -> tuple[int | None, bytes]:
    """The global rank a line's prefixes name (None: none, the file's rank) and the line without them."""
    match = RANK_PREFIX.match(line)
    found: dict[bool, int] = {}  # local -> the rank of that kind, the last prefix of each kind wins
    end = 0
    while match is not None:
        found[match.group(1) != b"rank"] = int(match.group(2))
        end = match.end()
        match = RANK_PREFIX.match(line, end)
    if not found:
        return None, line
    local = False not in found  # a global rank, when one is printed, says it all
    return global_rank(found[local], local, rank_offset), line[end:]
