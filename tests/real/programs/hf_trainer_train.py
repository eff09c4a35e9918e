"""A real ``transformers.Trainer`` run on a tiny GPT-2 built from a config object (no hub), under torchrun with gloo.

The Trainer prints its log dicts (``{'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...}``) on
the main process only, between the tqdm bar's updates; a callback writes the same dict, with the step the
Trainer logged it at, to ``TRUTH/rank_0.jsonl`` (ground truth outside the log). ``--nan-at STEP`` makes
every rank's loss NaN from that step on (the model's forward multiplies it in).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int, length: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(3)
        self._ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self._ids[index], "labels": self._ids[index]}


class Truth(TrainerCallback):
    """The main process's log dicts with the step they belong to, each value as the Trainer computed it
    (``raw_*``) and as its ProgressCallback prints it (``f"{v:.4g}"``, transformers 5): what a reader can get."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / "rank_0.jsonl"

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            record: dict[str, float | int] = {"rank": 0, "step": state.global_step}
            for name in ("loss", "learning_rate", "grad_norm"):
                value = float(logs[name])
                record[name], record[f"raw_{name}"] = float(f"{value:.4g}"), value
            with open(self._path, "a") as handle:
                handle.write(json.dumps(record) + "\n")


class StepTime(TrainerCallback):
    """Each step takes at least ``seconds``, as a real model's does: tqdm redraws its bar at most every
    0.1 s, and the bar before a log dict is its step only when every step was drawn."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def on_step_begin(self, args, state, control, **kwargs):
        time.sleep(self._seconds)


class NanFrom(TrainerCallback):
    """From a step on, the loss is NaN on every rank (a bad batch reaching every replica)."""

    def __init__(self, model: torch.nn.Module, step: int) -> None:
        self._model, self._step = model, step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self._step:
            with torch.no_grad():
                self._model.lm_head.weight.mul_(float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--logging-steps", type=int, default=5)
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--step-seconds", type=float, default=0.15)
    parser.add_argument("--no-bar", action="store_true", help="disable_tqdm: the dicts on lines of their own")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    training = TrainingArguments(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=4, learning_rate=5e-3,
        logging_steps=args.logging_steps, save_strategy="no", report_to=[], ddp_backend="gloo", use_cpu=True,
        dataloader_num_workers=0, seed=0, disable_tqdm=args.no_bar)
    callbacks: list[TrainerCallback] = [Truth(Path(args.truth)), StepTime(args.step_seconds)]
    if args.nan_at:
        callbacks.append(NanFrom(model, args.nan_at))
        if int(os.environ.get("RANK", "0")) == 0:
            with open(Path(args.truth) / "rank_0.jsonl", "a") as handle:
                handle.write(json.dumps({"incident": "loss_nonfinite", "rank": 0, "step": args.nan_at}) + "\n")
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(512, 32, 64), callbacks=callbacks)
    trainer.train()
    if torch.distributed.is_initialized():
        # Every rank done before any leaves: without it, gloo aborts at exit ("terminate called without an
        # active exception") or the last rank waits for good in destroy_process_group.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    # torch 2.13.0: freeing DDP's Reducer at interpreter exit can deadlock against gloo's worker thread
    # (~ProcessGroupGloo waits on a mutex the thread holds while it waits for the GIL; seen with py-spy here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
