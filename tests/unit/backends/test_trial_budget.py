"""How the trials share their 30 s: a pass's sentences sized from the reference's first pass and
what is left, each trial's share, and what timing two again may take, on a clock the test
moves."""

from __future__ import annotations

import math

import pytest

from poolserve.backends.choice import trial_budget
from poolserve.backends.choice.trial_budget import DUEL_SHARE, TrialBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(trial_budget, "time", fake)
    return fake


def test_a_pass_runs_fewer_sentences_the_slower_the_machine(clock: Clock) -> None:
    budget = TrialBudget(clock.now, 30.0)
    clock.now += 4.0  # the reference loaded and ran its first pass
    left = 30.0 - 4.0 - DUEL_SHARE * 30.0  # the trials' share of what is left: 21.5 s
    # Fast: 256 sentences in 0.5 s, five trials to time: all of them.
    assert budget.sentences(0.5, 256, 5) == 256
    # Slower: 256 in 2 s. A pass of a fifth of 21.5 s over 8 passes is 0.54 s: 64 sentences.
    per_pass = left / 5 / 8
    assert budget.sentences(2.0, 256, 5) == int(256 * per_pass / 2.0) // 32 * 32 == 64
    # Three trials instead of five: 96 sentences (a whole number of requests of 32).
    assert budget.sentences(2.0, 256, 3) == 96
    # Busy or slow enough that not even 64 fit: 64 still, what the gate judges on.
    assert budget.sentences(20.0, 256, 5) == 64
    clock.now = budget.deadline + 5  # past the budget: the least
    assert budget.sentences(0.5, 256, 5) == 64


def test_each_trial_ends_its_timed_passes_at_its_share_and_the_duel_takes_what_is_left(
    clock: Clock,
) -> None:
    budget = TrialBudget(clock.now, 30.0)
    for_trials = 30.0 * (1 - DUEL_SHARE)
    assert budget.share_end(3) == pytest.approx(clock.now + for_trials / 3)
    clock.now += 20.0
    assert budget.share_end(1) == pytest.approx(clock.now + for_trials - 20.0)
    clock.now = budget.started + for_trials  # the trials' time spent: a share of nothing
    assert budget.share_end(2) == clock.now
    # 4.5 s left: passes of 0.4 s and 0.5 s fit 5 times in turn, at most the asked 3.
    assert budget.duel_passes(0.4, 0.5, 3) == 3
    assert budget.duel_passes(0.4, 0.5, 9) == 5
    clock.now = budget.deadline
    assert budget.duel_passes(0.4, 0.5, 5) == 0


def test_poolserve_compile_has_no_bound(clock: Clock) -> None:
    budget = TrialBudget.unbounded()
    assert math.isinf(budget.deadline)
    assert budget.sentences(60.0, 256, 5) == 256
    assert budget.share_end(5) == math.inf
    assert budget.duel_passes(10.0, 10.0, 5) == 5
