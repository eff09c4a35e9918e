"""The ring of recent steps the status page draws: bounded, fed from the one apply path, not checkpointed."""

from __future__ import annotations

import math
import tracemalloc

from exporter.parse.records import StepLine
from exporter.state import TrainingState
from exporter.state.recent import RECENT_STEPS, UNKNOWN_STEP, RecentSteps
from exporter.state.snapshot import dump_state, restore_state
from tests.support.records import in_batches

KEY = ("run", "node-0", "0")
RANKS = 1024
# Two columns of 4 bytes and one of 8, at most twice RECENT_STEPS rows before the older
# half is dropped, plus each array's headroom and object: the bound the ring promises.
BYTES_PER_RANK_BOUND = 2 * RECENT_STEPS * 16 * 1.15 + 3 * 100


def _batch(first: int, count: int, step_time: float | None = 0.84) -> list:
    values = {} if step_time is None else {"step_time_seconds": step_time}
    return in_batches(*(StepLine(step, {"loss": 1.0 + step / 1e6, **values}) for step in range(first, first + count)))


def test_the_ring_keeps_the_last_rows_in_order_and_the_step_time_of_each_batch():
    state = TrainingState()
    with state.lock:
        for first in range(1, 3001, 100):  # catch-up: batches of 100 lines
            state.ingest(KEY, 100, _batch(first, 100, step_time=first / 1000), None, 0.0)
    steps, losses, step_times = state.series[KEY].recent.columns()
    assert list(steps) == list(range(3001 - RECENT_STEPS, 3001))
    assert abs(losses[-1] - 1.003) < 1e-6  # single precision: enough for a chart
    # Only the last row of a batch carries the batch's step time; the others are NaN.
    known = {step: round(seconds, 3) for step, seconds in zip(steps, step_times, strict=True) if math.isfinite(seconds)}
    assert known == {step: round((step - 99) / 1000, 3) for step in range(3001 - RECENT_STEPS, 3001) if step % 100 == 0}


def test_a_batch_longer_than_the_ring_gives_only_its_tail():
    ring = RecentSteps()
    ring.add(list(range(10_000)), [1.0] * 10_000, 0.5)
    assert len(ring) == RECENT_STEPS
    steps, _, step_times = ring.columns()
    assert steps[0] == 10_000 - RECENT_STEPS and step_times[-1] == 0.5 and math.isnan(step_times[-2])


def test_rows_after_a_long_batch_follow_its_tail():
    """A long batch is kept as it came until the ring is read or added to: the rows after it follow its tail, and
    reading it in between changes nothing."""
    for read_between in (False, True):
        ring = RecentSteps()
        ring.add([1, 2, 3], [9.0, 9.0, 9.0], 0.1)
        ring.add(list(range(100, 100 + 2 * RECENT_STEPS)), [float(step) for step in range(2 * RECENT_STEPS)], 0.5)
        if read_between:
            assert ring.columns()[0][0] == 100 + RECENT_STEPS
        ring.add([1_000, 1_001], [7.0, 8.0], 0.75)
        steps, losses, step_times = ring.columns()
        assert len(ring) == RECENT_STEPS and list(steps[-3:]) == [100 + 2 * RECENT_STEPS - 1, 1_000, 1_001]
        assert steps[0] == 100 + RECENT_STEPS + 2 and list(losses[-2:]) == [7.0, 8.0]
        assert step_times[-3] == 0.5 and math.isnan(step_times[-2]) and step_times[-1] == 0.75


def test_unknown_and_absurd_steps_are_kept_as_unknown():
    ring = RecentSteps()
    ring.add([None, 5, 10**30], [1.0, 2.0, 3.0], None)  # Hugging Face Trainer prints none; a hostile line anything
    assert list(ring.columns()[0]) == [UNKNOWN_STEP, 5, UNKNOWN_STEP]


def test_a_step_time_without_a_loss_is_a_row_of_its_own():
    state = TrainingState()
    with state.lock:
        state.ingest(KEY, 1, in_batches(StepLine(7, {"step_time_seconds": 1.5})), None, 0.0)
    steps, losses, step_times = state.series[KEY].recent.columns()
    assert list(steps) == [7] and math.isnan(losses[0]) and step_times[0] == 1.5


def test_checkpoints_leave_the_ring_out_and_still_restore():
    state = TrainingState()
    with state.lock:
        state.ingest(KEY, 50, _batch(1, 50), None, 0.0)
    dump = dump_state(state)
    assert "recent" not in dump["series"][0]["values"] and "last_error_step" not in dump["series"][0]["values"]
    restored = TrainingState()
    restore_state(restored, dump)
    assert restored.series[KEY].step == 50 and len(restored.series[KEY].recent) == 0
    with restored.lock:
        restored.ingest(KEY, 1, _batch(51, 1), None, 0.0)
    assert list(restored.series[KEY].recent.columns()[0]) == [51]


def test_memory_stays_bounded_at_1024_ranks():
    """Every ring fed three times its length, 7 rows a batch: after dropping its older half once it ends
    nearly at its fullest (508 of at most 511 rows); without the drop it would hold 770 and fail the bound."""
    rows_per_batch, batches = 7, 110
    steps = [list(range(first, first + rows_per_batch)) for first in range(0, batches * rows_per_batch, rows_per_batch)]
    losses = [1.5] * rows_per_batch
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        rings = [RecentSteps() for _ in range(RANKS)]
        for ring in rings:
            for batch_steps in steps:
                ring.add(batch_steps, losses, 0.84)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ring_bytes = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                     if stat.traceback[0].filename.endswith(("state/recent.py", "test_recent_steps.py")))
    print(f"rings of {RANKS} ranks, nearly full: {ring_bytes / 1e6:.2f} MB, {ring_bytes / RANKS:.0f} B a rank")
    assert all(len(ring) == RECENT_STEPS for ring in rings)
    assert RANKS * RECENT_STEPS * 16 <= ring_bytes <= RANKS * BYTES_PER_RANK_BOUND
