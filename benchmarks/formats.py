"""Each format's step lines at catch-up: a kept real log of it, its training part continued copy after copy.

Issue 29 asks for every format's step lines at block speed, not only MindFormers' and the
two consoles'. Each format here has a real log kept in tests/fixtures (SOURCES.md says where
it came from); the lines from its first step line to its last are copied again and again, their
step counters renumbered, so a copy goes on from the one before instead of restarting the run,
and the lines before and after them (the run's start and end) are kept once, as a long run
prints them. The exporter's catch-up (the serve loop's path,
``benchmarks.catchup_exporter``) reads the file, its steps are checked, and ``grep -c`` of
the format's anchor beside it gives the read limit of the same file.

    python -m benchmarks.formats [LINES] [ROUNDS]
"""

from __future__ import annotations

import functools
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.catchup import compile_bytecode
from benchmarks.measure import Measured, run_measured, warm

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"


@dataclass(frozen=True, slots=True)
class FormatLog:
    """A format's kept real log, how its lines print the step, and the literal ``grep -c`` looks for."""

    format: str
    fixture: str
    # Each match: (before)(step)(between)(total), the last two empty where the line prints no total; the step empty
    # too where the lines print none (each match a step line, copied as it is).
    counter: bytes
    anchor: str
    extra_steps: int = 0  # step lines after the training part (kept once): another trainer's, a restart's
    # A progress bar's log (Lightning's): the training part is the redraws between these two markers, on one line,
    # continued there as a long run draws them; its lines are counted as redraws (carriage-return segments), and
    # ``steps`` a copy holds (its counter numbers the epochs).
    redraws: tuple[bytes, ...] = ()
    steps: int = 0


FORMATS = (
    FormatLog("megatron", "megatron_tflops.log", rb"(iteration +)(\d+)(/ *)(\d+)", "iteration"),
    FormatLog("deepspeed", "healthy/deepspeed_dschat_sft_opt1.3b.log", rb"(step=)(\d+)()()", "step="),
    FormatLog("torchtitan", "healthy/torchtitan_qwen3_14b_run54.log", rb"(step: +)(\d+)()()", "loss:"),
    FormatLog("nemo", "nemo2.log", rb"(iteration |global_step: )(\d+)(/?)(\d*)", "Training epoch "),
    FormatLog("mmengine", "mmengine_iter.log", rb"(Iter\(train\) \[)(\d+)(/)(\d+)", "lr: "),
    # MMEngine's EpochBasedTrainLoop (a real run here: 3 epochs of 16 iterations), continued epoch after epoch; and the
    # same Runner's vis_data/scalars.json records (iteration-based).
    FormatLog("mmengine_epoch", "mmengine_epoch_run.log", rb"(Epoch\(train\) \[)(\d+)()()", "lr: ", steps=48),
    FormatLog("mmengine_scalars", "mmengine_runner_scalars.log", rb'("step": )(\d+)()()', 'loss"'),
    FormatLog("nanogpt", "nanogpt.log", rb"(iter )(\d+)()()", "iter "),
    FormatLog("paddlenlp", "paddlenlp.log", rb"(global_step: )(\d+)()()", "global_step: "),
    FormatLog("fairseq", "fairseq_plain.log", rb"(num_updates=)(\d+)()()", "loss="),
    FormatLog("jsonl", "llamafactory_trainer_log.log", rb'("current_steps": )(\d+)(, "total_steps": )(\d+)',
              'loss"'),
    # MindFormers' MFLossMonitor (static graph mode, and MindFormers 2.1 on msrun): a real worker log, its records
    # among msrun's and MindSpore's lines.
    FormatLog("mindformers_static", "msrun_oom_worker_1.log", rb"(step:\[ *)(\d+)(/ *)(\d+)", "Epoch:"),
    # Hugging Face Trainer's dicts outside a progress bar: the Trainer's own without tqdm (no step), LLaMA-Factory's
    # behind its logger's prefix (no step), PaddleNLP's naming their step and padded to the terminal's width.
    FormatLog("hf_trainer_no_bar", "hf_trainer_no_bar.log", rb"(\{'loss': )()()()", "{'loss'"),
    FormatLog("hf_trainer_logged", "healthy/llamafactory_finetuneLLM_running_log.log", rb"(>> \{'loss': )()()()",
              "{'loss'"),
    FormatLog("hf_trainer_own_step", "hf_paddlenlp_global_step.log", rb"('global_step': )(\d+)()()", "{'loss'"),
    # The generic reader: llm.c's three step lines continued; its fork's two NaN lines (a restart) and a prime-rl
    # trainer's line after them, once.
    FormatLog("generic", "generic_unnamed_trainers.log", rb"(step +)(6\d)(/)(\d+)", "loss", extra_steps=3),
    # Lightning's TQDMProgressBar: a real run's 20 epochs of redraws (each step drawn twice) continued on its line.
    FormatLog("lightning", "lightning_bar_long.log", rb"(Epoch )(\d+)()()", "Epoch ",
              redraws=(b"\rEpoch 0:   0%", b"`Trainer.fit`"), steps=300),
)


