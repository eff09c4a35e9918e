"""A file whose lines come from several formats (issue 26, "every format a line matches").

The case that matters most: a MindFormers PyNative worker log holds LossCallback records
(read by the step-field kernel) and TrainingStateMonitor values (``Epoch:[..], step:[..]
device_local_norm: ..``, read by the MFLossMonitor format). Both must reach the rank's
series, at their steps, as one stream whose steps never go back, without the values'
lines counting as steps of their own or as restarts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.parse import LineParser, StepBatch
from exporter.parse.line_parser import DISCOVERY_STEP_LINES
from exporter.state import TrainingState
from tests.support.records import fixture_lines

FIXTURE = Path(__file__).parent / "fixtures" / "formats" / "mindformers_pynative_state_monitor.log"
KEY = ("run", "node", "0")


def fixture_data() -> bytes:
    return b"".join(line + b"\n" for line in fixture_lines(FIXTURE))


def batches(records) -> list[StepBatch]:
    return [record for record in records if isinstance(record, StepBatch)]


def state_monitor_first(lines: list[bytes]) -> list[bytes]:
    """The lines with each step's TrainingStateMonitor values moved before its LossCallback record."""
    groups: list[list[bytes]] = [[]]
    for line in lines:
        if b"_print_log" in line:
            groups.append([])
        groups[-1].append(line)
    return [line for group in groups for line in sorted(group, key=lambda line: b"_to_log" not in line)]


def ingest(state: TrainingState, blocks: list[bytes]) -> LineParser:
    parser = LineParser()
    for number, block in enumerate(blocks):
        parsed = parser.parse_block(block)
        with state.lock:
            state.ingest(KEY, sum(parsed.lines_by_rank.values()), parsed.records, None, float(number))
    return parser


def test_a_pynative_log_gives_loss_callback_records_and_state_monitor_values_in_one_batch():
    parser = LineParser()
    parsed = parser.parse_block(fixture_data())
    assert parser.format.name == "mindformers_pynative"  # the file's format: the first with a loss
    assert parsed.lines_by_format == {"mindformers_pynative": 4, "mindformers_static": 7}
    assert parsed.unparsed == 1  # the PyNative warning
    (batch,) = batches(parsed.records)  # the steps never go back: one batch
    assert batch.steps == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4]
    assert batch.series["loss"].steps == [1, 2, 3, 4]
    norms = batch.series["device_local_norm"]
    assert (norms.steps, norms.values) == ([1, 2, 3, 4], [1.2346, 1.2298, 14.8101, 1.2311])
    assert batch.series["local_norm_model_layers_0_attention_wq_weight"].steps == [1, 2, 3]
    assert batch.latest["loss"] == pytest.approx(10.36002) and batch.latest["total_steps"] == 1000


@pytest.mark.parametrize("cut", ["one block", "a block per line", "state monitor lines first"])
def test_the_state_counts_each_step_once_and_no_restart(cut):
    lines = fixture_lines(FIXTURE)
    if cut == "one block":
        blocks = [fixture_data()]
    elif cut == "a block per line":
        blocks = [line + b"\n" for line in lines]
    else:
        blocks = [b"".join(line + b"\n" for line in state_monitor_first(lines))]
    state = TrainingState()
    assert ingest(state, blocks).format.name == "mindformers_pynative"  # whichever line came first
    rank = state.series[KEY]
    assert (rank.step, rank.steps_total, rank.restarts_total) == (4, 4, 0)
    assert rank.rank_values == {"device_local_norm": 1.2311, "local_norm_model_layers_0_attention_wq_weight": 0.519}
    assert rank.loss == pytest.approx(10.36002)
    assert rank.lost_seconds_total["replayed"] == 0


def test_a_step_going_back_after_a_state_monitor_line_still_ends_the_batch():
    """The kernel cannot see the step of a line read alone: a restart right after one must still
    start a new batch (the state tells it by the batch's first step)."""
    data = fixture_data() + (b"[INFO] 2026-06-09 10:21:00 [.../loss_callback.py:231] _print_log: { step:[    2/ 1000], "
                             b"loss:  10.388001, per_step_time:    848ms, lr: 2.000000e-06, grad_norm: 3.5, "
                             b"throughput:  12.37T }\n")
    found = batches(LineParser().parse_block(data).records)
    assert [batch.steps[0] for batch in found] == [1, 2]
    state = TrainingState()
    ingest(state, [data])
    assert state.series[KEY].restarts_total == 1


