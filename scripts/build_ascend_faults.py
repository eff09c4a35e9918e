"""Build exporter/parse/faults/ascend.json from MindCluster FaultDiag's public knowledge base.

    python scripts/build_ascend_faults.py KG_CONFIG_JSON [--commit SHA]

KG_CONFIG_JSON is ``component/ascend-faultdiag/src/ascend_fd/configuration/kg-config.json``
of https://github.com/Ascend/mind-cluster (Apache License 2.0). What is taken over as fact:
each fault's code, its keywords (or regex), its log family, its component and module, its
short name, and its cause -> effect rules. What is ours: the kind each fault counts as
(exporter/kinds.py), whether it counts at all (a corrected error, a warning, a success
message count nothing), the component label and the one line of advice, written here.

The families kept are those a training worker's console, a CANN process log or the node's
kernel log can print (FAMILIES); docs/ascend-faults.md says which are left out and why.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "exporter" / "parse" / "faults" / "ascend.py"
SOURCE = "https://github.com/Ascend/mind-cluster/blob/{commit}/component/ascend-faultdiag/src/ascend_fd/configuration/kg-config.json"

# MindCluster's log family (its entries' ``source_file``) -> where a training node prints it.
FAMILIES = {
    "TrainLog": "worker",  # the training process's console: MindSpore, torch_npu, CANN error messages
    "CANN_Plog": "plog",  # CANN process logs (plog-<pid>_*.log; on the console with ASCEND_SLOG_PRINT_TO_STDOUT=1)
    "CANN_Device": "plog",  # CANN device-side logs (device-<id>/)
    "CANN_Plog | OS": "plog",
    "NPU_OS": "device",  # NPU device OS log and fault events (Event id=0x...)
    "NPU_Device": "device",
    "NPU_History": "device",
    "NPU_Host": "kernel",  # the NPU driver in the host's kernel log
    "OS": "kernel",  # host kernel and system log
    "OS-dmesg": "kernel",
    "OS-vmcore-dmesg": "kernel",
    "OS-sysmon": "kernel",
}

CANN_CODE = re.compile(r"\b(E[A-Z0-9]\d{4})\b")

# CANN error codes the knowledge names (its keywords and rules) and what each counts as. The
# letter after "E" is the family: I HCCL, J HCCP, L runtime memory, Z/E/H/3/8/N/1 inner errors.
CANN_CODES = {
    "EI0002": ("hccl_timeout", "HCCL", "notify wait timed out: a peer rank never reached the collective"),
    "EI0003": ("hccl", "HCCL", "invalid collective argument"),
    "EI0004": ("hccl", "HCCL", "invalid rank table or rank"),
    "EI0005": ("hccl", "HCCL", "collective arguments differ between ranks"),
    "EI0006": ("hccl_timeout", "HCCL", "socket setup with a peer rank timed out"),
    "EI9999": ("hccl", "HCCL", "HCCL inner error"),
    "EJ0001": ("hccl", "HCCP", "HCCP process failed to start"),
    "EL0004": ("oom", "RUNTIME", "device memory allocation failed"),
    "E19999": ("other", "GE", "inner error"),
    "E30008": ("other", "AICPU", "AI CPU operator timed out"),
    "E39999": ("other", "AICPU", "inner error"),
    "E89999": ("other", "TBE", "inner error"),
    "EE1001": ("other", "RUNTIME", "invalid runtime argument"),
    "EE9999": ("other", "RUNTIME", "inner error"),
    "EH9999": ("other", "DRV", "inner error"),
    "EN9999": ("other", "CANN", "inner error"),
    "EZ9903": ("other", "CANN", "inner error"),
    "EZ9999": ("other", "CANN", "inner error"),
}

# ACL runtime return codes (CANN's rt_error_codes.h: code and name are facts) a worker prints
# as "error code is 507053" / "runtime result = 507033", with what they count as.
RUNTIME_CODES = {
    "107020": ("hccl_timeout", "RUNTIME", "ACL_ERROR_RT_TASK_TIMEOUT"),
    "107022": ("terminated", "RUNTIME", "ACL_ERROR_RT_DEVICE_TASK_ABORT"),
    "207001": ("oom", "RUNTIME", "ACL_ERROR_RT_MEMORY_ALLOCATION"),
    "207018": ("oom", "RUNTIME", "ACL_ERROR_RT_DEVICE_OOM"),
    "507010": ("hardware", "RUNTIME", "ACL_ERROR_RT_LOST_HEARTBEAT"),
    "507011": ("other", "RUNTIME", "ACL_ERROR_RT_MODEL_EXECUTE"),
    "507014": ("hardware", "RUNTIME", "ACL_ERROR_RT_AICORE_TIMEOUT"),
    "507015": ("hardware", "RUNTIME", "ACL_ERROR_RT_AICORE_EXCEPTION"),
    "507016": ("hardware", "RUNTIME", "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION"),
    "507017": ("other", "RUNTIME", "ACL_ERROR_RT_AICPU_TIMEOUT"),
    "507018": ("other", "RUNTIME", "ACL_ERROR_RT_AICPU_EXCEPTION"),
    "507033": ("other", "RUNTIME", "ACL_ERROR_RT_DEV_SETUP_ERROR"),
    "507034": ("hardware", "RUNTIME", "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT"),
    "507035": ("hardware", "RUNTIME", "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"),
    "507046": ("hccl_timeout", "RUNTIME", "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"),
    "507047": ("hccl_timeout", "RUNTIME", "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"),
    "507048": ("hccl_timeout", "RUNTIME", "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT"),
    "507053": ("hardware", "RUNTIME", "ACL_ERROR_RT_DEVICE_MEM_ERROR"),
    "507054": ("hardware", "RUNTIME", "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR"),
    "507055": ("hardware", "RUNTIME", "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR"),
    "507056": ("hardware", "RUNTIME", "ACL_ERROR_RT_LINK_ERROR"),
    "507057": ("hccl_timeout", "RUNTIME", "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR"),
    "507899": ("other", "DRV", "ACL_ERROR_RT_DRV_INTERNAL_ERROR"),
    "507901": ("other", "RUNTIME", "ACL_ERROR_RT_SOCKET_CLOSE"),
    "507904": ("hccl", "RUNTIME", "ACL_ERROR_RT_COMM_OP_RETRY_FAIL"),
}

# What a fault counts as where the rules below would get it wrong (our reading of each).
KIND_OVERRIDES = {
    "AISW_PyTorch_Train_31": "hardware",  # UCE ERROR: uncorrectable HBM error
    "AISW_PyTorch_Train_33": "terminated",  # FORCE STOP: the device was stopped on purpose
    "AISW_MindSpore_msrun_15": "hccl_timeout",  # world group init failed: another worker exited first
    "AISW_MindSpore_msrun_09": "hccl_timeout",  # cannot reach the scheduler
    "AISW_CANN_ERRMSG_Custom_06": "hardware",  # the NPU's network port was down before the task
    "AISW_CANN_Runtime_055": "hardware",
    "Comp_OS_Kernel_Mem_07": "killed",  # cgroup OOM kill
    "Comp_OS_Kernel_Mem_08": "killed",  # kernel OOM killer
    "Comp_OS_Service_Container_05": "killed",  # container exit 137
    "Comp_OS_Service_State_02": "other",
    "Comp_OS_HW_Mem_02": "hardware",
    "Comp_OS_HW_Mem_03": "hardware",
    "Comp_OS_HW_Mem_04": "hardware",
    "Comp_OS_HW_CPU_01": "hardware",
    "Comp_OS_HW_PCIE_02": "hardware",
    "Comp_OS_HW_Stor_02": "hardware",
    "Comp_OS_Kernel_CPU_04": "hardware",
    "0x40F84E00": "hardware",
    "AISW_MindSpore_Backend_Runtime_06": "oom",
}

# Our additions, each from public source text (cited): alternatives for MindCluster faults, and
# faults its knowledge lacks that a training console prints.
TORCH_NPU = "https://github.com/Ascend/pytorch/blob/f38af7869a43923254fb75d7d7a7fbbcec3caef5/torch_npu/csrc/core/npu/NPUException.h"
EXTRA_KEYWORDS = {
    # The kernel's OOM killer line ("Out of memory: Kill process N (python)"): longer than the bare words,
    # which a framework's own out-of-memory message shares.
    "Comp_OS_Kernel_Mem_08": [["Out of memory: Kill"]],
    # The driver's allocation call that failed, however the runtime or driver logs it (MindCluster's keywords
    # need the huge-page wrapper's name in front of it).
    "AISW_CANN_Runtime_054": [["halMemAlloc failed"]],
}
# A fault MindCluster has no entry for gets the code UNKNOWN (a bounded label value, with its component);
# its id says what it is. Each names the public text its keywords were read from.
UNKNOWN = "unknown"
MS_CANN_CASES = ("https://github.com/mindspore-ai/docs/blob/31d99939defa022f0c09036e1c909d87c34c9eaf/"
                 "tutorials/source_zh_cn/debug/error_analysis/cann_error_cases.md")
CANN_OOM_CASE = ("https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/850/maintenref/troubleshooting/"
                 "troubleshooting_0050.html")
ASCEND_310_NOTES = ("https://github.com/channyHuang/channyHuang.github.io/blob/872073238af38ea1bdb3379537b8c64ee9be4c24/"
                    "_posts/linuxAndWin/2025-03-18-Inference_In_Ascend.md")
TORCHAIR_SUPERKERNEL = "https://gitcode.com/Ascend/torchair/blob/master/docs/zh/appendix/cases/superkernel_cases.md"
LINUX_MCE = "https://github.com/torvalds/linux/blob/master/arch/x86/kernel/cpu/mce/core.c"
LINUX_PANIC = "https://github.com/torvalds/linux/blob/master/kernel/panic.c"
EXTRA_FAULTS: list[dict[str, Any]] = [
    {"id": "507054", "family": "TrainLog", "component": "RUNTIME", "module": "RUNTIME", "kind": "hardware",
     "fault": "HBM multi-bit ECC error", "keywords": [["NPU function error", "HBM MULTI BIT ECC ERROR"]],
     "origin": TORCH_NPU},
    # CANN process-log lines (plog; the console with ASCEND_SLOG_PRINT_TO_STDOUT=1) of the driver (DRV),
    # the runtime and the graph engine (GE) that MindCluster's knowledge does not name.
    {"id": "DRV_hdc_connect_down", "family": "CANN_Plog", "component": "DRV", "module": "Drv", "kind": "hardware",
     "code": UNKNOWN, "fault": "host-device channel (HDC) to the NPU went down: the device stopped answering",
     "keywords": [["[ERROR] DRV(", "hdc connect down"]], "origin": MS_CANN_CASES},
    {"id": "RUNTIME_device_status_failure", "family": "CANN_Plog", "component": "RUNTIME", "module": "RUNTIME",
     "kind": "hardware", "code": UNKNOWN, "fault": "the runtime found the device in a failed state",
     "keywords": [["[ERROR] RUNTIME(", "ReportStatusFailProc:Device status failure"]], "origin": MS_CANN_CASES},
    # ret=-12 and errno 12 are ENOMEM: the driver could not get the device memory asked for.
    {"id": "DRV_msg_send_enomem", "family": "CANN_Plog", "component": "DRV", "module": "Drv", "kind": "oom",
     "code": UNKNOWN, "fault": "driver memory request refused: out of device memory (ENOMEM)",
     "keywords": [["[ERROR] DRV(", "Msg send failed. (ret=-12;"], ["[ERROR] DRV(", "<errno:12,", "Mem create failed."]],
     "origin": CANN_OOM_CASE},
    {"id": "RUNTIME_halMemCreate_failed", "family": "CANN_Plog", "component": "RUNTIME", "module": "RUNTIME",
     "kind": "oom", "code": UNKNOWN, "fault": "physical device memory allocation failed (halMemCreate)",
     "keywords": [["[ERROR] RUNTIME(", "halMemCreate failed."]], "origin": CANN_OOM_CASE},
    {"id": "DRV_mem_remote_map_failed", "family": "CANN_Plog", "component": "DRV", "module": "Drv", "kind": "other",
     "code": UNKNOWN, "fault": "mapping host memory for the device failed (Mem_remote_map ioctl)",
     "keywords": [["[ERROR] DRV(", "Mem_remote_map ioctl error"]], "origin": ASCEND_310_NOTES},
    {"id": "RUNTIME_pcie_host_register_failed", "family": "CANN_Plog", "component": "RUNTIME", "module": "RUNTIME",
     "kind": "other", "code": UNKNOWN, "fault": "registering a host buffer over PCIe failed",
     "keywords": [["[ERROR] RUNTIME(", "Pcie Host Register failed"]], "origin": ASCEND_310_NOTES},
    # GE's own failures print "ErrorNo: <n>(<reason>)"; an assert of the model loader is one.
    {"id": "GE_assert_failed", "family": "CANN_Plog", "component": "GE", "module": "GE", "kind": "other",
     "code": UNKNOWN, "fault": "a graph engine (GE) check failed while loading or running the model",
     "keywords": [["[ERROR] GE(", "ErrorNo: ", "]Assert ("]], "origin": ASCEND_310_NOTES},
    # GE's error tracking names the operator whose task failed on the device (after the runtime's own error).
    {"id": "GE_error_tracking", "family": "CANN_Plog", "component": "GE", "module": "GE", "kind": "other",
     "code": UNKNOWN, "fault": "an operator's task failed on the device (GE error tracking names it)",
     "keywords": [["[ERROR] GE(", "ErrorTrackingCallback: ErrorNo: "]], "origin": TORCHAIR_SUPERKERNEL},
    # The host kernel: a fatal machine check (the kernel says "Exception" when the #MC handler runs, not
    # for the corrected events it polls) and any panic, which takes the node and every rank on it down.
    {"id": "OS_machine_check_exception", "family": "OS-dmesg", "component": "OS", "module": "OS", "kind": "hardware",
     "code": UNKNOWN, "fault": "fatal CPU or memory machine check exception",
     "keywords": [["mce: [Hardware Error]: CPU ", ": Machine Check Exception: "]], "origin": LINUX_MCE},
    {"id": "OS_kernel_panic", "family": "OS-vmcore-dmesg", "component": "OS", "module": "OS", "kind": "hardware",
     "code": UNKNOWN, "fault": "the node's kernel panicked: every rank on it stopped",
     "keywords": [["Kernel panic - not syncing: "]], "origin": LINUX_PANIC},
]

# Faults that are no failure of the training: corrected errors, warnings, success messages,
# housekeeping of services. Recognised, so no other signature counts the line either.
INFORMATIONAL = {
    "Comp_OS_HW_Mem_01", "Comp_OS_HW_CPU_02", "Comp_OS_HW_PCIE_01",  # corrected (CE) errors
    "Comp_OS_Service_Clock_01", "Comp_OS_Kernel_Sys_Res_07", "Comp_OS_Service_State_05",
    "Comp_OS_Kernel_CPU_11", "Comp_OS_Kernel_Mem_05", "Comp_OS_Kernel_Mem_06", "Comp_OS_Kernel_CPU_07",
    "AISW_MindSpore_lite_13",  # "Execute model success"
    "AISW_PyTorch_Train_16",  # an operator falling back to the CPU: a performance note
    # "Bad performance attention" and warnings of the data pipeline
    "AISW_MindSpore_MindData_16", "AISW_MindSpore_MindData_17", "AISW_MindSpore_MindData_24",
    "AISW_CANN_TSD_03",  # "report alarm success"
    "AISW_CANN_DRV_TS_030",  # "Recycle warn": resources reclaimed at exit
    # msrun's scheduler naming the nodes that timed out: counted as its node_timeout event
    # (parse/formats/msrun_scheduler.py), the node's own log has the cause.
    "AISW_MindSpore_DP_35",
}
_INFO_WORDS = re.compile(r"\(CE\)|\bcorrectable\b|non-fatal|minor alarm|\bsuccess", re.I)

_TIMEOUT = re.compile(r"time ?out|timed out|notify wait|wait .*timeout", re.I)
_MEMORY = re.compile(r"out of memory|\bOOM\b|insufficient (?:device |system )?memory|memory not enough|"
                     r"memory isn.t enough|alloc(?:ate)? (?:device )?memory|memory allocation|halMemAlloc", re.I)
_HARDWARE = re.compile(r"\bECC\b|\bUCE\b|heartbeat|link ?down|over-?temperature|high temperature|bus (?:access )?error|"
                       r"machine check|uncorrectable|multi-bit|hardware", re.I)


def _alternatives(regex: dict) -> tuple[list[list[str]], str]:
    """MindCluster's ``in`` (one keyword list, or a list of alternatives) and ``regex``."""
    found = regex.get("in") or []
    if found and isinstance(found[0], str):
        found = [found]
    return [list(alt) for alt in found if alt], regex.get("regex") or ""


