"""Restarts that fail before their first step, for ``torchrun --max-restarts 2``
(tests/fixtures/real/torchelastic_restarts).

Attempt 0 trains 5 steps (``step=N/10 loss=...``), then rank 1 raises and torchrun restarts the group; every later
attempt (``TORCHELASTIC_RESTART_COUNT`` > 0) raises before its first step, as a restart that cannot load its
checkpoint does: its ``attempt_K/`` files hold a traceback and no step line.
"""

import os
import time

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
if attempt > 0:
    raise RuntimeError(f"attempt {attempt}: cannot load the checkpoint")
for step in range(1, 6):
    print(f"step={step}/10 loss={1.0 / step!r}", flush=True)
    time.sleep(0.1)
if rank == 1:
    raise RuntimeError("rank 1 fails at step 6")
time.sleep(5)