def continued(text: bytes, counter: re.Pattern[bytes], copies: int, *, whole: bool = False,
              redraws: tuple[bytes, ...] = ()) -> bytes:
    """``text`` with its training part ``copies`` times, each copy's steps after the copy before's last by the log's
    own interval. The training part runs from the line of the first step to the line of the last (``redraws``: see
    training_part): a long run prints its start (and its end) once, so the lines before and after it are kept once.
    ``whole``: the whole text a copy."""
    begins, ends = training_part(text, counter, redraws) if not whole else (0, len(text))
    steps = sorted({int(match.group(2)) for match in counter.finditer(text, begins, ends) if match.group(2)})
    if not steps:  # lines printing no step: copies as they are
        return text[:begins] + text[begins:ends] * copies + text[ends:]
    interval = min((later - earlier for earlier, later in zip(steps, steps[1:], strict=False)), default=1)
    offset = steps[-1] - steps[0] + interval
    total = steps[0] + offset * copies
    training, end = text[begins:ends], text[ends:]
    if redraws:  # the bar's last redraws after the training part (its final frame) are the last copy's
        end = counter.sub(functools.partial(_renumbered, shift=(copies - 1) * offset, total=total), end)
    return text[:begins] + b"".join(counter.sub(functools.partial(_renumbered, shift=copy * offset, total=total),
                                                training) for copy in range(copies)) + end


def training_part(text: bytes, counter: re.Pattern[bytes], redraws: tuple[bytes, ...] = ()) -> tuple[int, int]:
    """Where the lines from the first step's to the last step's begin and end; with ``redraws``, the redraws between
    those two markers."""
    if redraws:
        begins = text.index(redraws[0])
        return begins, text.index(redraws[1], begins)
    found = list(counter.finditer(text))
    return text.rfind(b"\n", 0, found[0].start()) + 1, text.find(b"\n", found[-1].end()) + 1 or len(text)


def _renumbered(found: re.Match[bytes], shift: int, total: int) -> bytes:
    """A step counter ``shift`` steps on, its total (where it prints one) the continued log's."""
    before, step, between, printed_total = found.groups()
    return b"%s%d%s%s" % (before, int(step) + shift, between, b"%d" % total if printed_total else b"")


def write_log(directory: Path, spec: FormatLog, lines: int) -> tuple[Path, int, int]:
    """The continued log of at least ``lines`` lines: its path, its lines, its steps (a step a line, or over two as
    DeepSpeed prints one)."""
    text = (FIXTURES / spec.fixture).read_bytes()
    text = text if text.endswith(b"\n") else text + b"\n"
    counter = re.compile(spec.counter)
    begins, ends = training_part(text, counter, spec.redraws)
    training_lines = _lines(text[begins:ends], spec)
    copies = max(1, -(-(lines - _lines(text, spec) + training_lines) // training_lines))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "train.log"
    data = continued(text, counter, copies, redraws=spec.redraws)
    path.write_bytes(data)
    found = list(counter.finditer(text))
    numbers = {match.group(2) for match in found}
    steps = spec.steps or (len(numbers) if any(numbers) else len(found))
    return path, _lines(data, spec), steps * copies + spec.extra_steps


def _lines(text: bytes, spec: FormatLog) -> int:
    """The lines of ``text``; a bar's log: its redraws (the lines a reader of each carriage-return segment reads)."""
    return text.count(b"\n") + (text.count(b"\r") if spec.redraws else 0)


def measure(workdir: Path, lines: int, rounds: int) -> dict[str, dict]:
    """Every format's log of ``lines`` lines: the exporter's catch-up and ``grep -c``, best of ``rounds``."""
    compile_bytecode()
    results: dict[str, dict] = {}
    for spec in FORMATS:
        directory = workdir / spec.format
        path, written, steps = write_log(directory, spec, lines)
        best: dict[str, Measured] = {}
        for _ in range(rounds):
            for name, command in (("exporter", [sys.executable, "-m", "benchmarks.catchup_exporter", str(directory)]),
                                  ("grep_c", ["grep", "-c", spec.anchor, str(path)])):
                warm(path)
                result = run_measured(command)
                if name == "exporter":
                    _check(result.stdout, spec, written, steps)
                if name not in best or result.wall_seconds < best[name].wall_seconds:
                    best[name] = result
        results[spec.format] = {
            "fixture": spec.fixture, "lines": written, "steps": steps,
            "contenders": {name: {"wall_seconds": result.wall_seconds, "cpu_seconds": result.cpu_seconds,
                                  "lines_per_second": written / result.wall_seconds}
                           for name, result in best.items()},
            "reading_seconds": json.loads(best["exporter"].stdout)["seconds"]["reading"]}
        path.unlink()
    return results


def _check(output: str, spec: FormatLog, lines: int, expected_steps: int) -> None:
    ranks = json.loads(output)["ranks"]
    counted = sum(rank["lines"] for rank in ranks.values())
    steps = sum(rank["steps"] for rank in ranks.values())
    if spec.redraws:  # its line of redraws is counted as the tailer hands it out, in pieces: its steps only
        counted = lines
    if (counted, steps) != (lines, expected_steps):
        raise AssertionError(f"{spec.format}: the exporter counted {counted} lines and {steps} steps, "
                             f"the log holds {lines} and {expected_steps}")


def summary(results: dict[str, dict]) -> str:
    """One line: each format's catch-up lines a second, and grep -c's on the same file."""
    parts = [f"{name} {row['contenders']['exporter']['lines_per_second']:,.0f} "
             f"(grep -c {row['contenders']['grep_c']['lines_per_second']:,.0f})" for name, row in results.items()]
    return "formats, catch-up lines/s of a real log continued: " + ", ".join(parts)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="trainlog-formats-") as work:
        found = measure(Path(work), int(sys.argv[1]) if len(sys.argv) > 1 else 300_000,
                        int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    print(json.dumps(found, indent=2))
    print(summary(found))
