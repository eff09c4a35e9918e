"""Realistic msrun worker logs for the benchmarks, reproducible from a seed.

A real ``worker_{i}.log`` is mostly framework noise: MindSpore C++ device and parallel
logs, MindFormers INFO lines, dumps of sharding strategies hundreds of bytes long,
warnings. Step lines (MindFormers PyNative ``LossCallback``) are a few percent of the
lines; tracebacks, HCCL warnings and an out-of-memory line show up now and then.

    python -m benchmarks.generate --lines 2000000 --out /tmp/worker_0.log
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SEED = 20260609
STEP_LINE_SHARE = 0.03
TRACEBACK_EVERY_LINES = 50_000
TRACEBACK_OFFSET = 10_000  # the first one early: small (smoke) logs hold one too
OOM_EVERY_LINES = 400_000
OOM_OFFSET = 12_345  # away from the tracebacks, early enough for small logs
NOISE_POOL_LINES = 20_000

_LOSS_CALLBACK = "[mindformers/pynative/callback/loss_callback.py:231] _print_log: "

_MODULES = (
    "mindformers/trainer/base_trainer.py:412",
    "mindformers/dataset/causal_language_model_dataset.py:201",
    "mindformers/models/modeling_utils.py:1532",
    "mindformers/core/context/build_context.py:88",
    "mindformers/pynative/callback/checkpoint_callback.py:118",
    "mindformers/wrapper/wrapper.py:317",
    "mindformers/tools/resume_ckpt.py:146",
)
_CPP_SOURCES = (
    ("DEVICE", "mindspore/ccsrc/plugin/device/ascend/hal/device/ascend_memory_adapter.cc:134", "Initialize"),
    ("PRE_ACT", "mindspore/ccsrc/pipeline/pynative/grad/grad.cc:1021", "GetTopCellInfo"),
    ("PARALLEL", "mindspore/ccsrc/frontend/parallel/step_parallel.cc:2210", "ExtractInformation"),
    ("KERNEL", "mindspore/ccsrc/kernel/kernel_build_info.cc:301", "SelectKernel"),
    ("RUNTIME_FRAMEWORK", "mindspore/ccsrc/runtime/graph_scheduler/graph_scheduler.cc:702", "Run"),
    ("ME", "mindspore/ccsrc/pipeline/jit/ps/pipeline.cc:1844", "CompileInner"),
)
_INFO_MESSAGES = (
    "Now Create Causal Language Model Dataset.",
    ".........Build Dataset From Config..........",
    "Load checkpoint from ./output/checkpoint/rank_{rank}/ successfully.",
    "Saving checkpoint at step {n} to ./output/checkpoint/rank_{rank}/",
    "dataset sink size {n}, prefetch {k}",
    "model built, parallel config: dp=2, tp=2, pp=1, ep=4",
    "tokens per expert: {tokens}",
)
_CPP_MESSAGES = (
    "Can not find top cell, maybe dynamic shape",
    "The input {k} of op Default/network-{n}/MatMul-op{n} has no shape info, use default",
    "Reserved memory size for other components({n}) is less than recommend size({n}), retrying allocation",
    "operator strategy: {strategy}",
    "select kernel {op} with format NC1HWC0 dtype Float16 for op Default/{op}-op{n}",
    "Memory pool {k} used {n} bytes, peak {n} bytes, total {n} bytes",
)
_OPS = ("MatMul", "BatchMatMul", "Softmax", "LayerNorm", "AllGather", "ReduceScatter", "FlashAttentionScore")
_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/home/ma-user/mindformers/run_mindformer.py", line 236, in <module>',
    "    main(config)",
    '  File "/home/ma-user/mindformers/mindformers/trainer/base_trainer.py", line 997, in train',
    "    self._train_loop()",
    '  File "/home/ma-user/mindformers/mindformers/dataset/dataloader/blended_dataset.py", line 88, in __getitem__',
    "    raise ValueError(f\"sample {index} out of range\")",
    "ValueError: sample 1048576 out of range",
)
_OOM = ("[ERROR] DEVICE(2812,ffff,python):2026-06-09 12:00:00.000.000 [mindspore/ccsrc/plugin/device/ascend/"
        "hal/device/ascend_memory_pool.cc:61] AllocDeviceMem] NPU out of memory, request 2147483648 bytes")
_HCCL_WARNING = ("[WARNING] HCCL(2812,ffff,python):2026-06-09 12:00:00.000.000 [hccl_communicator.cc:410] "
                 "HcclAllReduce retry {k} of 3, link slow")


@dataclass(frozen=True, slots=True)
class LogShape:
    """How many of each kind of line a generated log holds (for checks by the contenders)."""

    lines: int
    steps: int
    tracebacks: int
    ooms: int


def step_line(step: int, total: int, loss: float, grad_norm: float | None, clock: str = "2026-06-09 10:20:40") -> str:
    """One MindFormers PyNative LossCallback line, padded exactly as the callback pads."""
    norm = "NaN" if grad_norm is None else f"{grad_norm:10.6f}"
    return (f"[INFO] {clock} {_LOSS_CALLBACK}{{ step:[{step:5d}/{total:5d}], loss: {loss:10.6f}, "
            f"per_step_time: {850 + step % 37:6d}ms, lr: {1e-4 * (1 + step % 5) / 5:e}, grad_norm: {norm}, "
            f"throughput: {12.0 + step % 7 / 10:6.2f}T, load_balancing_loss: {0.0012 + step % 9 / 10000:.6f}, "
            f"mtp_1_loss: {loss + 0.5:10.6f} }}")


class NoiseLines:
    """Framework noise of varied length; never a step line or a failure signature."""

    def __init__(self, rng: random.Random, rank: int = 0) -> None:
        self._rng = rng
        self._rank = rank

    def line(self) -> str:
        rng = self._rng
        roll = rng.random()
        if roll < 0.45:
            return self._cpp_line("INFO" if rng.random() < 0.7 else "WARNING")
        if roll < 0.85:
            return self._info_line()
        if roll < 0.93:
            return self._strategy_dump()
        return rng.choice(("", "." * rng.randint(1, 60), "  " + rng.choice(_OPS) + " done"))

    def _fill(self, template: str) -> str:
        rng = self._rng
        return template.format(
            n=rng.randint(1, 10**9), k=rng.randint(0, 16), rank=self._rank, op=rng.choice(_OPS),
            tokens=", ".join(str(rng.randint(0, 4096)) for _ in range(rng.randint(4, 32))),
            strategy=self._strategy(),
        )

    def _strategy(self) -> str:
        return "(" + ", ".join(f"({self._rng.choice((1, 2, 4, 8))}, {self._rng.choice((1, 2, 4, 8))})"
                               for _ in range(self._rng.randint(1, 8))) + ")"

    def _cpp_line(self, level: str) -> str:
        rng = self._rng
        module, source, function = rng.choice(_CPP_SOURCES)
        stamp = (f"2026-06-09 {rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
                 f".{rng.randint(100, 999)}.{rng.randint(100, 999)}")
        message = self._fill(rng.choice(_CPP_MESSAGES))
        return f"[{level}] {module}({2812 + self._rank},ffff,python):{stamp} [{source}] {function}] {message}"

    def _info_line(self) -> str:
        rng = self._rng
        clock = f"{rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
        module = rng.choice(_MODULES)
        return f"[INFO] 2026-06-09 {clock} [{module}] {self._fill(rng.choice(_INFO_MESSAGES))}"

    def _strategy_dump(self) -> str:
        rng = self._rng
        layers = ", ".join(f"model.layers.{i}.{rng.choice(_OPS)}: {self._strategy()}" for i in range(rng.randint(1, 8)))
        return (f"[INFO] PARALLEL({2812 + self._rank},ffff,python):2026-06-09 10:20:36.000.000 "
                f"[mindspore/ccsrc/frontend/parallel/step_parallel.cc:2210] Dump] {layers}")


def noise_pool(rng: random.Random, rank: int = 0, size: int = NOISE_POOL_LINES) -> list[str]:
    """Distinct noise lines to draw from: drawing is much cheaper than composing each line."""
    noise = NoiseLines(rng, rank)
    return [noise.line() for _ in range(size)]


def worker_log_lines(lines: int, seed: int = DEFAULT_SEED, rank: int = 0) -> Iterator[str]:
    """``lines`` lines of one rank's worker log."""
    rng = random.Random(seed)
    noise = noise_pool(rng, rank)
    total = int(lines * STEP_LINE_SHARE) + 1
    yield "[INFO] 2026-06-09 10:20:33 [mindformers/tools/logger.py:52] Running MindFormers in PYNATIVE_MODE."
    written, step, loss = 1, 0, 10.5
    while written < lines:
        if written % TRACEBACK_EVERY_LINES == TRACEBACK_OFFSET and written + len(_TRACEBACK) <= lines:
            yield from _TRACEBACK
            written += len(_TRACEBACK)
            continue
        if written % OOM_EVERY_LINES == OOM_OFFSET:
            yield _OOM
        elif written % 997 == 0:
            yield _HCCL_WARNING.format(k=rng.randint(1, 3))
        elif rng.random() < STEP_LINE_SHARE:
            step += 1
            loss = max(1.2, loss * 0.9995 + rng.uniform(-0.02, 0.02))
            yield step_line(step, total, loss, None if step % 50 == 1 else rng.uniform(0.5, 3.0))
        else:
            yield rng.choice(noise)
        written += 1


def write_worker_log(path: Path, lines: int, seed: int = DEFAULT_SEED, rank: int = 0, prefix: str = "") -> LogShape:
    """Write the log (buffered, in large writes) and return what it holds; ``prefix`` before every line
    (torchrun's ``[rank3]: ``)."""
    steps = tracebacks = ooms = 0
    buffer: list[str] = []
    with open(path, "w", encoding="utf-8") as handle:
        for line in worker_log_lines(lines, seed, rank):
            buffer.append(line)
            if "step:[" in line:
                steps += 1
            elif line.startswith("Traceback"):
                tracebacks += 1
            elif "out of memory" in line:
                ooms += 1
            if len(buffer) >= 10_000:
                handle.write("".join(f"{prefix}{line}\n" for line in buffer))
                buffer.clear()
        if buffer:
            handle.write("".join(f"{prefix}{line}\n" for line in buffer))
    return LogShape(lines, steps, tracebacks, ooms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    arguments = parser.parse_args()
    shape = write_worker_log(arguments.out, arguments.lines, arguments.seed, arguments.rank)
    print(f"{arguments.out}: {shape.lines} lines, {shape.steps} steps, {shape.tracebacks} tracebacks, {shape.ooms} OOM")


if __name__ == "__main__":
    main()
