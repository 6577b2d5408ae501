"""`--backend auto`'s trials in turn: every candidate tried, the reference first (torch float32,
which every other is judged against), each within its share of the budget (trial_budget.py) and
ended early where it is clearly slower than the fastest so far (trial.py's `Limits`); the fastest
that passes the gate kept loaded, and the one near it (within `trial.NEAR`), which is timed again in
turn with it once every candidate has been, as the budget allows. At most three candidates are
loaded at once: those two and the one being tried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from poolserve.backends.choice.candidates import REFERENCE, Candidate, Candidates
from poolserve.backends.choice.choice_table import trial_line
from poolserve.backends.choice.trial import (
    CUT_OFF,
    DUEL_PASSES,
    FIRST_PASS_CUT_OFF,
    NEAR,
    Limits,
    Tried,
    build,
    candidate_config,
    duel,
    judge,
    near,
    run_probe,
    trial_texts,
)
from poolserve.backends.choice.trial_budget import TrialBudget
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import Collate, RuntimeTrial
from poolserve.engine.runner_layout import runner_layout
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


class TrialRound:
    """The trials of `found`'s candidates for `spec` under `config` (`ahead_of_time`: for
    `poolserve compile`, torch compiled and nothing ended early)."""

    def __init__(
        self,
        spec: ModelSpec,
        config: EngineConfig,
        collate: Collate,
        found: Candidates,
        *,
        ahead_of_time: bool = False,
    ) -> None:
        self._spec = spec
        self._config = config
        self._collate = collate
        self._found = found
        self._runners, threads = runner_layout(config, spec.device)
        self._threads = threads or 1
        self._ahead_of_time = ahead_of_time

    @property
    def layout(self) -> str:
        """The runners a trial runs at once, as the log says it."""
        return f"{self._runners} runner(s) of {self._threads} thread(s)"

    def run(self, budget: TrialBudget) -> tuple[list[Tried], Tried | None]:
        """Every candidate tried (the reference first), then the two fastest timed again in
        turn where they are near; the fastest that passed, its backend still loaded."""
        tried = self._found.tried
        order = [REFERENCE, *(c for c in tried if c != REFERENCE)]
        texts = trial_texts()
        rows: list[Tried] = []
        best: Tried | None = None
        near_best: Tried | None = None  # within NEAR of the best: timed again at the end
        reference: list[np.ndarray] | None = None
        for done, candidate in enumerate(order):
            # Trials still to time, this one's included (the reference's where it competes).
            left = len(order) - done - (REFERENCE not in tried)
            limits = self._limits(candidate, best, budget.share_end(left))
            # The reference's first pass sizes every timed pass (trial_budget.py).
            sizing = partial(budget.sentences, ran=len(texts), trials=left)
            row = self._try(candidate, texts, limits, reference, sizing if done == 0 else None)
            rows.append(row)
            logger.info(trial_line(self._spec.name, row))
            if reference is None:
                if row.probe is None or not row.probe.outputs:
                    raise ModelLoadError(
                        f"{self._spec.name}: torch float32, the reference every engine is "
                        f"judged against, failed to run ({row.trial.outcome})"
                    )
                reference = row.probe.outputs
                texts = texts[: row.probe.sentences]  # what every other trial runs
            if candidate not in tried:
                row.settle("the reference (not a candidate)")
            elif row.backend is None or row.probe is None:
                continue
            elif row.probe.ended is not None:
                row.settle(_ended_early(row, best))
            else:
                best, near_best = self._rank(row, best, near_best)
        if best is not None and near_best is not None:
            best = self._time_again(best, near_best, budget)
        return rows, best

    def _limits(self, candidate: Candidate, best: Tried | None, until: float) -> Limits:
        """What ends a trial early: a first pass or first timed pass well past the fastest's
        (`poolserve compile` times each in full), and its share of the budget."""
        fastest = None if best is None or best.probe is None else best.probe.pass_seconds
        if fastest is None or self._ahead_of_time:
            return Limits(until=until, timed=candidate in self._found.tried or self._lone)
        return Limits(FIRST_PASS_CUT_OFF * fastest, CUT_OFF * fastest, until)

    @property
    def _lone(self) -> bool:
        """One candidate: the reference is timed too, only to tell what the candidate costs."""
        return len(self._found.tried) == 1

    def _rank(
        self, row: Tried, best: Tried | None, near_best: Tried | None
    ) -> tuple[Tried, Tried | None]:
        """The fastest and the one near it once `row` (timed in full, passed the gate) is
        ranked; the others settled as slower."""
        if best is None:
            return row, None
        faster = row if row.rate > best.rate else best
        others = [
            each for each in (row, best, near_best) if each is not None and each is not faster
        ]
        kept: Tried | None = None
        for each in sorted(others, key=lambda each: each.rate, reverse=True):
            assert each.probe is not None and faster.probe is not None
            if kept is None and near(each.probe, faster.probe):
                kept = each
            else:
                each.settle(f"slower than {faster.candidate.label}")
        return faster, kept

    def _time_again(self, best: Tried, other: Tried, budget: TrialBudget) -> Tried:
        """The fastest and the one near it timed again in turn, as many passes as the budget
        has left (none: the first figures stand); the faster of the two."""
        assert best.probe is not None and other.probe is not None
        passes = budget.duel_passes(best.probe.pass_seconds, other.probe.pass_seconds, DUEL_PASSES)
        if passes < 2:
            other.settle(
                f"slower than {best.candidate.label}, by less than {(NEAR - 1) * 100:.0f} % "
                "(the budget left no time to time them again in turn)"
            )
            return best
        again = duel(best.probe, other.probe, passes)
        best.retimed(again[0])
        other.retimed(again[1])
        faster, slower = (other, best) if other.rate > best.rate else (best, other)
        slower.settle(f"slower, timed again in turn with {faster.candidate.label}")
        logger.info(
            "%s: %s and %s timed again in turn (%d passes each): %.0f and %.0f sentences/s",
            self._spec.name,
            best.candidate.label,
            other.candidate.label,
            passes,
            best.rate,
            other.rate,
        )
        return faster

    def _try(
        self,
        candidate: Candidate,
        texts: list[str],
        limits: Limits,
        reference: list[np.ndarray] | None,
        sizing: Callable[[float], int] | None,
    ) -> Tried:
        """One trial: its row, its backend loaded where it ran and passed the gate."""
        started = time.perf_counter()
        config = candidate_config(candidate, self._config, compiling=self._ahead_of_time)
        try:
            backend = build(
                candidate, self._spec, config, self._collate, ahead_of_time=self._ahead_of_time
            )
            probe = run_probe(
                backend,
                self._collate,
                self._config,
                self._runners,
                self._threads,
                texts,
                limits,
                sizing,
            )
        except Exception as exc:  # a candidate that cannot load or export is left out
            why = exc.cli_message if isinstance(exc, SettingError) else str(exc) or repr(exc)
            logger.warning("%s: %s left out: %s", self._spec.name, candidate.label, why)
            return Tried.left_out(candidate, f"failed: {why}", time.perf_counter() - started)
        seconds = time.perf_counter() - started
        rate = None if probe.ended == "not timed" else probe.sentences_per_second
        if not probe.outputs:  # stopped in its first pass: too slow to judge
            trial = RuntimeTrial(candidate.runtime, candidate.precision, rate, None, {}, None, "")
            return Tried(candidate, trial, backend, probe, seconds)
        expected = probe.outputs if reference is None else reference[: len(probe.outputs)]
        figures, error, failures = judge(candidate, probe, expected, self._spec.heads[0])
        trial = RuntimeTrial(
            candidate.runtime,
            candidate.precision,
            rate,
            probe.single_ms,
            figures,
            error,
            "passed" if not failures else f"off the gate: {'; '.join(failures)}",
        )
        tried = Tried(candidate, trial, backend, probe, seconds)
        if failures:
            tried.settle(trial.outcome)
        return tried


def _ended_early(row: Tried, best: Tried | None) -> str:
    """The outcome of a trial ended early: slower than the fastest, by how much."""
    assert row.probe is not None
    if best is None or best.probe is None:
        return "slower"
    fastest = f"{best.candidate.label}'s"
    times = row.probe.pass_seconds / best.probe.pass_seconds
    if row.probe.ended == "first pass":
        return (
            f"slower (its first pass was stopped at {times:.1f}x {fastest} timed pass, "
            f"{row.probe.sentences} sentences in)"
        )
    return f"slower (its first timed pass took {times:.1f}x {fastest})"
