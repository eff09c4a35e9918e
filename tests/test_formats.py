"""Format detection, rank prefixes, user-defined formats and multi-line failure rules."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest

from exporter import native
from exporter.export.metrics_table import METRICS, PRINTED
from exporter.parse import BUILTIN_FORMATS, ErrorEvent, LineParser, StepBatch
from exporter.parse import formats as formats_package
from exporter.parse.custom_regex import compile_pattern
from exporter.parse.formats import BUILTIN_NAMES, FormatSelection, custom_format, path_matches, selection
from exporter.parse.formats.registry import register, registered
from tests.support.records import parse_lines, record_as_dict

DEEPSPEED_LR = (b"[2024-03-07 15:27:15,063] [INFO] [logging.py:96:log_dist] [Rank 0] step=200, skipped=4, "
                b"lr=[0.00024], mom=[0.9]")
MEGATRON = (b" iteration      200/   50000 | consumed samples: 102400 | elapsed time per iteration (ms): 1519.9 |"
            b" learning rate: 2.997600E-04 | global batch size:   512 | lm loss: 2.201000E+00 | loss scale: 1.0 |"
            b" number of skipped iterations:   0 | number of nan iterations:   0 |")


def steps(records) -> list[tuple[int | None, int | None]]:
    """(rank, step) of every step line in the records' StepBatches."""
    return [(batch.rank, step) for batch in records if isinstance(batch, StepBatch) for step in batch.steps]


def kinds(records) -> list[str]:
    return [record.kind if isinstance(record, ErrorEvent) else type(record).__name__ for record in records]


@pytest.mark.parametrize(
    ("line", "rank_offset", "rank", "step"),
    [
        (b"[default3]:step=10 loss=2.0", 0, 3, 10),
        (b"[default3]:step=10 loss=2.0", 8, 11, 10),  # local rank + the node's offset
        (b"[default3]:[rank11]: step=10 loss=2.0", 0, 11, 10),  # stacked: the global rank wins
        (b"[rank5]: step=7 loss=1.0", 8, 5, 7),  # [rankN]: is already global
        (b"[trainer2]:step=1 loss=1.0", 0, 2, 1),  # any role name of TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
        (b"step=10 loss=2.0", 8, None, 10),
    ],
)
def test_rank_prefixes_name_the_global_rank(line, rank_offset, rank, step):
    assert steps(parse_lines(LineParser(rank_offset=rank_offset), [line]).records) == [(rank, step)]


@pytest.mark.parametrize("line", [b"[1]:", b"[Rank 0] step=5 loss=1.0", b"[2024-03-07 15:27:15,063] step=5 loss=1.0"])
def test_brackets_that_are_not_launcher_prefixes_keep_the_file_rank(line):
    parsed = parse_lines(LineParser(), [line])
    assert list(parsed.lines_by_rank) == [None]
    assert all(record.rank is None for record in parsed.records)


def test_a_file_keeps_its_first_format_and_reads_every_other_format_a_line_matches():
    """Issue 26: a file's records come from each format whose parser reads one of its lines, not from
    the first one detected; the first one stays the file's format (training_info's label)."""
    parser = LineParser()
    assert parser.format is None
    parsed = parse_lines(parser, [b"noise", b"step=1 loss=2.5", MEGATRON, b"step=201 loss=2.4"])
    assert parser.format.name == "keyvalue"
    assert steps(parsed.records) == [(None, 1), (None, 200), (None, 201)]
    assert parsed.lines_by_format == {"keyvalue": 2, "megatron": 1}
    assert parsed.unparsed == 1  # the noise


