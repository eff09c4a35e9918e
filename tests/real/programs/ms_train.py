"""A tiny real MindSpore data-parallel job for ``msrun`` on the CPU, printed by MindFormers' own callbacks.

Run under ``msrun --worker_num 4 --local_worker_num 4 --log_dir LOG_DIR``: msrun writes each worker's
output to ``LOG_DIR/worker_<R>.log`` (opened with "w") and its scheduler's to ``scheduler.log``.
Every step, MindFormers' ``MFLossMonitor`` prints its ``{ Epoch:[..], step:[..], loss:[..], per_step_time: ..ms,
lr: .., overflow cond: .., loss_scale: .., global_norm: ..`` line and progress bar, and ``TrainingStateMonitor``
its ``weight_norm`` line. The ground truth is what MFLossMonitor computed and printed, taken in its
``print_output_info`` (a subclass records the arguments, then prints through MindFormers' own code), each at
the precision it prints (loss with 6 decimals, per_step_time in whole ms, lr and global_norm as numpy prints
them): ``TRUTH/rank_<R>.jsonl``, flushed and synced before the line is printed. An incident is written to
the truth file before it is caused (``{"incident": KIND, "rank": R, "step": S}``).

Incidents, each at ``--at`` on ``--rank`` (the step counted from 1 over the whole run):
  nan      the rank's loss becomes NaN from that step (the all-reduced gradients carry it to every rank)
  kill     the rank SIGKILLs itself
  raise    the rank raises RuntimeError
  hang     the rank sleeps for good inside the step; the others' CPU ring all-reduce fails waiting for it
  oom      the rank asks MindSpore's CPU allocator for an absurd block
  crash    the rank raises at that step on the first attempt only (no checkpoint marker yet); a checkpoint
           is saved every ``--save-every`` steps and a run started again resumes from the last one
Every step sleeps ``--step-seconds`` first (the work a real step does).
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

import mindspore as ms
import numpy as np
from mindformers.core.callback import MFLossMonitor, TrainingStateMonitor
from mindspore import nn, ops
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback, Model


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True, help="directory for the ground truth files")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--incident", choices=("nan", "kill", "raise", "hang", "oom", "crash"))
    parser.add_argument("--rank", type=int, default=1, help="the rank the incident happens on")
    parser.add_argument("--at", type=int, default=12, help="the step the incident happens at")
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--checkpoints", help="directory of the checkpoints (crash and resume)")
    parser.add_argument("--save-every", type=int, default=5)
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


class TrainStep(nn.Cell):
    """One data-parallel step returning what MFLossMonitor reads: (loss, overflow, loss scale, lr, global norm)."""

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, poison: ms.Parameter) -> None:
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)
        self.reducer = nn.DistributedGradReducer(self.weights, mean=True)
        self.poison = poison  # 1.0, or NaN from the NaN incident's step on (on its rank)

    def construct(self, features, labels):
        loss = self.network(features, labels) * self.poison
        grads = self.grad(lambda x, y: self.network(x, y) * self.poison, self.weights)(features, labels)
        grads = self.reducer(grads)  # the all-reduce: every rank waits for every other here
        norm = ops.sqrt(sum(ops.reduce_sum(grad * grad) for grad in grads))
        lr = self.optimizer.get_lr()
        self.optimizer(grads)
        return loss, ms.Tensor(False), ms.Tensor(1.0, ms.float32), lr, norm


class Dataset:
    """Each rank's own random regression batches (a fixed linear map plus noise)."""

    def __init__(self, rank: int, steps: int, batch: int) -> None:
        data = np.random.default_rng(1000 + rank)
        target = np.random.default_rng(7).standard_normal((16, 1)).astype(np.float32)
        self.features = data.standard_normal((steps, batch, 16)).astype(np.float32)
        self.labels = self.features @ target + 0.1 * data.standard_normal((steps, batch, 1)).astype(np.float32)

    def __getitem__(self, index: int):
        return self.features[index], self.labels[index]

    def __len__(self) -> int:
        return len(self.features)


