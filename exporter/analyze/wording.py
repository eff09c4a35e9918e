"""A finding's message: one sentence from its kind, step, rank, value and what its line said."""

from __future__ import annotations

from exporter import kinds


def describe(kind: str, step: int | None, rank: str, value: tuple[float | None, float | None],
             detail: dict[str, str | int | float]) -> str:
    """What happened at ``step`` on ``rank`` (``value``: the anomaly's value before the step and at it)."""
    before, at = value
    who = f"rank {rank or '?'}"
    if kind.endswith("_nonfinite"):
        gauge = kind.removesuffix("_nonfinite")
        if at is None:  # Megatron-LM's "number of nan iterations": counted, the loss not printed
            return f"{gauge} was not finite at step {step} (the line counts it, without a value)"
        return f"{gauge} became {at} at step {step}"
    if kind.endswith("_spike"):
        gauge = kind.removesuffix("_spike")
        was = f"from {before:.4g} " if before is not None else ""
        return f"{gauge} jumped {was}to {at:.4g} at step {step}" if at is not None else f"{gauge} spiked"
    if kind == "rank_divergence":
        was = f" from {before:.4g}" if before is not None else ""
        now = f" to {at:.4g}" if at is not None else ""
        return f"{detail.get('name', 'a value')} of {who} departed from its own level{was}{now} at step {step}"
    if kind == "slowdown":
        baseline = detail.get("baseline")
        usual = (f", {at / baseline:.1f}x the rank's usual {baseline:.3g} s"
                 if isinstance(baseline, float) and baseline > 0 and at is not None else "")
        slow = f"{at:.3g} s" if at is not None else "slow"
        return f"step time {slow} from step {step} on{usual}, for {detail.get('steps')} steps or more"
    if kind == "restart":  # the time without a step, where known, the engine adds
        after = detail.get("after_step")
        if step is None:
            return f"{who} started again after step {after}"
        again = int(after) - step + 1 if isinstance(after, int) and step <= after else 0
        return f"{who} started over: step {step} after step {after}{f' ({again} steps done again)' if again else ''}"
    if kind == "hang":
        return (f"{who} went silent inside step {(step or 0) + 1} (its last step line: {step}) and printed no "
                f"error: {detail.get('evidence', 'silent')}")
    if kind == "node_timeout":
        node = detail.get("node_id")
        named = detail.get("node_rank", node)
        return (f"the scheduler timed out node {node} (rank {named}): it stopped answering without a word in "
                "its own log")
    said = ", ".join(str(value) for name, value in detail.items() if name in ("exception", "code"))
    at_step = f" after step {step}" if step is not None else " before the first step"
    return f"{kinds.words(kind)}{f' ({said})' if said else ''}{at_step}"