def _component(key: str, attribute: dict) -> str:
    component, module = attribute["component"], attribute["module"]
    if component == "CANN":
        return {"Drv": "DRV", "RUNTIME/DRV": "RUNTIME"}.get(module, module.upper())
    if component == "NPU":
        return "NPU"
    if component == "HostOS":
        return "OS"
    if component == "AI Framework":
        return "MindSpore" if "MindSpore" in key else "PyTorch" if "PyTorch" in key else "Framework"
    return component


def _kind(key: str, family: str, attribute: dict, words: str, component: str) -> str | None:
    if key in INFORMATIONAL:
        return None
    if key in KIND_OVERRIDES:
        return KIND_OVERRIDES[key]
    said = f"{attribute['cause_en']} {words}"
    if _INFO_WORDS.search(attribute["cause_en"]):
        return None
    if family in ("NPU_OS", "NPU_Device") and key.startswith("0x"):
        return "hardware"  # a fault event of the device itself
    if component in ("HCCL", "HCCP") or re.search(r"\bHCCL\b|\bhccl\b|Hccl", words):
        return "hccl_timeout" if _TIMEOUT.search(said) else "hccl"
    if (component == "RUNTIME" and _TIMEOUT.search(said)
            and not re.search(r"ai ?core|ai ?cpu|aicpu|vector|getnext", said, re.I)):
        return "hccl_timeout"  # a stream or event wait that timed out: the collective on it waited for a peer
    if _MEMORY.search(said):
        return "oom"
    if _HARDWARE.search(said) or family == "NPU_Host":
        return "hardware"
    if re.search(r"segmentation fault|SIGSEGV", said, re.I):
        return "segfault"
    return "other"