def test_a_forced_format_reads_only_its_own_lines():
    from exporter.parse.formats import FormatSelection

    chosen = FormatSelection(overrides=(("worker_*.log", "mindformers_pynative"),))
    parser = LineParser(chosen.candidates(), forced=chosen.forced("worker_0.log", "worker"))
    parsed = parser.parse_block(fixture_data())
    assert parsed.lines_by_format == {"mindformers_pynative": 4}
    assert "device_local_norm" not in batches(parsed.records)[0].series


def keyvalue_steps(first: int, last: int) -> bytes:
    return b"".join(b"step=%d loss=2.5\n" % step for step in range(first, last + 1))


def test_after_the_first_step_lines_only_the_formats_found_are_looked_for():
    """Every anchor costs the scan: formats that print beside a file's own do so from its first steps on,
    so after DISCOVERY_STEP_LINES step lines the others are no longer looked for."""
    megatron = (b" iteration      %d/   50000 | consumed samples: 102400 | elapsed time per iteration (ms): 1519.9 |"
                b" learning rate: 2.997600E-04 | global batch size:   512 | lm loss: 2.201000E+00 |\n")
    parser = LineParser()
    parsed = parser.parse_block(keyvalue_steps(1, 10) + megatron % 10)
    assert parsed.lines_by_format == {"keyvalue": 10, "megatron": 1}  # found while discovering: stays
    parser.parse_block(keyvalue_steps(11, DISCOVERY_STEP_LINES))
    value = b"2026-06-09 10:00:00 - INFO - Epoch:[  1/  1], step:[ 2001/ 5000] device_local_norm: 1.0\n"
    first = DISCOVERY_STEP_LINES + 1
    later = parser.parse_block(keyvalue_steps(first, first) + megatron % 2000 + value)
    assert later.lines_by_format == {"keyvalue": 1, "megatron": 1}  # MindFormers' value is no longer looked for
    assert later.unparsed == 1


@pytest.mark.parametrize("found", [True, False])
def test_state_monitor_values_are_read_on_if_they_came_in_the_first_step_lines(found):
    lines = fixture_lines(FIXTURE)
    record = next(line for line in lines if b"_print_log" in line)
    values = b"".join(line + b"\n" for line in lines if b"_to_log" in line)
    parser = LineParser()
    parser.parse_block(record + b"\n" + (values if found else b""))
    parser.parse_block(b"".join(record + b"\n" for _ in range(DISCOVERY_STEP_LINES)))
    parsed = parser.parse_block(values)
    assert parsed.lines_by_format == ({"mindformers_static": 7} if found else {})


def test_megatron_deepspeed_iteration_lines_take_the_kernel_from_deepspeed_lines_found_before():
    """DeepSpeed's engine lines carry no loss (a provisional format): its table reads their runs until Megatron's
    iteration lines come (Megatron-DeepSpeed prints both), whose table then reads the runs: the file's format."""
    deepspeed = (b"[2024-03-07 15:27:15,063] [INFO] [logging.py:96:log_dist] [Rank 0] step=%d, skipped=4, "
                 b"lr=[0.000240653265864008, 0.000240653265864008], mom=[(0.9, 0.999), (0.9, 0.999)]\n")
    megatron = (b" iteration      %d/   50000 | consumed samples: 102400 | elapsed time per iteration (ms): 1519.9 |"
                b" learning rate: 2.997600E-04 | global batch size:   512 | lm loss: 2.201000E+00 |\n")
    parser = LineParser()
    first = parser.parse_block(b"".join(deepspeed % step for step in range(1, 4)))
    assert parser._kernel_format is not None and parser._kernel_format.name == "deepspeed"
    later = parser.parse_block(b"".join(megatron % step + deepspeed % step for step in range(4, 200)))
    assert parser._kernel_format.name == "megatron" and parser.format is not None and parser.format.name == "megatron"
    assert later.lines_by_format == {"megatron": 196, "deepspeed": 196}
    steps = [step for parsed in (first, later) for batch in batches(parsed.records) for step in batch.steps]
    assert sorted(set(steps)) == list(range(1, 200))
    losses = [step for batch in batches(later.records) for step in batch.series["loss"].steps]
    assert losses == list(range(4, 200))
