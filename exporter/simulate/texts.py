"""The text of simulated log lines: what MindFormers, MindSpore, HCCL/NCCL and msrun print.

Pure functions from values to lines. The layouts follow the real emitters: MindFormers'
Python logger (``[INFO] 2026-06-09 10:20:40 [file:line] func: msg``), MindSpore's C++ glog
(``[WARNING] MODULE(pid,tid,python):2026-06-09-10:20:40.123.456 [file:line] Func] msg``),
``LossCallback._print_log``'s step record, Python tracebacks and the msrun scheduler.
"""

from __future__ import annotations

from datetime import datetime

_LOSS_CALLBACK = "mindformers/pynative/callback/loss_callback.py:231"
_META_SERVER = "mindspore/ccsrc/distributed/cluster/topology/meta_server_node.cc"
_RUN_MINDFORMER = "/home/ma-user/mindformers/run_mindformer.py"
_TRAINER = "/home/ma-user/mindformers/mindformers/pynative/trainer.py"


def python_log(level: str, when: datetime, source: str, message: str) -> str:
    """A line of MindFormers' Python logger."""
    return f"[{level}] {when:%Y-%m-%d %H:%M:%S} [{source}] {message}"


def ascend_stamp(when: datetime) -> str:
    """The time as MindSpore's glog and CANN's process logs print it: milliseconds.microseconds."""
    return f"{when:%Y-%m-%d-%H:%M:%S}.{when.microsecond // 1000:03d}.{when.microsecond % 1000:03d}"


def glog(level: str, module: str, pid: int, when: datetime, source: str, function: str, message: str) -> str:
    """A line of MindSpore's C++ logger (glog layout with milliseconds.microseconds)."""
    stamp = ascend_stamp(when)
    return f"[{level}] {module}({pid},ffff{pid % 0xFFFF:04x}e0e0,python):{stamp} [{source}] {function}] {message}"


def step_line(
    when: datetime,
    step: int,
    total: int,
    loss: float,
    step_ms: int,
    lr: float,
    grad_norm: float | None,
    throughput: float,
) -> str:
    """One LossCallback record; ``grad_norm`` None prints ``NaN``, MindFormers' "not obtained"."""
    grad = "NaN" if grad_norm is None else f"{grad_norm:10.6f}"
    record = (f"{{ step:[{step:5d}/{total:5d}], loss: {loss:10.6f}, per_step_time: {step_ms:6d}ms, "
              f"lr: {lr:e}, grad_norm: {grad}, throughput: {throughput:6.2f}T }}")
    return python_log("INFO", when, _LOSS_CALLBACK, f"_print_log: {record}")


def graph_log(when: datetime, source: str, message: str) -> str:
    """A line of MindFormers' logger as a graph-mode run (run_mindformer.py, MFLossMonitor) prints it."""
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - [{source}] - INFO - {message}"


_CALLBACK = "mindformers/core/callback/callback.py"


def graph_step_lines(when: datetime, step: int, total: int, loss: float, step_ms: int, lr: float,
                     grad_norm: float | None, throughput: float) -> list[str]:
    """One MFLossMonitor record of a graph-mode run (one epoch) and the progress bar whose ``}`` ends it."""
    norm = "" if grad_norm is None else f", global_norm: [{grad_norm:.6f}]"  # MindFormers' unobtained norm: left out
    done = step / total
    bar = "\u2588" * round(50 * done)
    return [
        graph_log(when, f"{_CALLBACK}:529", f"{{ Epoch:[{1:3d}/{1:3d}], step:[{step:5d}/{total:5d}], "
                  f"loss: {loss:.3f}, "
                  f"per_step_time: {step_ms}ms, lr: {lr:g}, overflow cond: False, loss_scale: 1.0{norm}, "
                  f"train_throughput_per_npu: {throughput:.3f}T"),
        graph_log(when, f"{_CALLBACK}:529",
                  f"{100 * done:6.1f}% |{bar:<50}| {throughput / 10:.5f} samples/s/p  0:00:01 }}"),
    ]


def state_monitor_line(when: datetime, step: int, total: int, name: str, value: float, pynative: bool = False) -> str:
    """A value MindFormers' TrainingStateMonitor logs for this rank (its ``_to_log``; one epoch of ``total`` steps),
    in the logger layout of a graph-mode run, or (``pynative``) of the LossCallback lines around it."""
    message = f"Epoch:[{1:3d}/{1:3d}], step:[{step:5d}/{total:5d}] {name}: {value:.4f}"
    if pynative:
        return python_log("INFO", when, f"{_CALLBACK}:1211", f"_to_log: {message}")
    return graph_log(when, f"{_CALLBACK}:1211", message)