# The advice, ours, by kind and component: one line that says what to do first.
ADVICE = {
    ("hccl_timeout", ""): "A collective waited for a peer rank that never arrived: find the rank that failed or "
                          "stopped first (device fault, crash, hang); this rank followed it.",
    ("hccl", ""): "Check the HCCL setup of this rank (rank table, HCCL_IF_IP/HCCL_SOCKET_IFNAME, ports, "
                  "hccn_tool link state) and the CANN versions across nodes.",
    ("hardware", "NPU"): "Device fault: isolate this NPU (npu-smi info -t health), have the card checked, and "
                         "resume from the last checkpoint on healthy devices.",
    ("hardware", "OS"): "Host hardware fault: drain the node, check the BMC and kernel logs, and resume the job "
                        "elsewhere from the last checkpoint.",
    ("hardware", ""): "Device or link fault on this rank's NPU: check npu-smi health and hccn_tool link status, "
                      "isolate the card if it repeats, resume from the last checkpoint.",
    ("oom", "OS"): "Host memory ran out: lower dataloader workers or host-side caching, or give the pod more memory.",
    ("oom", ""): "Device memory ran out: lower the micro batch or sequence length, enable recomputation, "
                 "or shard more (ZeRO/optimizer parallel).",
    ("killed", ""): "The process was killed (SIGKILL, usually the OOM killer or the container's memory limit): "
                    "check the node's kernel log and the pod's memory limit.",
    ("segfault", ""): "A native crash: note the CANN/driver/framework versions and the last operator, "
                      "and retry on another device to tell software from hardware.",
    ("terminated", ""): "The device work was stopped on purpose (a forced stop or a recovery step): "
                        "check what stopped it before treating it as a failure.",
    ("other", "MindSpore"): "A MindSpore error: the message names the failing step; fix the script or "
                            "configuration it points at and rerun.",
    ("other", "PyTorch"): "A torch_npu error: read the CANN message below it and check the script, "
                          "the device id and the CANN/torch_npu versions.",
    ("other", "OS"): "A host system fault: check the node's kernel and system log around this time.",
    ("other", "DRV"): "An NPU driver call failed: check the driver/firmware versions and npu-smi health, "
                      "then the plog of this process.",
    ("other", ""): "A CANN error: look up its code in the CANN error reference and the process log "
                   "(plog) of this rank for the first failing call.",
}


