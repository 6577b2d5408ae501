"""How `--backend auto`'s choice is told: a line as each trial ends, the table of every trial
logged at start (the same rows `/info` and `/metrics` show), the rows of the candidates left
out, the line that says what an emulated precision costs, and the one line that refuses to
start when no runtime can run the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from poolserve.backends.choice.candidates import Candidates
from poolserve.backends.torch_model.device import native_features
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import RuntimeChoice, RuntimeTrial

if TYPE_CHECKING:
    from poolserve.backends.choice.trial import Tried


def describe(name: str, choice: RuntimeChoice | None) -> str:
    """The log lines of a choice: what serves, why, and each trial's row."""
    if choice is None:
        return f"{name}: no engine chosen"
    how = {
        "measured": f"measured now in {choice.seconds:.1f} s",
        "cached": "as measured at an earlier start",
        "only candidate": "the only candidate here",
    }[choice.source]
    lines = [f"{name}: --backend auto serves {choice.runtime} {choice.precision} ({how})"]
    lines += [f"  {row_text(trial)}" for trial in choice.trials]
    return "\n".join(lines)


def row_text(trial: RuntimeTrial) -> str:
    """One trial as a line: speed, single-sentence latency, distance from float32, outcome."""
    head = f"{trial.runtime} {trial.precision}".ljust(22)
    if trial.sentences_per_second is None:
        return f"{head} {trial.outcome}"
    figures = "".join(f"{key} {value:.4f}, " for key, value in trial.figures.items())
    single = "not timed" if trial.single_ms is None else f"{trial.single_ms:6.2f} ms"
    return (
        f"{head} {trial.sentences_per_second:8.0f} sentences/s (requests of 32), "
        f"{single} one sentence; {figures.rstrip(', ') or 'not judged'}; {trial.outcome}"
    )


def trial_line(name: str, tried: Tried) -> str:
    """The log line of a trial as it ends: its speed, how it was timed, how long it took."""
    probe, label = tried.probe, tried.candidate.label
    took = f"{tried.seconds:.1f} s with its load"
    if probe is None:
        return f"{name}: {label}: {tried.trial.outcome} ({took})"
    if probe.ended == "first pass":
        how = f"its first pass stopped after {probe.sentences} sentences"
    elif probe.ended == "not timed":
        how = f"its outputs alone, {len(probe.outputs)} sentences"
    else:
        how = f"{probe.passes} timed pass(es) of {probe.sentences} sentences"
    return f"{name}: {label}: {probe.sentences_per_second:.0f} sentences/s ({how}; {took})"


def emulation_line(name: str, choice: RuntimeChoice) -> str:
    """What serving a precision the CPU only emulates costs, as its trial measured it."""
    rates = {(t.runtime, t.precision): t.sentences_per_second for t in choice.trials}
    served, float32 = rates.get((choice.runtime, choice.precision)), rates.get(("torch", "float32"))
    cost = ""
    if served and float32:
        cost = (
            f": {choice.runtime} {choice.precision} ran {served:.0f} sentences/s against "
            f"float32's {float32:.0f} ({served / float32:.2f}x)"
        )
    return (
        f"{name}: --dtype {choice.precision} was asked for, and this CPU only emulates it (it "
        f"has no {native_features(choice.precision)}){cost}; leave --dtype out to serve the "
        "fastest precision it runs"
    )


def left_out_rows(found: Candidates) -> tuple[RuntimeTrial, ...]:
    """A row for each candidate left out before any trial, with why."""
    return tuple(
        RuntimeTrial(
            candidate.runtime, candidate.precision, None, None, {}, None, f"left out: {why}"
        )
        for candidate, why in found.left_out
    )


def refusal(config: EngineConfig, found: Candidates) -> str:
    """Why no runtime can run the model as asked (one line, naming what to change)."""
    reasons = "; ".join(f"{candidate.label}: {why}" for candidate, why in found.left_out)
    asked = "--quantize int8" if config.quantize == "int8" else f"--backend {config.backend}"
    return f"no engine can run this model with {asked} here ({reasons or 'none runs it'})"
