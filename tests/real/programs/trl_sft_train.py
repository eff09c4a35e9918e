"""A real TRL ``SFTTrainer`` run on a tiny GPT-2 built from a config object and a word-level tokenizer made here
(no hub), under torchrun with gloo.

SFTTrainer is a ``transformers.Trainer``: the main process prints its log dicts (``{'loss': ..., 'grad_norm':
..., 'learning_rate': ..., 'entropy': ..., 'num_tokens': ..., 'mean_token_accuracy': ..., 'epoch': ...}``) between
tqdm's redraws; a callback writes each logged dict's values, with the step, to ``TRUTH/rank_0.jsonl``.
``--nan-at STEP`` makes the weights NaN from that step on, on ``--nan-rank`` (DDP's all-reduce carries it to every
rank); the Trainer's NaN filter (``logging_nan_inf_filter``, on by default) keeps the printed loss finite.
``--raise-at STEP`` makes rank 1 raise in that step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, TrainerCallback
from trl import SFTConfig, SFTTrainer

WORDS = ("the", "model", "reads", "a", "token", "and", "writes", "the", "next", "one", "while", "the", "loss", "goes",
         "down", "step", "by", "step", "until", "the", "run", "ends")


class Truth(TrainerCallback):
    """The main process's log dicts with their step, as computed and as ProgressCallback prints them (``.4g``)."""

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


class Incident(TrainerCallback):
    """From ``nan_at`` on, NaN weights on ``nan_rank``; at ``raise_at``, rank 1 raises. Every step takes
    ``seconds`` at least (tqdm draws the bar of every step that lasts longer than its 0.1 s refresh)."""

    def __init__(self, model, args: argparse.Namespace) -> None:
        self._model, self._args = model, args
        self._rank = int(os.environ.get("RANK", "0"))

    def on_step_begin(self, args, state, control, **kwargs):
        time.sleep(self._args.step_seconds)
        step = state.global_step + 1
        if self._args.nan_at and step == self._args.nan_at and self._rank == self._args.nan_rank:
            with torch.no_grad():
                self._model.lm_head.weight.mul_(float("nan"))
        if self._args.raise_at and step == self._args.raise_at and self._rank == 1:
            raise RuntimeError(f"injected failure on rank 1 at step {step}")


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{word: index + 3 for index, word in enumerate(sorted(set(WORDS)))}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]",
                                   eos_token="[EOS]")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--logging-steps", type=int, default=3)
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--nan-rank", type=int, default=1)
    parser.add_argument("--raise-at", type=int)
    parser.add_argument("--step-seconds", type=float, default=0.15)
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                       pad_token_id=0, eos_token_id=2, bos_token_id=2))
    generator = torch.Generator().manual_seed(3)
    texts = [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (12,), generator=generator))
             for _ in range(256)]
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0 and (args.nan_at or args.raise_at):
        Path(args.truth).mkdir(parents=True, exist_ok=True)
        kind, step, where = (("loss_nonfinite", args.nan_at, args.nan_rank) if args.nan_at
                             else ("traceback", args.raise_at, 1))
        with open(Path(args.truth) / f"rank_{where}.jsonl", "a") as handle:
            handle.write(json.dumps({"incident": kind, "rank": where, "step": step}) + "\n")
    config = SFTConfig(output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=4, learning_rate=5e-3,
                       logging_steps=args.logging_steps, save_strategy="no", report_to=[], ddp_backend="gloo",
                       use_cpu=True, dataloader_num_workers=0, seed=0, disable_tqdm=False, max_length=32,
                       bf16=False, fp16=False)
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_dict({"text": texts}),
                         processing_class=tokenizer, callbacks=[Truth(Path(args.truth))])
    trainer.add_callback(Incident(model, args))
    trainer.train()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see hf_trainer_train.py: DDP's Reducer at exit can deadlock against gloo's thread


if __name__ == "__main__":
    main()