def test_a_deepspeed_file_switches_to_megatron_when_megatron_lines_appear():
    # Megatron-DeepSpeed: the engine's lines carry no loss, Megatron's iteration lines do.
    parser = LineParser()
    first = parse_lines(parser, [DEEPSPEED_LR]).records
    assert parser.format.name == "deepspeed"
    assert first[0].latest["learning_rate"] == 0.00024
    later = parse_lines(parser, [MEGATRON, DEEPSPEED_LR]).records
    assert parser.format.name == "megatron"
    # The engine's lr line at the same step completes Megatron's record (the state counts one step).
    assert [(batch.steps, batch.latest["loss"], batch.latest["learning_rate"]) for batch in later] == [
        ([200, 200], 2.201, 0.00024)]


def test_overrides_force_a_format_by_path_and_scheduler_logs_get_theirs():
    chosen = FormatSelection(overrides=(("**/attempt_*/*/stdout.log", "megatron"), ("*.jsonl", "jsonl")))
    assert chosen.forced("job/attempt_0/3/stdout.log", "worker").name == "megatron"
    assert chosen.forced("deep/dir/metrics.jsonl", "worker").name == "jsonl"  # no '/': the file name is matched
    assert chosen.forced("scheduler.log", "scheduler").name == "msrun_scheduler"
    assert chosen.forced("worker_0.log", "worker") is None
    assert path_matches("a/b/c.log", "a/*") and not path_matches("a/b/c.log", "b/*")


def test_a_forced_format_ignores_other_formats():
    forced = FormatSelection(overrides=(("*", "megatron"),)).forced("x.log", "worker")
    parsed = parse_lines(LineParser(forced=forced), [b"step=1 loss=2.5", MEGATRON])
    assert steps(parsed.records) == [(None, 200)]


def test_custom_format_maps_named_groups_and_is_detected_before_builtin_formats():
    chosen = selection(custom=[("mine", r"it (?P<step>\d+)/(?P<total_steps>\d+) step=(?P<extra_step>\d+) "
                                        r"loss=(?P<loss>\S+) t=(?P<step_time_ms>\d+) z_loss=(?P<z_loss>\S+) "
                                        r"tok=(?P<tok>\S+)",
                                "loss=")])
    parser = LineParser(chosen.candidates())
    (batch,) = parse_lines(parser, [b"it 7/100 step=9 loss=2.5 t=850 z_loss=0.1 tok=12.5k"]).records
    assert parser.format.name == "mine"
    record = record_as_dict(batch)
    assert (record["step"], record["total_steps"], record["loss"], record["step_time_seconds"]) == (7, 100, 2.5, 0.85)
    assert record["aux"] == {"z_loss": 0.1}
    assert record["extra"] == {"extra_step": 9.0}  # 'tok' held no number: no value


def test_custom_format_prefilter_skips_lines_without_its_literal():
    fmt = custom_format("mine", r"(?P<step>\d+) (?P<loss>\S+)", contains="LOSS")
    assert fmt.prefilter == b"LOSS"
    parser = LineParser([fmt])
    assert parse_lines(parser, [b"12 3.5"]).records == []
    assert len(parse_lines(parser, [b"LOSS 12 3.5"]).records) == 1


@pytest.mark.parametrize(("pattern", "message"), [("(?P<loss", "not a valid regular expression"),
                                                  (r"loss=(\S+)", "needs a named group")])
def test_unusable_custom_patterns_are_rejected_with_a_reason(pattern, message):
    with pytest.raises(ValueError, match=message):
        compile_pattern(pattern)


JUNK = [b"", b"\xff\xfe\x00 junk \x80", b"{", b"{'loss': }", b'{"loss": [1, 2]}', b"iteration 1/ | lm loss: x |",
        b"{ Epoch:[ 1/ 0], step:[ 1/ 0], loss: }", b"step: 1  loss: ", b"step=1, skipped=x, lr=[]",
        b"x" * 100_000 + b"step=1 loss=", b"Traceback (most recent call last):", b"ChildFailedError:", b"====="]


@pytest.mark.parametrize("fmt", BUILTIN_FORMATS, ids=lambda fmt: fmt.name)
def test_junk_never_raises_in_any_format(fmt):
    parser = LineParser(forced=fmt)
    parse_lines(parser, JUNK)
    for line in JUNK:
        fmt.parse(line.decode("utf-8", "replace"))