# Generic matches we leave to parse/signatures.py's own CANN code signature (every CANN code, by its shape).
DROPPED = {
    "AISW_CANN_ERRCODE_Custom",
    # Its keywords are the kernel OOM killer's line ("Out of memory: Kill process"), which
    # Comp_OS_Kernel_Mem_08 names; its name (a file not flushed to disk) is another fault's.
    "AISW_CANN_CCE_009",
}
MIN_KEYWORD_CHARS = 10
MIN_LONGEST_KEYWORD = 8  # word fragments alone (["abs", "is null"]) name nothing


def _weak(alternative: list[str]) -> bool:
    """Keywords too short to name a fault on any line (["alloc", "failed"]): FaultDiag reads them only in
    the one file they belong to, we read every line of a worker's console."""
    if CANN_CODE.search(" ".join(alternative)):
        return False
    return sum(map(len, alternative)) < MIN_KEYWORD_CHARS or max(map(len, alternative)) < MIN_LONGEST_KEYWORD


def advice(kind: str, component: str) -> str:
    return ADVICE.get((kind, component)) or ADVICE[(kind, "")]


def build(knowledge: dict, commit: str) -> dict:
    entries = []
    kept = set()
    for key, value in knowledge.items():
        family = value.get("source_file", "")
        if family not in FAMILIES:
            continue
        alternatives, regex = _alternatives(value.get("regex") or {})
        alternatives = [alt for alt in alternatives if not _weak(alt)] + EXTRA_KEYWORDS.get(key, [])
        if key in DROPPED or (not alternatives and not regex):
            continue
        attribute = value["attribute"]
        component = _component(key, attribute)
        words = " ".join(" ".join(alt) for alt in alternatives)
        kind = _kind(key, family, attribute, words, component)
        codes = CANN_CODE.findall(" ".join(alternatives[0])) if alternatives else []
        entry = {
            "id": key, "family": family, "source": FAMILIES[family], "component": component,
            "module": attribute["module"], "fault": attribute["cause_en"].strip(), "kind": kind,
            "code": codes[0] if codes else key,
        }
        if alternatives:
            entry["keywords"] = alternatives
        if regex:
            entry["regex"] = regex
        if kind is not None:
            entry["advice"] = advice(kind, component)
        entry["explains"] = [rule["dst_code"] for rule in value.get("rule") or [] if rule.get("dst_code")]
        entries.append(entry)
        kept.add(key)
    for extra in EXTRA_FAULTS:
        added = {key: extra[key] for key in ("id", "family", "component", "module", "fault", "kind")}
        added.update(source=FAMILIES[extra["family"]], code=extra.get("code", extra["id"]),
                     keywords=extra["keywords"], advice=advice(extra["kind"], extra["component"]),
                     origin=extra["origin"], explains=[])
        entries.append(added)
    for entry in entries:  # keep the rules between faults that are both here, or a code of our tables
        entry["explains"] = [dst for dst in entry["explains"]
                             if dst in kept or dst.rsplit("_", 1)[-1] in CANN_CODES]
        entry["explains"] = [dst.rsplit("_", 1)[-1] if dst not in kept else dst for dst in entry["explains"]]
        if not entry["explains"]:
            del entry["explains"]
    codes = [{"code": code, "kind": kind, "component": component, "fault": fault,
              "advice": advice(kind, component)} for code, (kind, component, fault) in CANN_CODES.items()]
    runtime = [{"code": code, "kind": kind, "component": component, "fault": name,
                "advice": advice(kind, component)} for code, (kind, component, name) in RUNTIME_CODES.items()]
    return {
        "about": ("Ascend fault knowledge for trainlog-exporter. Fault codes, keywords, families, components, "
                  "modules, fault names and cause->effect rules are from MindCluster FaultDiag's kg-config.json "
                  "(Huawei, Apache License 2.0): " + SOURCE.format(commit=commit) + ". Kinds, advice and the "
                  "component labels are trainlog-exporter's; scripts/build_ascend_faults.py makes this file."),
        "license": "Apache-2.0 (MindCluster FaultDiag); see SOURCES.md",
        "cann_codes": codes,
        "runtime_codes": runtime,
        "faults": entries,
    }


