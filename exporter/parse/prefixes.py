"""torchrun's per-line rank prefixes, shared by the line parser and the step columns."""

from __future__ import annotations

import re

# torchrun --tee/--redirects prefixes: ``[default3]:`` (role name + LOCAL rank) and the
# ``[rank3]: `` of init_process_group's excepthook and c10 logs (GLOBAL rank). They stack.
RANK_PREFIX = re.compile(rb"\[([A-Za-z_]+)(\d+)\]: ?")
# The prefixes torchrun prints unless given another --role: anchors, so that a block holding
# one is parsed line by line (LineParser.parse_block).
PREFIX_ANCHORS = (b"[default", b"[rank")
