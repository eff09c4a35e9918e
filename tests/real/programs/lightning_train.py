"""A real PyTorch Lightning run (DDP with gloo on the CPU, under torchrun), its ground truth written beside the log.

Lightning's console as people redirect it: the TQDMProgressBar of the main process, redirected to a file (one line of
redraws joined by carriage returns per epoch), its postfix holding what ``training_step`` logs with
``prog_bar=True`` (``train_loss``, ``lr``, ``grad_norm``, and Lightning's own ``v_num``). ``--variant logged``
adds the metrics as people log them for a logger instead: ``self.log("train/loss", ..., on_epoch=True)`` into a
``CSVLogger`` (``CSV_DIR/lightning_logs/version_0/metrics.csv``, flushed every step; the epoch's mean appears as a
new column at the end of the first epoch, and the logger rewrites the whole file under the new header) and a
callback printing ``step=N train_loss=... lr=... grad_norm=...``.

Ground truth: the main process's values of each global step, as the bar prints them (tqdm's ``format_num``,
three significant digits) and as computed (``raw_*``), in ``TRUTH/rank_0.jsonl``; an incident is written to
the rank's truth file before it is caused:
  nan      the rank's loss becomes NaN from ``--at`` on (the all-reduced gradients carry it to every rank)
  raise    the rank raises RuntimeError at ``--at``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import lightning as L
import torch
from tqdm import tqdm


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--out", required=True, help="Lightning's default_root_dir (checkpoints, the CSV logs)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10, help="training batches per epoch and rank")
    parser.add_argument("--variant", choices=("bar", "logged"), default="bar")
    parser.add_argument("--csv-dir", help="the CSVLogger's save_dir with --variant logged (default: OUT/csv)")
    parser.add_argument("--incident", choices=("nan", "raise"))
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--at", type=int, default=14, help="the global step (from 1) the incident happens at")
    parser.add_argument("--step-seconds", type=float, default=0.12)
    return parser.parse_args()


def _truth_file(directory: Path, rank: int):
    directory.mkdir(parents=True, exist_ok=True)
    return open(directory / f"rank_{rank}.jsonl", "a", buffering=1)  # noqa: SIM115


class Regression(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.grad_norm = float("nan")

    def training_step(self, batch, batch_idx):
        time.sleep(self.args.step_seconds)  # a real step's work: tqdm draws every step it takes this long
        features, labels = batch
        loss = torch.nn.functional.mse_loss(self.net(features), labels)
        step = self.global_step + 1
        args = self.args
        if args.incident and self.global_rank == args.rank and step >= args.at:
            if step == args.at:
                kind = {"nan": "loss_nonfinite", "raise": "traceback"}[args.incident]
                with _truth_file(Path(args.truth), self.global_rank) as handle:
                    handle.write(json.dumps({"incident": kind, "rank": self.global_rank, "step": step}) + "\n")
                if args.incident == "raise":
                    raise RuntimeError(f"injected failure on rank {self.global_rank} at step {step}")
            loss = loss * float("nan")
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        if args.variant == "bar":
            self.log("train_loss", loss, prog_bar=True)
            self.log("lr", lr, prog_bar=True)
        else:
            self.log("train/loss", loss, on_step=True, on_epoch=True)
            self.log("train/lr", lr)
        self.last_loss, self.last_lr = float(loss.detach()), lr
        return loss

    def on_before_optimizer_step(self, optimizer):
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), float("inf"))
        self.grad_norm = float(norm)
        if self.args.variant == "bar":
            self.log("grad_norm", self.grad_norm, prog_bar=True)
        else:
            self.log("train/grad_norm", self.grad_norm)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        total = self.args.epochs * self.args.batches
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: 1.0 - done / (total + 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Truth(L.Callback):
    """Rank 0's values of each step, as computed and as the bar's postfix prints them; with ``--variant logged``,
    also the line a user's callback prints."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank != 0:
            return
        record = {"rank": 0, "step": trainer.global_step}
        for name, value in (("loss", module.last_loss), ("learning_rate", module.last_lr),
                            ("grad_norm", module.grad_norm)):
            record[f"raw_{name}"] = value
            # What tqdm's set_postfix prints of a number, and what the logged variant's line prints (repr).
            record[name] = float(tqdm.format_num(value)) if self.args.variant == "bar" else value
        with _truth_file(Path(self.args.truth), 0) as handle:
            handle.write(json.dumps(record) + "\n")
        if self.args.variant == "logged":
            print(f"step={trainer.global_step} train_loss={module.last_loss!r} lr={module.last_lr!r} "
                  f"grad_norm={module.grad_norm!r}", flush=True)


def main() -> int:
    args = _arguments()
    L.seed_everything(0, verbose=False)
    rank = int(os.environ.get("RANK", "0"))
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    count = args.batches * 8
    features = torch.randn(count, 16, generator=generator)
    labels = features @ torch.randn(16, 1, generator=torch.Generator().manual_seed(7))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(features, labels), batch_size=8)
    loggers = ([L.pytorch.loggers.CSVLogger(args.csv_dir or os.path.join(args.out, "csv"), flush_logs_every_n_steps=1)]
               if args.variant == "logged" else False)
    trainer = L.Trainer(accelerator="cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                        strategy=L.pytorch.strategies.DDPStrategy(process_group_backend="gloo"),
                        max_epochs=args.epochs, default_root_dir=args.out, logger=loggers, log_every_n_steps=1,
                        enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
                        use_distributed_sampler=False,
                        # Lightning 2.6 draws its Rich bar when rich is installed (``lightning`` brings it): in a
                        # redirected file that leaves the final frame only. The tqdm bar people set instead.
                        callbacks=[L.pytorch.callbacks.TQDMProgressBar(), Truth(args)])
    trainer.fit(Regression(args), loader)
    # Every rank done before any leaves, as hf_trainer_train.py and mmengine_train.py do: gloo may abort a rank at
    # exit otherwise, and torchrun reports that rank's failure (seen once in a CI run of the NaN job: an "elastic"
    # error on rank 0 after its last step).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see hf_trainer_train.py: DDP's Reducer at exit can deadlock against gloo's thread


if __name__ == "__main__":
    sys.exit(main())