def startup_lines(when: datetime, pid: int, total_steps: int, pp_stages: int, ranks: int,
                  graph_mode: bool = False) -> list[str]:
    """What a worker prints before its first step: the mode banner and framework chatter."""
    tensor_parallel = 2 if ranks // pp_stages >= 2 else 1
    data_parallel = ranks // (pp_stages * tensor_parallel)
    banner = (graph_log(when, "mindformers/run_mindformer.py:71", "Running MindFormers in GRAPH_MODE.") if graph_mode
              else python_log("INFO", when, "mindformers/tools/logger.py:52", "Running MindFormers in PYNATIVE_MODE."))
    return [
        banner,
        glog("WARNING", "DEVICE", pid, when,
             "mindspore/ccsrc/plugin/device/ascend/hal/device/ascend_memory_adapter.cc:134", "Initialize",
             "Reserved memory size for other components(3221225472) is less than recommend size"
             "(4071170048), It may lead to Out Of Memory in HCCL or other components."),
        python_log("INFO", when, "mindformers/trainer/base_trainer.py:412",
                   ".........Build Dataset From Config.........."),
        python_log("INFO", when, "mindformers/dataset/causal_language_model_dataset.py:201",
                   "Now Create Causal Language Model Dataset."),
        python_log("INFO", when, "mindformers/models/modeling_utils.py:1532",
                   f"model built, parallel config: dp={data_parallel}, tp={tensor_parallel}, pp={pp_stages}"),
        python_log("INFO", when, "mindformers/pynative/trainer.py:388",
                   f"Start training, total steps {total_steps}, micro batch 4"),
    ]


def checkpoint_line(when: datetime, step: int, rank: int) -> str:
    return python_log("INFO", when, "mindformers/pynative/callback/checkpoint_callback.py:118",
                      f"Saving checkpoint at step {step} to ./output/checkpoint/rank_{rank}/")


def top_cell_warning(when: datetime, pid: int) -> str:
    """Harmless PyNative chatter that shows up every few dozen steps."""
    return glog("WARNING", "PRE_ACT", pid, when, "mindspore/ccsrc/pipeline/pynative/grad/grad.cc:1021",
                "GetTopCellInfo", "Can not find top cell, maybe dynamic shape")


def training_finished_line(when: datetime, total_steps: int) -> str:
    return python_log("INFO", when, "mindformers/pynative/trainer.py:452",
                      f"Training finished, total steps {total_steps}.")


def _traceback(frames: list[tuple[str, int, str, str]]) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines += [f'  File "{path}", line {line}, in {function}', f"    {code}"]
    return lines


def _train_loop_frames(extra: list[tuple[str, int, str, str]]) -> list[tuple[str, int, str, str]]:
    return [
        (_RUN_MINDFORMER, 342, "<module>", "main(config_)"),
        (_RUN_MINDFORMER, 251, "main", "trainer.train()"),
        (_TRAINER, 517, "train", "loss, grad_norm = self.train_step(batch)"),
        *extra,
    ]


def crash_lines(rank: int) -> list[str]:
    """An unhandled Python exception in the data pipeline."""
    frames = _train_loop_frames([(_TRAINER, 431, "train_step", "batch = next(self.dataset_iter)")])
    return [
        *_traceback(frames),
        f"RuntimeError: Exception thrown from dataset pipeline. Refer to 'Dataset Pipeline Error Message'. "
        f"Sample file ./dataset/wiki_{rank:03d}.mindrecord is corrupted.",
    ]


def oom_lines(request_bytes: int) -> list[str]:
    """MindSpore's device out-of-memory error, as it surfaces through run_mindformer.py."""
    frames = _train_loop_frames([(_TRAINER, 433, "train_step", "loss, grads = self.grad_fn(*batch)")])
    return [
        *_traceback(frames),
        "RuntimeError: ",
        "----------------------------------------------------",
        "- Framework Error Message:",
        "----------------------------------------------------",
        f"Out of Memory!!! Request memory size: {request_bytes}B, Memory Statistic:",
        "Device HBM memory size: 65536M",
        "MindSpore Used memory size: 61440M",
        "MindSpore memory base address: 0x12c0c0000000",
        "Total Static Memory size: 2048M",
        "Total Dynamic memory size: 59392M",
        "",
        "Please try to reduce 'batch_size' or check whether exists extra large shape.",
        "",
        "----------------------------------------------------",
        "- C++ Call Stack: (For framework developers)",
        "----------------------------------------------------",
        "mindspore/ccsrc/plugin/device/ascend/hal/hardware/ascend_memory_adapter.cc:189 MallocDynamicDevMem",
    ]


def segfault_lines() -> list[str]:
    """faulthandler's report of a native crash."""
    return [
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x0000ffff8fe1e020 (most recent call first):",
        f'  File "{_TRAINER}", line 433 in train_step',
        f'  File "{_TRAINER}", line 517 in train',
        f'  File "{_RUN_MINDFORMER}", line 342 in <module>',
    ]


def nccl_error_lines() -> list[str]:
    frames = _train_loop_frames([("/usr/local/lib/python3.10/site-packages/mindspore/communication/comm_func.py", 418,
                                  "all_reduce", "output = _all_reduce(tensor, op, group)")])
    return [
        *_traceback(frames),
        "RuntimeError: NCCL error in: mindspore/ccsrc/plugin/device/gpu/hal/device/distribution/nccl_wrapper.cc:112, "
        "unhandled system error, NCCL version 2.18.3",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    ]


