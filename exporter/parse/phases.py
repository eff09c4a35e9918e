"""Lines that announce a long phase without steps: a checkpoint save, an evaluation.

A run that prints one of these may go silent for longer than its step interval without
being hung: the state extends the rank's stall threshold until its next step line
(state/detectors/stall.py). Data, one entry per framework's wording: the literal is an
anchor of the line scan (parse/scan.py), so a line without one costs nothing.
"""

from __future__ import annotations

from typing import NamedTuple

CHECKPOINT, EVALUATION = "checkpoint", "evaluation"
PHASE_NAMES = (CHECKPOINT, EVALUATION)


class Phase(NamedTuple):
    name: str  # CHECKPOINT or EVALUATION
    literal: bytes  # the bytes the announcing line holds, as the framework prints them
    source: str  # where the wording comes from


PHASES = (
    # transformers Trainer._save (src/transformers/trainer.py): logger.info(f"Saving model checkpoint to {output_dir}")
    Phase(CHECKPOINT, b"Saving model checkpoint to ", "transformers src/transformers/trainer.py, Trainer._save"),
    # Megatron-LM megatron/training/checkpointing.py save_checkpoint: print_rank_0('saving checkpoint at iteration
    # {:7d} to {} in {} format')
    Phase(CHECKPOINT, b"saving checkpoint at iteration", "Megatron-LM megatron/training/checkpointing.py"),
    # transformers Trainer.evaluation_loop: logger.info(f"\n***** Running {description} *****"), "Evaluation"
    Phase(EVALUATION, b"***** Running Evaluation *****", "transformers src/transformers/trainer.py, evaluation_loop"),
)
PHASE_LITERALS = frozenset(phase.literal for phase in PHASES)


def phase_of(body: bytes) -> str | None:
    """The long phase a line announces, None for any other line."""
    for phase in PHASES:
        if phase.literal in body:
            return phase.name
    return None
