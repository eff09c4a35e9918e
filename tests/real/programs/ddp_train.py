"""A tiny real DDP training loop for torchrun with gloo on the CPU, its ground truth written beside the log.

Run under ``torchrun --standalone --nproc-per-node 4``. Every rank prints one ``key=value`` step
line per step (its own, unreduced loss) and appends the same values, as Python floats, to
``TRUTH/rank_<R>.jsonl`` (one JSON object a line, flushed before the step line is printed), so
the file holds every step even when the rank is killed. An incident is written to the truth
file before it is caused (``{"incident": KIND, "rank": R, "step": S}``).

Incidents, each at ``--at`` on ``--rank`` (the step counted from 1):
  nan      the rank's loss becomes NaN from that step (the all-reduced gradients carry it to every rank)
  kill     the rank SIGKILLs itself
  raise    the rank raises RuntimeError
  hang     the rank sleeps for good inside the step; the others wait in the all-reduce until gloo's timeout
  oom      the rank asks the CPU allocator for an absurd block
  slow     the rank sleeps ``--slow-seconds`` in every step from then on (every rank slows with it)
Every step sleeps ``--step-seconds`` first (the work a real step does), then meets its incident.

``--save-at S --save-seconds T``: after step S, rank 0 saves a checkpoint, announced as transformers' Trainer
announces its own (``Saving model checkpoint to DIR``, Trainer._save), and takes T seconds for it (slow
storage); the other ranks wait for it in a barrier, silent. A long phase, not a hang.

``--checkpoints DIR --save-every K``: after every K-th step each rank saves its state (weights, optimizer, schedule,
its data generator) to ``DIR/rank_<R>_step_<S>.pt``, rank 0 announcing it as the Trainer does. ``--resume``: each
rank loads its latest checkpoint there and trains on from the step after it (the job started again after a crash;
the steps after the checkpoint are done again, each written to the truth file again).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True, help="directory for the ground truth files")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--incident", choices=("nan", "kill", "raise", "hang", "oom", "slow"))
    parser.add_argument("--rank", type=int, default=1, help="the rank the incident happens on")
    parser.add_argument("--at", type=int, default=20, help="the step the incident happens at")
    parser.add_argument("--slow-seconds", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=5.0, help="gloo's collective timeout, seconds")
    # A step takes at least this long, as real steps do: torchrun --tee tails each rank's stdout and stderr
    # every 0.1 s, separately, so a traceback printed within 0.1 s of a step line may come out before it.
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-at", type=int, default=0, help="save a checkpoint after this step (0: never)")
    parser.add_argument("--save-seconds", type=float, default=0.0, help="how long the save takes")
    parser.add_argument("--checkpoints", help="directory of the periodic checkpoints (--save-every, --resume)")
    parser.add_argument("--save-every", type=int, default=0, help="save a checkpoint every K steps (0: never)")
    parser.add_argument("--resume", action="store_true", help="train on from the latest checkpoint in --checkpoints")
    parser.add_argument("--stop-learning-at", type=int, default=0,
                        help="from this step on the learning rate is 0: the loss goes flat (0: never)")
    # regress: a mean squared error over --batch samples; classify: a cross entropy over 10 classes, the kind of
    # loss a language model prints (a small batch's MSE is heavy-tailed as no token-averaged loss is).
    parser.add_argument("--task", choices=("regress", "classify"), default="regress")
    return parser.parse_args()


class Truth:
    """This rank's ground truth file: a JSON object a line, flushed and synced at once."""

    def __init__(self, directory: Path, rank: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = open(directory / f"rank_{rank}.jsonl", "a", buffering=1)  # noqa: SIM115

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def main() -> int:
    args = _arguments()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    truth = Truth(Path(args.truth), rank)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    outputs = 10 if args.task == "classify" else 1
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, outputs)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: 0.0 if 0 < args.stop_learning_at <= done + 1 else 1.0 - done / (args.steps + 1))
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    target = torch.randn(16, outputs, generator=torch.Generator().manual_seed(7))
    mine = args.incident is not None and rank == args.rank
    done = _resume(args, rank, model, optimizer, schedule, data) if args.resume else 0
    print(f"rank {rank} of {world}: training {args.steps} steps from step {done + 1}", flush=True)
    for step in range(done + 1, args.steps + 1):
        started = time.perf_counter()
        time.sleep(args.step_seconds)  # the step's work beyond this toy model's, before anything else
        features = torch.randn(args.batch, 16, generator=data)
        if args.task == "classify":  # the class a fixed linear map scores highest, with noise
            scores = features @ target + torch.randn(args.batch, outputs, generator=data)
            loss = torch.nn.functional.cross_entropy(model(features), scores.argmax(dim=1))
        else:
            labels = features @ target + 0.1 * torch.randn(args.batch, 1, generator=data)
            loss = torch.nn.functional.mse_loss(model(features), labels)
        if mine and step >= args.at and args.incident == "nan":
            if step == args.at:
                truth.write({"incident": "loss_nonfinite", "rank": rank, "step": step})
            loss = loss * float("nan")
        if mine and step == args.at and args.incident in ("kill", "raise", "hang", "oom"):
            kind = {"kill": "killed", "raise": "traceback", "hang": "hang", "oom": "oom"}[args.incident]
            truth.write({"incident": kind, "rank": rank, "step": step})
            if args.incident == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif args.incident == "raise":
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            elif args.incident == "hang":
                while True:
                    time.sleep(3600)
            else:
                torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB
        if mine and step >= args.at and args.incident == "slow":
            if step == args.at:
                truth.write({"incident": "slowdown", "rank": rank, "step": step})
            time.sleep(args.slow_seconds)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here: every rank waits for every other
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        schedule.step()
        step_time = time.perf_counter() - started
        value = float(loss.item())
        truth.write({"rank": rank, "step": step, "loss": value, "learning_rate": lr, "grad_norm": grad_norm,
                     "step_time_seconds": step_time})
        # repr: the shortest text that reads back as the same float, so the exporter can be exact.
        print(f"step={step}/{args.steps} loss={value!r} lr={lr!r} grad_norm={grad_norm!r} "
              f"step_time={step_time!r}", flush=True)
        if not math.isfinite(value) and step >= args.at + 3:
            break  # a NaN run goes on a few steps, as one does before someone notices
        if step == args.save_at:
            if rank == 0:
                directory = Path(args.truth).parent / "checkpoints" / f"checkpoint-{step}"
                directory.mkdir(parents=True, exist_ok=True)
                print(f"Saving model checkpoint to {directory}", flush=True)
                torch.save(model.state_dict(), directory / "model.pt")
                time.sleep(args.save_seconds)
            dist.barrier()
        if args.save_every and step % args.save_every == 0:
            _save(args, rank, step, model, optimizer, schedule, data)
    # Every rank here after the same steps (a NaN reaches all of them through the all-reduce); without the barrier a
    # rank leaving first can abort another's gloo thread at exit ("terminate called without an active exception",
    # SIGABRT: seen once in a healthy run here), as hf_trainer_train.py says.
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _save(args: argparse.Namespace, rank: int, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
          schedule: torch.optim.lr_scheduler.LRScheduler, data: torch.Generator) -> None:
    """This rank's whole training state after STEP, written to a temporary name and renamed (never half a file)."""
    directory = Path(args.checkpoints)
    directory.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        print(f"Saving model checkpoint to {directory}", flush=True)
    target = directory / f"rank_{rank}_step_{step}.pt"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(), "data": data.get_state()}, target.with_suffix(".tmp"))
    target.with_suffix(".tmp").rename(target)


def _resume(args: argparse.Namespace, rank: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            schedule: torch.optim.lr_scheduler.LRScheduler, data: torch.Generator) -> int:
    """Loads this rank's latest checkpoint; the step it was saved after (0 without one)."""
    saved = sorted(Path(args.checkpoints).glob(f"rank_{rank}_step_*.pt"),
                   key=lambda path: int(path.stem.rsplit("_", 1)[1]))
    if not saved:
        return 0
    state = torch.load(saved[-1])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    data.set_state(state["data"])
    print(f"resuming rank {rank} from {saved[-1].name} at step {state['step']}", flush=True)
    return int(state["step"])


if __name__ == "__main__":
    sys.exit(main())