def python_module(built: dict) -> str:
    """The table as a Python module of literal tuples, one fault a line: its compiled form loads in a
    fraction of the time JSON takes to parse (docs/benchmarks.md), on the first failure line of a run."""
    advice = sorted({row["advice"] for rows in (built["faults"], built["cann_codes"], built["runtime_codes"])
                     for row in rows if row.get("advice")})
    number = {text: index for index, text in enumerate(advice)}
    lines = [
        '"""Ascend fault knowledge: generated by scripts/build_ascend_faults.py, do not edit (docs/ascend-faults.md).',
        "",
        *textwrap.wrap(built["about"], 100, break_long_words=False, break_on_hyphens=False),
        "",
        "License: " + built["license"] + '."""',
        "",
        "# One line of advice each, ours; the tables below name them by index.",
        "ADVICE = (",
        *(f"    {text!r}," for text in advice),
        ")",
        "",
        "# CANN error codes and ACL runtime return codes: (code, kind, component, fault name, advice).",
        "CODES = (",
        *(f"    {(row['code'], row['kind'], row['component'], row['fault'], number[row['advice']])!r},"
          for rows in (built["cann_codes"], built["runtime_codes"]) for row in rows),
        ")",
        "",
        "# (id, kind or None: counts nothing, code, component, fault name, advice or -1, where it is printed,",
        "#  MindCluster's log family, the ids it explains, keyword alternatives (each in order on one line), regex)",
        "FAULTS = (",
    ]
    for row in built["faults"]:
        values = (row["id"], row["kind"], row["code"], row["component"], row["fault"],
                  number[row["advice"]] if row.get("advice") else -1, row["source"], row["family"],
                  tuple(row.get("explains", ())), tuple(tuple(words) for words in row.get("keywords", ())),
                  row.get("regex", ""))
        lines.append(f"    {values!r},")
    lines += [")", ""]
    return "\n".join(lines)