def nccl_watchdog_lines(when: datetime, rank: int, sequence: int) -> list[str]:
    """What the surviving ranks print when the collective never completes."""
    stamp = f"{when:%m%d %H:%M:%S}.{when.microsecond:06d}"
    work = f"WorkNCCL(SeqNum={sequence}, OpType=ALLREDUCE, NumelIn=5057683, NumelOut=5057683, Timeout(ms)=600000)"
    return [
        f"[E{stamp} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"{work} ran for 600041 milliseconds before timing out.",
        f"[E{stamp} ProcessGroupNCCL.cpp:695] [Rank {rank}] To avoid data inconsistency, "
        f"we are taking the entire process down.",
    ]


def hccl_error_lines(when: datetime, pid: int, rank: int, peer: int) -> list[str]:
    """An HCCL link failure on Ascend: the RDMA link to a peer reports a completion error (MindCluster's
    AISW_CANN_HCCL_029, ``cqe error status[12]``: retransmissions exhausted), then the traceback that
    aborts the step. A failure of this rank's own link, not a timeout waiting for another rank."""
    stamp = ascend_stamp(when)
    frames = _train_loop_frames([(_TRAINER, 433, "train_step", "loss, grads = self.grad_fn(*batch)")])
    return [
        f"[ERROR] HCCL({pid},python):{stamp} [heartbeat.cc:934][{pid}][Heartbeat]cqe error status[12], "
        f"localIP:[192.168.1.{10 + rank}], remoteIP:[192.168.1.{10 + peer}], remote rank[{peer}]",
        *_traceback(frames),
        "RuntimeError: Run task for graph:kernel_graph_1 error! The details refer to 'Ascend Error Message'.",
        "",
        "----------------------------------------------------",
        "- Ascend Error Message:",
        "----------------------------------------------------",
        f"EI9999: [PID: {pid}] {stamp} Inner Error! The RDMA link to remote rank [{peer}] failed: "
        "cqe error status[12], retransmissions exhausted.",
    ]


def hbm_ecc_lines(when: datetime, pid: int, rank: int) -> list[str]:
    """An HBM multi-bit ECC error of the rank's NPU, as the driver's fault event reaches the process log
    (fault event 0x80E01801 of MindCluster's knowledge), then the runtime's error."""
    stamp = ascend_stamp(when)
    return [
        f"[ERROR] DRV({pid},python):{stamp} [ascend][curpid: {pid}, {pid}][drv][devmm] device {rank % 8} "
        f"reported event_id=0x80e01801: multi-bit ECC error when accessing the HBM, the device must be isolated",
        f"[ERROR] RUNTIME({pid},python):{stamp} [task.cc:1582]{pid} PrintErrorInfo: device {rank % 8} memory error, "
        f"retCode=507054 (HBM multi-bit ECC), stream_id=3, task_id=2",
    ]


def hccl_notify_timeout_lines(when: datetime, pid: int, rank: int, peer: int) -> list[str]:
    """A rank whose collective waited for a dead peer: HCCL's notify wait task fails, CANN says EI0002."""
    stamp = ascend_stamp(when)
    return [
        f"[ERROR] HCCL({pid},python):{stamp} [task_exception_handler.cc:452][{pid}][TaskExceptionHandler][Callback]"
        f"Task run failed, base information is streamID:[3], taskID[{40 + rank}], taskType[Notify Wait], "
        f"tag[AllReduce_hccl_world_group], remote rank[{peer}].",
        f"EI0002: [PID: {pid}] {stamp} The wait execution of the Notify register times out. Reason: The Notify "
        f"register has not received the Notify record from remote rank [{peer}].",
    ]


def scheduler_registered(when: datetime, pid: int, node: int, host: str, ip: str, registered: int,
                         expected: int) -> str:
    return glog("WARNING", "DISTRIBUTED", pid, when, f"{_META_SERVER}:254", "ProcessRegister",
                f"The new node: {node}(role: MS_WORKER), rank id: {node}, device id: {node % 8}, hostname: {host}, "
                f"ip: {ip} is registered successfully. Currently registered node number: {registered}, "
                f"expected node number: {expected}")


def scheduler_initialized(when: datetime, pid: int) -> list[str]:
    return [
        glog("INFO", "DISTRIBUTED", pid, when, f"{_META_SERVER}:688", "TransitionToInitialized",
             "The cluster topology has been constructed successfully."),
        glog("INFO", "DISTRIBUTED", pid, when, "mindspore/ccsrc/distributed/cluster/cluster_context.cc:119",
             "Initialize", "Cluster is successfully initialized."),
    ]


def scheduler_node_timed_out(when: datetime, pid: int, node: int) -> str:
    return glog("ERROR", "DISTRIBUTED", pid, when, f"{_META_SERVER}:652", "UpdateTopoState",
                f"The node: {node} is timed out. It may exit with exception, please check this node's log.")


def scheduler_unregistered(when: datetime, pid: int, node: int) -> str:
    return glog("WARNING", "DISTRIBUTED", pid, when, f"{_META_SERVER}:301", "ProcessUnregister",
                f"Node {node} has unregistered.")
