"""Write a simulated run to disk: all at once, or paced like a live trainer.

The only I/O of the simulator. Lines are appended and flushed slot by slot, as a
trainer's stdout redirected by msrun would be, so a follower sees them arrive.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from exporter.simulate.scenario import Slot


def write_run(slots: Iterable[Slot], out_dir: Path, step_interval: float = 0.0,
              stop: threading.Event | None = None) -> bool:
    """Write every slot under ``out_dir``, ``step_interval`` seconds apart (0: no pause).

    Files are truncated when first written, so a rerun into the same directory starts
    afresh. Returns False when ``stop`` was set before the last slot.
    """
    stop = stop or threading.Event()
    out_dir.mkdir(parents=True, exist_ok=True)
    handles: dict[str, TextIO] = {}
    deadline = time.monotonic()
    with contextlib.ExitStack() as closing:
        for slot in slots:
            for name, lines in slot.lines.items():
                handle = handles.get(name)
                if handle is None:
                    handle = handles[name] = closing.enter_context(open(out_dir / name, "w", encoding="utf-8"))  # noqa: SIM115
                handle.write("".join(f"{line}\n" for line in lines))
                handle.flush()
            if step_interval > 0:
                # Pace against a fixed schedule so slow writes do not stretch the run.
                deadline += step_interval
                if stop.wait(max(0.0, deadline - time.monotonic())):
                    return False
            elif stop.is_set():
                return False
    return True
