"""A real MMEngine ``Runner`` (iteration-based training of a small regression model) under torchrun with gloo.

MMEngine's LoggerHook prints, every iteration here (``interval=1``), ``Iter(train) [ N/TOTAL]  lr: ...  eta: ...
time: ...  data_time: ...  loss: ...`` to the console and to the work dir's ``<timestamp>/<timestamp>.log``, and
writes the same scalars to ``<timestamp>/vis_data/scalars.json``. Its LogProcessor prints the mean of the last
``window_size`` (10) iterations of every smoothed value (``loss``, ``time``, ``data_time``): the ground truth is
that mean, as the hook computes it from the runner's message hub, and the value of the iteration itself (``raw_*``).
``--incident nan`` makes ``--rank``'s loss NaN from ``--at`` on; ``--incident raise`` makes it raise there.
``--by-epoch EPOCHS`` trains with MMEngine's EpochBasedTrainLoop instead (``train_cfg``, the LR scheduler and the
LogProcessor ``by_epoch=True``): the hook prints ``Epoch(train) [E][ I/N]  lr: ...``, I counted within epoch E; the
ground truth's step stays the global iteration (``runner.iter + 1``, ``(E - 1) * N + I``).
"""
# MMEngine's configs are dicts, written as its documentation writes them (dict(type=...)).
# ruff: noqa: C408

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner


class Regression(BaseModel):
    def __init__(self, incident: str | None, rank: int, at: int, seconds: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.incident, self.rank, self.at, self.seconds, self.iteration = incident, rank, at, seconds, 0

    def forward(self, features, labels, mode="tensor"):
        loss = torch.nn.functional.mse_loss(self.net(features), labels)
        if mode != "loss":
            return loss
        self.iteration += 1
        time.sleep(self.seconds)  # a real step's work
        if self.incident and int(os.environ.get("RANK", "0")) == self.rank and self.iteration >= self.at:
            if self.incident == "raise":
                raise RuntimeError(f"injected failure on rank {self.rank} at step {self.iteration}")
            loss = loss * float("nan")
        return {"loss": loss}


class Pairs(torch.utils.data.Dataset):
    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(count, 16, generator=generator)
        self.labels = self.features @ torch.randn(16, 1, generator=torch.Generator().manual_seed(7))

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index):
        return {"features": self.features[index], "labels": self.labels[index]}


class Truth(Hook):
    """After each iteration, what the LoggerHook prints of it (the window means, as LogProcessor rounds them)."""

    priority = "LOWEST"

    def __init__(self, directory: Path, window: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self.window = directory, window

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.rank != 0:
            return  # only the main process logs: the ground truth of what the logs hold is its
        hub = runner.message_hub
        record = {"rank": runner.rank, "step": runner.iter + 1}
        for name, key in (("loss", "train/loss"), ("step_time_seconds", "train/time")):
            scalar = hub.get_scalar(key)
            record[name], record[f"raw_{name}"] = round(scalar.mean(self.window), 4), scalar.current()
        record["learning_rate"] = float(f"{hub.get_scalar('train/lr').current():.4e}")
        with open(self.directory / f"rank_{runner.rank}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--incident", choices=("nan", "raise"))
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--at", type=int, default=12)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--by-epoch", type=int, metavar="EPOCHS", help="epoch-based: EPOCHS epochs (--iters unused)")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    if args.incident and rank == args.rank:
        Path(args.truth).mkdir(parents=True, exist_ok=True)
        kind = {"nan": "loss_nonfinite", "raise": "traceback"}[args.incident]
        with open(Path(args.truth) / f"rank_{rank}.jsonl", "a") as handle:
            handle.write(json.dumps({"incident": kind, "rank": rank, "step": args.at}) + "\n")
    window = 10
    # MMEngine's own init (launcher "pytorch") sets a CUDA device first: on the CPU, the process group is made here,
    # and the DDP wrapper gets no device.
    torch.distributed.init_process_group("gloo")
    by_epoch = args.by_epoch is not None
    if by_epoch:
        train_cfg, end = dict(by_epoch=True, max_epochs=args.by_epoch), args.by_epoch
    else:
        train_cfg, end = dict(by_epoch=False, max_iters=args.iters), args.iters
    runner = Runner(
        model=Regression(args.incident, args.rank, args.at, args.step_seconds),
        work_dir=args.work_dir,
        train_dataloader=dict(dataset=Pairs(256, 1000 + rank), sampler=dict(type="DefaultSampler", shuffle=True),
                              batch_size=8, num_workers=0, collate_fn=dict(type="default_collate")),
        train_cfg=train_cfg,
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.05, momentum=0.9)),
        param_scheduler=dict(type="LinearLR", start_factor=1.0, end_factor=0.1, by_epoch=by_epoch, begin=0, end=end),
        default_hooks=dict(logger=dict(type="LoggerHook", interval=1), checkpoint=None),
        log_processor=dict(window_size=window, by_epoch=by_epoch),
        custom_hooks=[Truth(Path(args.truth), window)],
        launcher="pytorch", cfg=dict(model_wrapper_cfg=dict(type="MMDistributedDataParallel", device_ids=None)),
        randomness=dict(seed=0),
        default_scope="mmengine")
    runner.train()
    # Every rank done before any leaves, as hf_trainer_train.py does: without it gloo may abort one rank at exit
    # ("terminate called without an active exception", SIGABRT: seen once in a CI run of the healthy job).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see hf_trainer_train.py: DDP's Reducer at exit can deadlock against gloo's thread


if __name__ == "__main__":
    sys.exit(main())
