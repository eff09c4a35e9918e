"""The failure signature registry: every signature shown by a real line, in its fixture; no
event from healthy lines; one event per failure; the rank or host a line's prefix names."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from exporter.parse import ErrorEvent, LineParser, ranks, signatures
from exporter.state.store import ERROR_KINDS
from tests.support.records import fixture_lines, fixture_parser, parse_lines

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("signature", signatures.SIGNATURES, ids=lambda signature: signature.name)
def test_each_signature_is_shown_by_a_line_of_its_fixture(signature):
    assert signature.example.encode() in (FIXTURES / signature.fixture).read_bytes().split(b"\n")
    assert set(signature.kinds) <= set(ERROR_KINDS)
    event = signature.match(signature.example)
    assert event is not None and event.kind in signature.kinds
    assert signatures.classify(signature.example.encode()).kind in signature.kinds
    assert all(len(anchor) >= 3 for anchor in signature.anchors)  # the scanner's fingerprint


def test_nccl_info_lines_hold_no_failure_literal():
    # An NCCL_DEBUG=INFO console's lines (real, on hosts whose names hold "nccl", naming libnccl's paths) hold no
    # anchor: such a console is read at block speed, not a line at a time. NCCL's result codes still are anchors.
    lines = [line for line in (FIXTURES / "real" / "healthy" / "nccl_awsefaeks_nccltests.log").read_bytes().split(b"\n")
             if b" NCCL INFO " in line]
    assert len(lines) == 513 and sum(b"nccl" in line for line in lines) == 513
    assert [line for line in lines if signatures.has_failure_literal(line)] == []
    (nccl_code,) = [signature for signature in signatures.SIGNATURES if signature.name == "nccl_code"]
    for code in ("ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
                 "ncclInvalidUsage", "ncclRemoteError"):  # ncclResult_t's failures
        line = f"NCCL WARN {code}: failed"
        assert nccl_code.match(line) is not None
        assert any(anchor.decode() in line for anchor in nccl_code.anchors)


def _healthy_fixtures() -> list[Path]:
    """Fixture logs whose expectations hold no error: every step-format fixture and the real noise."""
    return sorted(log for log in FIXTURES.glob("*/*.log")
                  if not any(record["type"] == "error"
                             for record in json.loads(log.with_name(log.stem + ".expected.json").read_text())))


def test_the_healthy_fixtures_are_the_step_formats_and_the_noise():
    names = [f"{path.parent.name}/{path.stem}" for path in _healthy_fixtures()]
    assert "real/healthy_noise" in names and "real/megatron_tflops" in names and "formats/megatron" in names
    assert not [name for name in names if "errors_" in name]


@pytest.mark.parametrize("log", _healthy_fixtures(), ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_no_healthy_fixture_raises_an_event(log):
    lines = fixture_lines(log)
    as_a_file = parse_lines(fixture_parser(log), lines).records
    line_by_line = [record for line in lines for record in parse_lines(LineParser(), [line]).records]
    assert [record for record in as_a_file + line_by_line if isinstance(record, ErrorEvent)] == []


@pytest.mark.parametrize("line", [
    b"The training process was Killed by the scheduler, see above",  # a sentence
    b"[3256824.391743] Killed process 9666 (python) total-vm:53893188kB, anon-rss:23892380kB, file-rss:152808kB",
    b"[2023-05-30 20:29:14,854] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 19380",
    b"terminate called after throwing an instance of 'c10::DistBackendError'",
    b"NCCL_DEBUG=WARN is set; errors like 'NCCL error' will be reported",
    b"[2024-03-18 17:38:50,208] torch.distributed.elastic.multiprocessing.api: [ERROR] failed",
])
def test_lines_that_only_mention_a_failure_are_none(line):  # synthetic and real lines alike
    assert signatures.classify(line) is None


def _events(lines: list[bytes]) -> list[tuple[str, int | None, dict]]:
    return [(record.kind, record.rank, record.detail) for record in parse_lines(LineParser(), lines).records
            if isinstance(record, ErrorEvent)]


def test_the_agent_line_and_its_summary_are_one_failure_named_by_the_summary():
    # Synthetic, in torch's layouts: the agent's line, the launcher's traceback, the summary.
    lines = [b"E0801 16:07:21.020000 1648 api.py:874] failed (exitcode: -9) local_rank: 5 (pid: 1669) of binary: x",
             b"Traceback (most recent call last):", b'  File "torchrun", line 8, in <module>',
             b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             b"=" * 20, b"train.py FAILED", b"-" * 20, b"Failures:", b"  <NO_OTHER_FAILURES>", b"-" * 20,
             b"Root Cause (first observed failure):", b"[0]:", b"  host      : node-7",
             b"  rank      : 13 (local_rank: 5)", b"  exitcode  : -9 (pid: 1669)", b"=" * 20]
    [(kind, _, detail)] = _events(lines)
    assert (kind, detail["root_cause_rank"], detail["signal"], detail["host"]) == ("killed", 13, "SIGKILL", "node-7")


def test_an_agent_line_alone_is_an_event_of_its_signal():
    lines = [b"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 7)"]
    assert [(kind, detail["signal"]) for kind, _, detail in _events(lines)] == [("segfault", "SIGSEGV")]


def test_detail_lines_below_a_failure_are_not_failures_of_their_own():
    lines = [b"torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.18.6",
             b"ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
             b"Last error:", b"", b"ncclSystemError: a second failure after a blank line"]
    assert [kind for kind, _, _ in _events(lines)] == ["nccl", "nccl"]


@pytest.mark.parametrize(("prefix", "rank", "host"), [
    (b"3: ", 3, None),  # srun --label
    (b" 12: ", 12, None),  # srun --label, padded
    (b"worker-1: ", None, "worker-1"),  # pdsh
    (b"[80746] [rank5]:", 5, None),  # a bracketed number before torchrun's prefix
    (b"3: [default1]:", 3, None),  # srun's task number is global, torchrun's default prefix local
])
def test_a_launcher_prefix_gives_the_rank_or_host_it_names(prefix, rank, host):
    line = prefix + b"RuntimeError: CUDA error: an illegal memory access was encountered"
    [(kind, event_rank, detail)] = _events([line])
    assert (kind, event_rank, detail.get("host")) == ("cuda", rank, host)


def test_a_srun_labelled_traceback_is_one_failure_of_its_rank():
    lines = [b"2: Traceback (most recent call last):", b'2:   File "train.py", line 3, in <module>',
             b"1: step=7 loss=2.0", b"2: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert [(kind, rank) for kind, rank, _ in _events(lines)] == [("oom", 2), ("traceback", 2)]


def test_srun_labels_as_srun_prints_them_give_the_task_number_as_the_rank():
    # Real srun -l output (tests/fixtures/SOURCES.md): each line after the label is the task's own.
    lines = (FIXTURES / "real" / "srun_label.log").read_bytes().splitlines()
    stripped = [ranks.strip_rank_prefixes(line, rank_offset=16) for line in lines]
    assert [rank for rank, _ in stripped] == list(range(7))  # global: the node's offset does not apply
    assert [text for _, text in stripped][3:5] == [b"offset:2", b"alc20.llnl.gov"]
    assert all(ranks.has_srun_label(line) for line in lines)


def test_tag_ranks_are_the_ranks_strip_rank_prefixes_names():
    # TagRanks remembers a line's rank by its first tag: on real consoles' lines and fuzzed tags, line after line, it
    # names the rank strip_rank_prefixes names (stacked tags, a PID before one, a space or none after, no tag).
    rng = random.Random(29)
    lines = [line for name in ("torchrun_ddp_raise_glued.log", "torchrun_ddp_hang_console.log", "srun_label.log")
             for line in (FIXTURES / "real" / name).read_bytes().splitlines()]
    pieces = [b"[default1]:", b"[rank3]: ", b"[rank3]:", b"[default0]:[rank0]: ", b"[80746] ", b"[x]:", b"[a1]: ",
              b" 3: ", b"", b"[", b"]:", b" ", b"7", b"step=1", b"[INFO] a]: b"]
    lines += [rng.choice(pieces) + rng.choice(pieces) + rng.choice(pieces) for _ in range(3000)]
    for rank_offset in (0, 8):
        tags = ranks.TagRanks(rank_offset)
        for line in lines + lines:  # each tag met again
            assert tags.rank(line) == ranks.strip_rank_prefixes(line, rank_offset)[0], line


def test_words_before_a_colon_are_not_hosts():
    for line in (b"stderr: RuntimeError: CUDA error: x", b"EI9999: Inner Error!",
                 b"torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 1)",
                 ):
        assert all("host" not in detail for _, _, detail in _events([line]))


def test_torch_2_0_names_the_rank_inside_the_message():
    line = b"[E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread terminated with exception: CUDA error: x"
    assert [(kind, rank) for kind, rank, _ in _events([line])] == [("cuda", 7)]


REAL = FIXTURES / "real"


def _fixture_line(name: str, needle: bytes) -> bytes:
    """The line of a real fixture (tests/fixtures/SOURCES.md) that holds ``needle``."""
    return next(line for line in fixture_lines(REAL / name) if needle in line)


@pytest.mark.parametrize(("fixture", "needle", "kind", "facts"), [
    # torch 2.13.0's gloo under torchrun (tests/real/): the ranks whose peer died, or stopped.
    ("torchrun_ddp_raise.log", b"Connection closed by peer", "collective",
     {"backend": "gloo", "reason": "peer closed"}),
    ("torchrun_ddp_kill.log", b"Connection reset by peer", "collective", {"backend": "gloo", "reason": "peer reset"}),
    ("torchrun_ddp_hang_rank0.log", b"Timed out waiting", "collective_timeout",
     {"backend": "gloo", "op": "recv", "timeout_seconds": 5.0}),
    ("torchrun_ddp_oom.log", b"DefaultCPUAllocator", "oom", {"device": "cpu", "requested_bytes": 1 << 50}),
    # mindspore 2.10.0 under msrun (tests/real/): rank 2's ring all-reduce waiting for rank 1, which hung; its
    # kernel failing after it; rank 1 asking the CPU allocator for 256 TiB.
    ("msrun_hang_worker_2.log", b"wait receiving", "collective_timeout",
     {"backend": "mindspore_cpu", "op": "ReduceScatter", "peer_rank": 1}),
    ("msrun_hang_worker_2.log", b"AllReduceCPUKernelMod launch failed", "collective",
     {"backend": "mindspore_cpu", "op": "AllReduce"}),
    ("msrun_oom_worker_1.log", b"Allocate memory failed for size", "oom", {"requested_bytes": 1 << 48}),
])
def test_cpu_training_failures_printed_by_real_runs_have_their_kind(fixture, needle, kind, facts):
    event = signatures.classify(ranks.strip_rank_prefixes(_fixture_line(fixture, needle), 0)[1])
    assert event is not None and event.kind == kind
    assert facts.items() <= event.detail.items()


@pytest.mark.parametrize("line", [
    b"requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
    b"peer'))",  # a download, not a collective
    b"Timed out waiting for the checkpoint writer",
])
def test_peer_and_timeout_words_outside_gloo_are_no_collective_failure(line):
    assert signatures.classify(line) is None


@pytest.mark.parametrize(("fixture", "pid"), [("shell_killed_tty_ts.log", None), ("shell_killed_script_ts.log", 29568)])
def test_a_shells_killed_line_behind_a_timestamp_is_a_kill(fixture, pid):
    # bash 5.2 (interactive, under script: a bare "Killed"; a script: "./run.sh: line 3: PID Killed ...") reporting
    # its SIGKILLed python, each line behind moreutils' ts timestamp.
    (killed,) = [detail for kind, _, detail in _events(fixture_lines(REAL / fixture)) if kind == "killed"]
    assert killed.get("pid") == pid and killed["signal"] == "SIGKILL"


def test_deepspeeds_launcher_line_is_a_kill_on_no_rank_in_particular():
    # deepspeed 0.19.8's launcher (tests/real/), rank 1 SIGKILLed: its sigkill_handler line shows the command of the
    # last rank it spawned ('--local_rank=3'), whichever died, so it names no rank.
    lines = fixture_lines(REAL / "deepspeed_kill_console.log")
    assert any(b"'--local_rank=3'" in line and b"exits with return code = -9" in line for line in lines)
    assert [(kind, rank, detail["signal"]) for kind, rank, detail in _events(lines)] == [("killed", None, "SIGKILL")]


def test_torchruns_agent_names_the_rank_that_died_in_an_unranked_console():
    # The kill run's console (torch 2.13.0, tests/real/): the agent's line for local rank 1, and its summary.
    lines = fixture_lines(REAL / "torchrun_ddp_kill.log")
    killed = [(rank, detail) for kind, rank, detail in _events(lines) if kind == "killed"]
    assert [(rank, detail["signal"]) for rank, detail in killed] == [(1, "SIGKILL")]
    assert [rank for kind, rank, _ in _events(lines) if kind == "collective"] == [2, 0]


@pytest.mark.parametrize(("code", "kind", "signal"), [
    (-9, "killed", "SIGKILL"), (-11, "segfault", "SIGSEGV"), (-7, "hardware", "SIGBUS"), (-6, "elastic", "SIGABRT"),
    (-15, "elastic", "SIGTERM"), (1, "elastic", None)])
def test_msrun_s_report_of_a_worker_s_exit_is_named_by_the_signal_its_code_negates(code, kind, signal):
    """msrun prints ``Popen.poll()``'s return code (mindspore/parallel/cluster/process_entity/_api.py:365): the negated
    signal of a worker a signal ended, else its exit status. The real line (real/msrun_kill/msrun.log), its code
    replaced."""
    line = _fixture_line("msrun_kill/msrun.log", b"exit with exception. Error code: -9.")
    event = signatures.classify(line.replace(b"Error code: -9.", f"Error code: {code}.".encode()))
    assert event is not None and event.kind == kind
    assert (event.detail["pid"], event.detail["exitcode"], event.detail.get("signal")) == (29960, code, signal)
    assert signatures.worker_pid(event) == 29960


def test_an_older_msrun_s_report_of_a_worker_s_exit_without_its_code_is_a_failed_exit():
    """Older msrun prints no code: ``logger.error(f"Worker process {p.pid} exit with exception.")``
    (mindspore-ai/mindspore 1d200336, process_entity/_api.py). The real line, its code cut off as that format
    string prints it. msrun's report of its scheduler, and the scheduler's own "may exit with exception," are none."""
    line = _fixture_line("msrun_kill/msrun.log", b"exit with exception. Error code: -9.")
    event = signatures.classify(line.replace(b" Error code: -9.", b""))
    assert event is not None and (event.kind, event.detail) == ("elastic", {"pid": 29960, "launcher": "msrun"})
    assert signatures.classify(_fixture_line("msrun_kill/msrun.log", b"Scheduler process")) is None
    assert signatures.classify(_fixture_line("msrun_kill/scheduler.log", b"is timed out")) is None
