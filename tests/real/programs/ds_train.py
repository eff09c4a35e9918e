"""A tiny real DeepSpeed engine on the CPU (DS_ACCELERATOR=cpu, gloo), its ground truth written beside the log.

Run under ``deepspeed --num_gpus 4 --enable_each_rank_log DIR``: the launcher writes each rank's output to
``DIR/<job>_rank<R>.log`` and its own lines (``launch.py``: spawned processes, ``sigkill_handler``) to its
console. Every rank prints one ``key=value`` step line per step (its own, unreduced loss; the engine's learning
rate; the norm of the all-reduced gradients, taken before the engine's step) and appends the same values to
``TRUTH/rank_<R>.jsonl`` first, as ddp_train.py does.

Incidents, at ``--at`` on ``--rank``: ``nan`` (the rank's loss NaN from that step), ``kill`` (SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import deepspeed
import torch


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--incident", choices=("nan", "kill"))
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--at", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--local_rank", type=int, default=0)  # the launcher's
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    truth_dir = Path(args.truth)
    truth_dir.mkdir(parents=True, exist_ok=True)
    truth = open(truth_dir / f"rank_{rank}.jsonl", "a", buffering=1)  # noqa: SIM115

    def write(record: dict) -> None:
        truth.write(json.dumps(record) + "\n")
        truth.flush()
        os.fsync(truth.fileno())

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    config = {"train_micro_batch_size_per_gpu": 32, "steps_per_print": 10 ** 9,
              "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.05,
                                                           "warmup_num_steps": 5, "warmup_type": "linear"}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    data = torch.Generator().manual_seed(1000 + rank)
    target = torch.randn(16, 1, generator=torch.Generator().manual_seed(7))
    mine = args.incident is not None and rank == args.rank
    print(f"rank {rank}: training {args.steps} steps", flush=True)
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        time.sleep(args.step_seconds)
        features = torch.randn(32, 16, generator=data)
        labels = features @ target + 0.1 * torch.randn(32, 1, generator=data)
        loss = torch.nn.functional.mse_loss(engine(features), labels)
        if mine and step >= args.at and args.incident == "nan":
            if step == args.at:
                write({"incident": "loss_nonfinite", "rank": rank, "step": step})
            loss = loss * float("nan")
        if mine and step == args.at and args.incident == "kill":
            write({"incident": "killed", "rank": rank, "step": step})
            os.kill(os.getpid(), signal.SIGKILL)
        lr = float(engine.get_lr()[0])
        engine.backward(loss)  # the gradients' all-reduce
        grad_norm = float(torch.nn.utils.clip_grad_norm_(engine.module.parameters(), float("inf")))
        engine.step()
        step_time = time.perf_counter() - started
        value = float(loss.item())
        write({"rank": rank, "step": step, "loss": value, "learning_rate": lr, "grad_norm": grad_norm,
               "step_time_seconds": step_time})
        print(f"step={step}/{args.steps} loss={value!r} lr={lr!r} grad_norm={grad_norm!r} step_time={step_time!r}",
              flush=True)
        if not math.isfinite(value) and step >= args.at + 3:
            break
    # Every rank here after the same steps (a NaN reaches all of them through the all-reduce): leaving together, no
    # rank aborts another's gloo thread at exit (ddp_train.py says how that looks).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