class RecordedLossMonitor(MFLossMonitor):
    """MindFormers' MFLossMonitor, recording the values it prints (at the precision it prints them) first."""

    def __init__(self, truth: Truth, rank: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.truth, self.rank = truth, rank

    def print_output_info(self, cb_params, cur_epoch_num, origin_epochs, throughput, cur_step_num, steps_per_epoch,
                          loss, per_step_seconds, overflow, scaling_sens, time_remain, percent, global_norm,
                          *rest):
        step = cur_step_num + (cur_epoch_num - 1) * steps_per_epoch
        self.truth.write({"rank": self.rank, "step": step, "loss": float(f"{loss:5.6f}"),
                          "learning_rate": float(str(self.learning_rate)), "grad_norm": float(str(global_norm)),
                          "step_time_seconds": int(per_step_seconds) / 1000})
        super().print_output_info(cb_params, cur_epoch_num, origin_epochs, throughput, cur_step_num,
                                  steps_per_epoch, loss, per_step_seconds, overflow, scaling_sens, time_remain,
                                  percent, global_norm, *rest)


class Incidents(Callback):
    """Sleeps the step's work, then causes the incident at its step (before the step's computation)."""

    def __init__(self, args: argparse.Namespace, rank: int, truth: Truth, poison: ms.Parameter,
                 initial_step: int) -> None:
        super().__init__()
        self.args, self.rank, self.truth, self.poison, self.initial_step = args, rank, truth, poison, initial_step
        self.mine = args.incident is not None and rank == args.rank

    def on_train_begin(self, run_context):
        # A resumed run's epoch is still the whole run's --steps batches, of which it skipped the first ones (as
        # MindFormers' own resume counts them): MFLossMonitor numbers non-sink steps modulo cb_params.batch_num.
        run_context.original_args().batch_num = self.args.steps

    def on_train_step_begin(self, run_context):
        time.sleep(self.args.step_seconds)
        step = run_context.original_args().cur_step_num + self.initial_step
        if not self.mine or step != self.args.at:
            return
        if self.args.incident == "nan":
            self.truth.write({"incident": "loss_nonfinite", "rank": self.rank, "step": step})
            self.poison.set_data(ms.Tensor(float("nan"), ms.float32))
            return
        if self.args.incident == "crash" and Path(self.args.checkpoints, "crashed").exists():
            return  # the resumed attempt goes past the step the first one crashed at
        kind = {"kill": "killed", "raise": "traceback", "hang": "hang", "oom": "oom", "crash": "traceback"}
        self.truth.write({"incident": kind[self.args.incident], "rank": self.rank, "step": step})
        if self.args.incident == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.args.incident in ("raise", "crash"):
            if self.args.incident == "crash":
                Path(self.args.checkpoints, "crashed").touch()
            raise RuntimeError(f"injected failure on rank {self.rank} at step {step}")
        elif self.args.incident == "hang":
            while True:
                time.sleep(3600)
        else:
            ops.zeros((1 << 48,), ms.uint8).asnumpy()  # 256 TiB


class Checkpoints(Callback):
    """Saves every --save-every steps (the step in the file name), rank by rank."""

    def __init__(self, directory: Path, every: int, rank: int, network: nn.Cell, initial_step: int) -> None:
        super().__init__()
        self.directory, self.every, self.rank, self.network = directory, every, rank, network
        self.initial_step = initial_step

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num + self.initial_step
        if step % self.every == 0:
            ms.save_checkpoint(self.network, str(self.directory / f"rank_{self.rank}_step_{step}.ckpt"))


def _resume(directory: Path, rank: int, network: nn.Cell) -> int:
    """Loads this rank's latest checkpoint, if any; the step it was saved at (0 without one)."""
    saved = sorted(directory.glob(f"rank_{rank}_step_*.ckpt"), key=lambda path: int(path.stem.rsplit("_", 1)[1]))
    if not saved:
        return 0
    ms.load_param_into_net(network, ms.load_checkpoint(str(saved[-1])))
    step = int(saved[-1].stem.rsplit("_", 1)[1])
    print(f"resuming rank {rank} from {saved[-1].name} at step {step}", flush=True)
    return step


def main() -> int:
    args = _arguments()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    init()
    rank, world = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)  # the same initial weights on every rank
    truth = Truth(Path(args.truth), rank)
    network = nn.SequentialCell(nn.Dense(16, 32), nn.Tanh(), nn.Dense(32, 1))
    loss_net = nn.WithLossCell(network, nn.MSELoss())
    initial_step = 0
    checkpoints = Path(args.checkpoints) if args.checkpoints else None
    if checkpoints is not None:
        checkpoints.mkdir(parents=True, exist_ok=True)
        initial_step = _resume(checkpoints, rank, network)
    # The learning rate decays linearly, one value per step of the whole run (resumed runs start further in).
    rates = [args.lr * (1.0 - done / (args.steps + 1)) for done in range(initial_step, args.steps)]
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=rates, momentum=0.9)
    poison = ms.Parameter(ms.Tensor(1.0, ms.float32), name="poison", requires_grad=False)
    step_cell = TrainStep(loss_net, optimizer, poison)
    dataset = ms.dataset.GeneratorDataset(Dataset(rank, args.steps, args.batch), ["features", "labels"],
                                          shuffle=False).skip(initial_step)
    print(f"rank {rank} of {world}: training {args.steps} steps from step {initial_step + 1}", flush=True)
    callbacks = [
        Incidents(args, rank, truth, poison, initial_step),
        RecordedLossMonitor(truth, rank, learning_rate=args.lr, per_print_times=1, origin_epochs=1,
                            dataset_size=args.steps, initial_step=initial_step,
                            global_batch_size=args.batch * world),
        TrainingStateMonitor(origin_epochs=1, dataset_size=args.steps, initial_step=initial_step,
                             global_batch_size=args.batch * world, config={"weight_state_format": "log"}),
    ]
    if checkpoints is not None:
        callbacks.append(Checkpoints(checkpoints, args.save_every, rank, network, initial_step))
    Model(step_cell).train(1, dataset, callbacks=callbacks, dataset_sink_mode=False)
    if not math.isfinite(float(poison.asnumpy())):
        print("the loss was not finite from step", args.at, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
