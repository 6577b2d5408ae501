"""How `--backend auto`'s choice is told: the table of every trial logged at start (the same rows
`/info` and `/metrics` show), the rows of the candidates left out, and the one line that refuses
to start when no engine can run the model."""

from __future__ import annotations

from poolserve.backends.choice.candidates import Candidates
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import EngineChoice, EngineTrial


def describe(name: str, choice: EngineChoice | None) -> str:
    """The log lines of a choice: what serves, why, and each trial's row."""
    if choice is None:
        return f"{name}: no engine chosen"
    how = {
        "measured": f"measured now in {choice.seconds:.1f} s",
        "cached": "as measured at an earlier start",
        "only candidate": "the only candidate here",
    }[choice.source]
    lines = [f"{name}: --backend auto serves {choice.engine} {choice.precision} ({how})"]
    lines += [f"  {row_text(trial)}" for trial in choice.trials]
    return "\n".join(lines)


def row_text(trial: EngineTrial) -> str:
    """One trial as a line: speed, single-sentence latency, distance from float32, outcome."""
    head = f"{trial.engine} {trial.precision}".ljust(22)
    if trial.sentences_per_second is None:
        return f"{head} {trial.outcome}"
    figures = ", ".join(f"{key} {value:.4f}" for key, value in trial.figures.items())
    single = "not timed" if trial.single_ms is None else f"{trial.single_ms:6.2f} ms"
    return (
        f"{head} {trial.sentences_per_second:8.0f} sentences/s (requests of 32), "
        f"{single} one sentence; {figures}; {trial.outcome}"
    )


def left_out_rows(found: Candidates) -> tuple[EngineTrial, ...]:
    """A row for each candidate left out before any trial, with why."""
    return tuple(
        EngineTrial(candidate.engine, candidate.precision, None, None, {}, None, f"left out: {why}")
        for candidate, why in found.left_out
    )


def refusal(config: EngineConfig, found: Candidates) -> str:
    """Why no engine can run the model as asked (one line, naming what to change)."""
    reasons = "; ".join(f"{candidate.label}: {why}" for candidate, why in found.left_out)
    asked = "--quantize int8" if config.quantize == "int8" else f"--backend {config.backend}"
    return f"no engine can run this model with {asked} here ({reasons or 'none runs it'})"
