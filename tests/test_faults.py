"""The Ascend fault knowledge (exporter/parse/faults/): the table itself, and a real fault line of every
family it covers through ``serve`` and ``analyze`` alike: the right kind, code and component on the rank
that printed it; informational lines raise nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from exporter import kinds
from exporter.parse import faults, signatures
from exporter.simulate import RunConfig, parse_incident, simulate, write_run
from exporter.simulate.texts import step_line
from tests.support.exporter_process import ExporterProcess, exporter_command
from tests.support.net import eventually

REAL = Path(__file__).parent / "fixtures" / "real"
# MindCluster's fixtures and docs, then CANN process-log and host kernel lines its knowledge lacks (SOURCES.md).
REAL_LINES = [line for name in ("errors_ascend_faults.log", "errors_cann_plog_host.log")
              for line in (REAL / name).read_text().splitlines()]

# (family, a fragment that picks the line of errors_ascend_faults.log, kind, code, component)
FAMILIES = [
    ("CANN error message", "E30008: AI CPU operator", "other", "E30008", "GETNEXT"),
    ("device log notify wait", "<exception_print>notify wait timeout", "hccl_timeout", "EI0002", "HCCL"),
    ("HCCL process log: socket timeout", "get socket timeout, tot", "hccl_timeout", "EI0006", "HCCL"),
    ("HCCL process log: notify wait task", "[TaskExceptionHandler][Callback]", "hccl_timeout", "AISW_CANN_HCCL_027",
     "HCCL"),
    ("HCCL process log: link", "the connection failure between this device", "hccl", "AISW_CANN_HCCL_017", "HCCL"),
    ("RUNTIME process log: halMemAlloc", "halMemAlloc failed", "oom", "AISW_CANN_Runtime_054", "RUNTIME"),
    ("RUNTIME process log: AI Core", "Aicore kernel execute failed", "other", "AISW_CANN_Runtime_032", "RUNTIME"),
    ("TSD process log", "TsdOpen failed, deviceId[4]", "other", "AISW_CANN_TSD_05", "TSD"),
    ("TSD process log naming HCCP's code", "DeviceMsgProc  errcode[EJ0001]", "hccl", "EJ0001", "HCCP"),
    ("HCCP process log: NIC down", "ra hdc message process failed ret(-67)", "hardware", "AISW_CANN_ERRMSG_Custom_06",
     "HCCL"),
    ("HCCP process log: rank table", "[check][ip]fail", "hccl", "AISW_CANN_HCCP_002", "HCCP"),
    ("device fault event", "Event id=0x8c17a005", "hardware", "0x8C17A005", "NPU"),
    ("NPU driver in the host kernel log", "Heartbeat lost!", "hardware", "0x40F84E00", "NPU"),
    ("host OOM kill", "Out of memory: Kill process", "killed", "Comp_OS_Kernel_Mem_08", "OS"),
    ("host file system error", "EXT4-fs error", "other", "Comp_OS_Kernel_FS_02", "OS"),
    ("torch_npu runtime error", "error code is 507035", "hardware", "507035", "RUNTIME"),
    ("torch_npu sync timeout", "error code is 507048", "hccl_timeout", "507048", "RUNTIME"),
    # Faults MindCluster names no code for: "unknown", with the component that printed them.
    ("DRV process log: device link lost", "hdc connect down", "hardware", "unknown", "DRV"),
    ("RUNTIME process log: device failed", "ReportStatusFailProc:Device status failure", "hardware", "unknown",
     "RUNTIME"),
    ("DRV process log: out of memory", "Msg send failed. (ret=-12", "oom", "unknown", "DRV"),
    ("RUNTIME process log: its return code", "ErrCode=207001", "oom", "207001", "RUNTIME"),
    ("DRV process log: host memory mapping", "Mem_remote_map ioctl error", "other", "unknown", "DRV"),
    ("GE process log: assert", "GetHbmFeatureMapMemInfo: ErrorNo", "other", "unknown", "GE"),
    ("GE process log: the failed operator", "ErrorTrackingCallback: ErrorNo", "other", "unknown", "GE"),
    ("host machine check exception", "Machine Check Exception: 5", "hardware", "unknown", "OS"),
    ("host panic on a machine check", "not syncing: Fatal machine check", "hardware", "Comp_OS_HW_Mem_02", "OS"),
    ("host hard lockup", "NMI watchdog: Watchdog detected hard LOCKUP", "hardware", "Comp_OS_Kernel_CPU_04", "OS"),
    ("host OOM killer (Killed process)", "Out of memory: Killed process 15784", "killed", "Comp_OS_Kernel_Mem_08",
     "OS"),
]
# Lines of the same fixture that name a fault the knowledge knows, at a level or of a kind that is no failure.
QUIET = ["[INFO] [devdrv_init_dev_num", "|info|sysmonitor", "Vmallocinfo Start", "APEI Generic Hardware Error",
         # Machine checks the kernel logged and went on (no exception raised): corrected or recovered.
         "Machine check events logged", "Machine Check: 0 Bank 4"]


def _line(fragment: str) -> str:
    (line,) = [line for line in REAL_LINES if fragment in line]
    return line


def _worker_log(path: Path, tail: list[str]) -> None:
    """20 MindFormers step lines, then ``tail``."""
    start = datetime(2026, 6, 9, 10, 20, 0)
    steps = [step_line(start + timedelta(seconds=step), step, 100, 2.5 - step / 100, 850, 1e-4, 1.0, 12.0)
             for step in range(1, 21)]
    path.write_text("\n".join([*steps, *tail]) + "\n")


# --- the table ------------------------------------------------------------------------------


def test_every_fault_counts_as_an_error_kind_of_the_table_or_as_nothing():
    table = faults.knowledge()
    assert len(table.faults) > 700
    assert {fault.kind for fault in table.faults} - {None} <= set(kinds.ERROR_KINDS)
    assert {fault.kind for fault in table.codes.values()} <= set(kinds.ERROR_KINDS)
    assert all(fault.advice for fault in table.faults if fault.kind is not None)


def test_a_code_label_is_one_the_knowledge_names_else_empty():
    assert faults.known_code("EI0006") == "EI0006"
    assert faults.known_code("0x80E01801") == "0x80E01801"  # HBM multi-bit ECC, MindCluster's code
    assert faults.known_code("507053") == "507053"
    assert faults.known_code("unknown") == "unknown"  # a fault the table names without a code (its component says more)
    assert faults.known_code("EZ1234") == ""  # CANN's shape, but no code of the table: the label stays bounded
    assert faults.known_code(507053) == ""


def test_every_cann_code_of_the_table_is_found_by_the_block_scanner():
    # A code the scanner's anchors miss would only be matched on lines that happen to hold another anchor.
    for code in faults.knowledge().codes:
        if code.startswith("E"):
            assert any(literal in code.encode() for literal in signatures.FAILURE_LITERALS), code


def test_hccl_timeouts_follow_and_device_faults_lead():
    assert "hccl_timeout" in kinds.FOLLOWER_KINDS
    assert "hardware" not in kinds.FOLLOWER_KINDS
    # MindCluster's own rules agree: a TS heartbeat error explains runtime stream sync timeouts.
    assert "AISW_CANN_Runtime_022" in faults.knowledge().by_id["0x80FA4E00"].explains


@pytest.mark.parametrize("level", ["[WARNING]", "[INFO]"])
@pytest.mark.parametrize(("fragment", "kind"), [("halMemAlloc failed", "oom"), ("hdc connect down", "hardware"),
                                                ("GetHbmFeatureMapMemInfo", "other")])
def test_a_fault_on_a_warning_or_info_line_counts_nothing(level, fragment, kind):
    line = _line(fragment).replace("[ERROR]", level)
    assert signatures.classify(line.encode()) is None
    assert signatures.classify(_line(fragment).encode()).kind == kind


# --- every family through serve and analyze -------------------------------------------------


@pytest.fixture(scope="module")
def fault_logs(tmp_path_factory):
    """One worker log per family (rank = its index), then one of informational lines only."""
    log_dir = tmp_path_factory.mktemp("faults") / "logs"
    log_dir.mkdir()
    for rank, (_, fragment, *_) in enumerate(FAMILIES):
        _worker_log(log_dir / f"worker_{rank}.log", [_line(fragment)])
    _worker_log(log_dir / f"worker_{len(FAMILIES)}.log", [_line(fragment) for fragment in QUIET])
    return log_dir


def test_every_family_gives_its_kind_code_and_component_on_its_rank_through_serve(fault_logs):
    quiet_rank = str(len(FAMILIES))
    with ExporterProcess("--log-dir", str(fault_logs), "--run", "job") as exporter:
        eventually(lambda: exporter.total("training_steps_total") == 20 * (len(FAMILIES) + 1), 20, what="every step")
        eventually(lambda: exporter.total("training_errors_total") >= len(FAMILIES), 10, what="every fault")
        samples = exporter.samples()
    errors = {(dict(labels)["rank"], dict(labels)["kind"]): value for (metric, labels), value in samples.items()
              if metric == "training_errors_total" and value}
    last = {dict(labels)["rank"]: (dict(labels)["kind"], dict(labels)["code"], dict(labels)["component"])
            for (metric, labels), value in samples.items() if metric == "training_last_error_info" and value == 1}
    expected_errors = {(str(rank), kind): 1 for rank, (_, _, kind, _, _) in enumerate(FAMILIES)}
    assert errors == expected_errors
    assert last == {str(rank): (kind, code, component) for rank, (_, _, kind, code, component) in enumerate(FAMILIES)}
    assert quiet_rank not in last


def test_every_family_gives_its_kind_code_component_and_advice_on_its_rank_through_analyze(fault_logs):
    result = subprocess.run(exporter_command("analyze", str(fault_logs), "--format", "json"), capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    errors = {(finding["rank"], finding["kind"]): finding for finding in run["findings"]
              if finding["kind"] in kinds.ERROR_KINDS}
    assert set(errors) == {(str(rank), kind) for rank, (_, _, kind, _, _) in enumerate(FAMILIES)}
    for rank, (family, _, kind, code, component) in enumerate(FAMILIES):
        finding = errors[(str(rank), kind)]
        assert (finding["code"], finding["component"]) == (code, component), family
        assert finding["advice"] == faults.describe(code).advice or finding["advice"], family
        assert finding["advice"], family
    quiet = [rank for rank in run["ranks"] if rank["rank"] == str(len(FAMILIES))]
    assert quiet and not quiet[0]["errors"]


def test_analyze_names_the_ecc_rank_the_root_cause_of_the_others_hccl_timeouts(tmp_path):
    """simulate's ``ecc`` drill: rank 1's HBM multi-bit ECC error, the others' notify waits time out after it."""
    write_run(simulate(RunConfig(ranks=4, steps=30, incidents=(parse_incident("ecc:1@12"),))), tmp_path)
    result = subprocess.run(exporter_command("analyze", str(tmp_path), "--format", "json"), capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    (cause,) = [finding for finding in run["findings"] if finding["root_cause"]]
    assert (cause["kind"], cause["rank"], cause["code"], cause["component"]) == ("hardware", "1", "0x80E01801", "NPU")
    assert cause["advice"]
    assert {(follower["kind"], follower["rank"]) for follower in cause["explains"]} == {
        ("hccl_timeout", "0"), ("hccl_timeout", "2"), ("hccl_timeout", "3")}
    text = subprocess.run(exporter_command("analyze", str(tmp_path)), capture_output=True, text=True, timeout=120,
                          check=False).stdout
    assert "Root cause: hardware on rank 1" in text and "It explains hccl_timeout" in text


def test_a_cann_device_log_counts_its_faults_on_the_rank_of_its_device(tmp_path):
    """$ASCEND_PROCESS_LOG_PATH's device-<id>/ logs, an optional source: a second --log-dir of the same run."""
    logs, process_logs = tmp_path / "logs", tmp_path / "process_log" / "debug" / "device-1"
    logs.mkdir()
    process_logs.mkdir(parents=True)
    for rank in (0, 1):
        _worker_log(logs / f"worker_{rank}.log", [])
    (process_logs / "device-10972_20230607152210099.log").write_text(_line("<exception_print>notify wait") + "\n")
    arguments = ("--log-dir", str(logs), "--log-dir", str(tmp_path / "process_log"), "--run", "job")
    with ExporterProcess(*arguments) as exporter:
        eventually(lambda: exporter.total("training_errors_total") >= 1, 20, what="the device log's fault")
        samples = exporter.samples()
    errors = {(dict(labels)["run"], dict(labels)["rank"], dict(labels)["kind"]) for (metric, labels), value
              in samples.items() if metric == "training_errors_total" and value}
    assert errors == {("job", "1", "hccl_timeout")}


@pytest.mark.parametrize("plog_ranks", [True, False])
def test_a_cann_process_log_counts_on_the_rank_whose_worker_log_names_its_pid(tmp_path, plog_ranks):
    """--plog-ranks: $ASCEND_PROCESS_LOG_PATH's plog-<pid>_*.log on the rank of the worker whose MindSpore records
    carry that pid (real msrun worker logs: pids 953 and 3937); a plog no worker names waits unread, and is read
    from its start once one does. Without it, each plog is a rank-less series of its own."""
    logs, plogs = tmp_path / "logs", tmp_path / "process_log" / "debug" / "plog"
    logs.mkdir()
    plogs.mkdir(parents=True)
    _worker_log(logs / "worker_0.log", [])
    shutil.copy(REAL / "msrun_nan_worker_1.log", logs / "worker_1.log")
    socket_timeout = _line("get socket timeout, tot")  # line 2 of MindCluster's plog-10972_20230131024824126.log
    (plogs / "plog-953_20230131024824126.log").write_text(socket_timeout + "\n")
    (plogs / "plog-3937_20230131024824451.log").write_text(_line("halMemAlloc failed") + "\n")
    arguments = ["--log-dir", str(logs), "--log-dir", str(tmp_path / "process_log"), "--run", "job"]

    def errors(run: str = "job") -> set[tuple[str, str]]:
        return {(dict(labels)["rank"], dict(labels)["kind"]) for (metric, labels), value
                in exporter.samples().items() if metric == "training_errors_total" and value
                and dict(labels)["run"] == run}

    with ExporterProcess(*arguments, *(["--plog-ranks"] if plog_ranks else [])) as exporter:
        if not plog_ranks:
            # Rank-less files (discover.RanklessFiles), each on the empty rank: the run's first (in name order with
            # numbers as numbers) has the run's label, the next its path added to it.
            eventually(lambda: (errors(), errors("job/debug/plog/plog-3937_20230131024824451.log"))
                       == ({("", "hccl_timeout")}, {("", "oom")}), 20, what="each plog on its own")
            return
        eventually(lambda: errors() == {("1", "hccl_timeout")}, 20, what="the plog of worker 1's process")
        time.sleep(1)  # a rescan or two: the plog of process 3937 still waits
        assert errors() == {("1", "hccl_timeout")}
        # Rank 0's console now prints a record of process 3937 (a line of the real msrun run whose pid it was).
        (record,) = [line for line in (REAL / "msrun_oom_worker_1.log").read_text().splitlines()
                     if line.startswith("[WARNING] DEVICE(3937,")][:1]
        with open(logs / "worker_0.log", "a") as console:
            console.write(record + "\n")
        eventually(lambda: errors() == {("1", "hccl_timeout"), ("0", "oom")}, 20, what="the waiting plog, read")
