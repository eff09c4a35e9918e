"""Prints step lines as fast as a rank can, for torchrun's --tee console to cut (tests/fixtures/SOURCES.md).

Run as ``PYTHONUNBUFFERED=1 torchrun --standalone --nproc-per-node 4 --tee 3 tee_printer.py > console.log 2>&1``.
Each rank prints ``step=S/1000000 loss=V lr=V/7 grad_norm=3V step_time=V/11`` (V = (S x 0.7310585786300049 +
rank) mod 3.1, as Python's repr) for 150 s: a test recomputes every value. torchrun's tail threads read each
rank's file while the rank writes it; a read ending in mid-line puts the line's rest behind a second prefix.
"""
import os
import time

rank = int(os.environ["RANK"])
end = time.time() + 150
step = 0
while time.time() < end:
    step += 1
    v = (step * 0.7310585786300049 + rank) % 3.1
    print(f"step={step}/1000000 loss={v!r} lr={v/7!r} grad_norm={v*3!r} step_time={v/11!r}", flush=True)
    time.sleep(0.0003)