CODES_DOC = Path(__file__).resolve().parent.parent / "docs" / "ascend-fault-codes.md"
# Families whose error lines carry CANN's "[ERROR]" level tag, a literal of the block scanner whatever their keywords.
TAGGED = {"plog", "device"}


def codes_doc(built: dict) -> str:
    """docs/ascend-fault-codes.md: every code with what it counts as and what to do (the alerts link its rows)."""
    rows = ["# Ascend fault codes", "",
            "Generated by `scripts/build_ascend_faults.py` from the fault knowledge",
            "(`exporter/parse/faults/ascend.py`);",
            "[ascend-faults.md](ascend-faults.md) explains it. A code is the label value of",
            "`training_last_error_info{code}` and of `analyze`'s findings;",
            "the alerts' `fault` annotation links its row.",
            "Kind `-`: recognised, counts nothing. Fault names and codes: MindCluster FaultDiag (Apache-2.0) and CANN;",
            "kinds and advice: trainlog-exporter.", "",
            "| code | kind | component | fault | what to do |", "| --- | --- | --- | --- | --- |"]
    seen = set()
    for row in [*built["cann_codes"], *built["runtime_codes"], *built["faults"]]:
        code = row["code"]
        anchor = f'<a id="{code.lower()}"></a>' if code not in seen else ""
        seen.add(code)
        name = row["fault"].replace("|", "/").replace("\n", " ")
        rows.append(f"| {anchor}`{code}` | {row['kind'] or '-'} | {row['component']} | {name} "
                    f"| {row.get('advice', '')} |")
    return "\n".join(rows) + "\n"