CHAINED = [b"Traceback (most recent call last):", b'  File "a.py", line 1, in f',
           b"IndexError: list index out of range",
           b"", b"During handling of the above exception, another exception occurred:", b"",
           b"Traceback (most recent call last):", b'  File "a.py", line 2, in g', b"RuntimeError: worker exited"]


def test_a_chained_traceback_is_one_failure_named_by_its_last_exception():
    records = parse_lines(LineParser(), CHAINED).records
    assert [(record.kind, record.detail) for record in records] == [("traceback", {"exception": "RuntimeError"})]


def test_a_chain_keeps_the_specific_kind_of_its_first_exception():
    lines = [*CHAINED[:2], b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", *CHAINED[3:]]
    assert kinds(parse_lines(LineParser(), lines).records) == ["oom", "traceback"]


def test_a_batch_boundary_inside_a_block_emits_once_and_continuations_add_nothing():
    parser = LineParser()
    first = parse_lines(parser, [b"Traceback (most recent call last):", b'  File "a.py", line 1',
                                b"RuntimeError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.14.3"])
    assert kinds(first.records) == ["nccl", "traceback"]
    later = parse_lines(parser, [b"ncclSystemError: System call failed.", b"", b"step=1 loss=2.0"])
    assert kinds(later.records) == ["StepBatch"]


def test_an_empty_exception_message_is_classified_by_the_lines_below_it():
    lines = [b"Traceback (most recent call last):", b'  File "m.py", line 1', b"RuntimeError: ", b"-" * 20,
             b"EI0002: [PID: 1] The wait execution of the Notify register times out.", b""]
    records = parse_lines(LineParser(), lines).records
    # EI0002, a notify wait that timed out, follows a peer's failure (parse/faults/).
    assert [(record.kind, record.detail.get("code")) for record in records] == [("hccl_timeout", "EI0002"),
                                                                                ("traceback", None)]


def test_tracebacks_of_different_ranks_do_not_end_each_other():
    lines = [b"[rank1]: Traceback (most recent call last):", b"[rank2]: Traceback (most recent call last):",
             b'[rank1]:   File "a.py", line 1', b'[rank2]:   File "b.py", line 1',
             b"[rank2]: KeyError: 'x'", b"[default1]:step=5 loss=1.0", b"[rank1]: ValueError: bad"]
    records = parse_lines(LineParser(), lines).records
    failures = sorted((record.rank, record.detail["exception"]) for record in records if isinstance(record, ErrorEvent))
    assert failures == [(1, "ValueError"), (2, "KeyError")]
    assert steps(records) == [(1, 5)]


def test_watchdog_timeouts_count_once_per_rank_and_sequence_number():
    work = b"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLGATHER, Timeout(ms)=1800000)" \
           b" ran for 1800123 milliseconds before timing out."
    lines = [b"[rank0]:[E810 15:46:05.7 ProcessGroupNCCL.cpp:632] [Rank 0] " + work,
             b"[rank0]:[E810 15:46:05.8 ProcessGroupNCCL.cpp:1895] [PG ID 0 Rank 0] Process group watchdog thread "
             b"terminated with exception: [Rank 0] " + work,
             b"terminate called after throwing an instance of 'c10::DistBackendError'",
             b"  what():  [PG ID 0 Rank 0] Process group watchdog thread terminated with exception: [Rank 0] " + work,
             b"[rank1]:[E810 15:46:05.9 ProcessGroupNCCL.cpp:632] [Rank 1] " + work]
    records = parse_lines(LineParser(), lines).records
    assert [(record.rank, record.detail["op"], record.detail["timeout_seconds"]) for record in records] == [
        (0, "ALLGATHER", 1800.0), (1, "ALLGATHER", 1800.0)]


def test_an_elastic_summary_cut_by_a_batch_counts_once():
    parser = LineParser()
    head = [b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", b"=" * 40, b"train.py FAILED",
            b"Root Cause (first observed failure):", b"[0]:", b"  rank      : 3 (local_rank: 3)",
            b"  exitcode  : -9 (pid: 77)"]
    (event,) = parse_lines(parser, head).records
    assert (event.kind, event.detail["root_cause_rank"], event.detail["signal"]) == ("killed", 3, "SIGKILL")
    assert parse_lines(parser, [b"  traceback : Signal 9 (SIGKILL) received by PID 77", b"=" * 40]).records == []


def test_lines_inside_failures_are_recognized_and_noise_is_counted_unparsed():
    parsed = parse_lines(LineParser(), [b"hello", b"Traceback (most recent call last):", b'  File "a.py", line 1',
                                       b"ValueError: x", b"", b"world"])
    assert parsed.unparsed == 2


def test_a_node_timing_out_again_after_registering_again_counts_again():
    scheduler = FormatSelection().forced("scheduler.log", "scheduler")
    lines = [b"The node: 3 is timed out.", b"The node: 3 is timed out.",
             b"The new node: 3(role: MS_WORKER), rank id: 3 is registered successfully.", b"The node: 3 is timed out."]
    records = parse_lines(LineParser(forced=scheduler), lines).records
    assert [(record.kind, record.node_rank) for record in records] == [
        ("node_timeout", None), ("worker_registered", 3), ("node_timeout", 3)]


def test_every_format_is_documented_for_users():
    documentation = (Path(__file__).parents[1] / "docs" / "formats.md").read_text()
    assert [name for name in BUILTIN_NAMES if f"`{name}`" not in documentation] == []


def test_every_format_module_registers_itself_once():
    modules = [importlib.import_module(f"exporter.parse.formats.{module.name}")
               for module in pkgutil.iter_modules(formats_package.__path__) if module.name != "registry"]
    declared = [module.FORMAT for module in modules]
    assert sorted(fmt.name for fmt in declared) == sorted(BUILTIN_NAMES) == sorted(fmt.name for fmt in registered())
    assert [fmt.name for fmt in BUILTIN_FORMATS] == [
        fmt.name for fmt in sorted((fmt for fmt in declared if fmt.detection_order is not None),
                                   key=lambda fmt: fmt.detection_order)]
    with pytest.raises(ValueError, match="two formats"):
        register(dataclasses.replace(declared[0]))


def test_field_tables_set_gauges_the_metric_table_exports_and_the_kernel_reads_them():
    # A gauge no metric reads would be parsed and kept, and never seen.
    gauges = {spec.attribute for spec in METRICS if spec.source == PRINTED}
    tables = [fmt.step_table for fmt in registered() if fmt.step_table is not None]
    assert tables
    for table in tables:
        assert {gauge for column in table.columns for gauge in (column.gauge, *column.also)} <= gauges
        native.step_reader(table.kernel_table)  # a table the kernel could not read raises ValueError


def test_a_name_normalised_to_nothing_counts_no_unprinted_losses():
    # "(ms): 3" is a named value of the empty name; only the table's own counter (Megatron's
    # "number of nan iterations") says how many losses an interval did not print.
    nemo = next(fmt for fmt in registered() if fmt.name == "nemo")
    megatron = next(fmt for fmt in registered() if fmt.name == "megatron")
    line = nemo.parse("Training epoch 0, iteration 5/9 | global_step: 5 | reduced_train_loss: 1.5 | (ms): 3 |")
    assert line is not None and line.named[""] == 3.0 and line.unprinted_nonfinite_losses == 0
    line = megatron.parse(" iteration 5/ 9 | lm loss: 1.5 | (ms): 3 | number of nan iterations: 2 |")
    assert line is not None and line.unprinted_nonfinite_losses == 2 and "loss" in line.values