def coverage(knowledge: dict, built: dict) -> str:
    """Per MindCluster log family: its entries, those kept, and those a line can reach (some alternative
    holds a literal of the block scanner, or the family's error lines carry CANN's [ERROR] tag)."""
    from exporter.parse.signatures import FAILURE_LITERALS  # the package on the path: run from the repository root

    literals = [literal.decode() for literal in FAILURE_LITERALS]
    total: dict[str, int] = {}
    for value in knowledge.values():
        total[value.get("source_file", "")] = total.get(value.get("source_file", ""), 0) + 1
    kept: dict[str, list[dict]] = {}
    for row in built["faults"]:
        if row["id"] in knowledge:
            kept.setdefault(row["family"], []).append(row)
    lines = ["| MindCluster family | entries | kept | reachable | count nothing |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for family, count in sorted(total.items(), key=lambda item: -item[1]):
        rows = kept.get(family, [])
        reachable = [row for row in rows if FAMILIES[family] in TAGGED or family == "NPU_Host" or row.get("regex")
                     or any(literal in word for words in row.get("keywords", ()) for word in words
                            for literal in literals)]
        shown = family.replace(" | ", " or ") or "(no log keywords)"
        lines.append(f"| {shown} | {count} | {len(rows)} | {len(reachable)} | "
                     f"{sum(row['kind'] is None for row in rows)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kg_config", type=Path)
    parser.add_argument("--commit", default="22bb3d987bc0208c3eb7395e222b661276133c58")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--coverage", action="store_true", help="print the coverage table of docs/ascend-faults.md")
    args = parser.parse_args(argv)
    knowledge = json.loads(args.kg_config.read_text(encoding="utf-8"))["knowledge-repository"]
    built = build(knowledge, args.commit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(python_module(built), encoding="utf-8")
    CODES_DOC.write_text(codes_doc(built), encoding="utf-8")
    if args.coverage:
        print(coverage(knowledge, built))
    print(f"{len(built['faults'])} faults -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
