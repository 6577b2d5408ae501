"""A trial's crew runs a pass as the server's runners do: each runner's forward made on its own
thread, every runner computing at once, every batch run once, outputs in the batches' order, and
a failure in any runner raised to the trial with every helper let go."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from poolserve.backends.choice.crew import Crew

BATCHES = list(range(12))  # the crew hands batches to forwards as they are


class Recording:
    """A backend whose forwards note the thread each was made and run on; the first call of
    every forward waits at a barrier all runners must reach, so a crew that ran its members in
    turn would break it instead of passing."""

    def __init__(self, runners: int, fail_on: int | None = None) -> None:
        self.barrier = threading.Barrier(runners, timeout=30)
        self.fail_on = fail_on
        self.made: list[int] = []
        self.ran: dict[int, set[int]] = {}  # batch: the threads that ran it
        self.lock = threading.Lock()

    def executor(self) -> Any:
        made_on = threading.get_ident()
        self.made.append(made_on)
        calls = 0

        def forward(batch: int, threads: int) -> list[np.ndarray]:
            nonlocal calls
            assert threading.get_ident() == made_on, "a forward ran off its own thread"
            calls += 1
            if calls == 1:
                self.barrier.wait()
            if batch == self.fail_on:
                raise RuntimeError("the runtime broke")
            with self.lock:
                self.ran.setdefault(batch, set()).add(made_on)
            return [np.full(2, float(batch)), np.full(2, batch + 0.5)]

        return forward


def test_a_crew_runs_every_batch_once_on_all_runners_at_once_in_order() -> None:
    backend = Recording(runners=3)
    crew = Crew(backend, backend.executor(), runners=3, threads=1)  # type: ignore[arg-type]
    try:
        outputs = crew.outputs(BATCHES)  # type: ignore[arg-type]
    finally:
        crew.close()
    assert len(set(backend.made)) == 3  # each runner made its own forward on its own thread
    assert sorted(backend.ran) == BATCHES and all(len(t) == 1 for t in backend.ran.values())
    assert len(set().union(*backend.ran.values())) == 3  # all three took part (the barrier)
    expected = [value for batch in BATCHES for value in (batch, batch + 0.5)]
    assert [float(output[0]) for output in outputs] == expected


def test_a_runner_that_fails_fails_the_pass_and_the_crew_still_closes() -> None:
    backend = Recording(runners=2, fail_on=5)
    crew = Crew(backend, backend.executor(), runners=2, threads=1)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="the runtime broke"):
        crew.timed(BATCHES)  # type: ignore[arg-type]
    crew.close()
    assert not any(t.name.startswith("trial-runner") for t in threading.enumerate())


def test_a_helper_whose_forward_cannot_be_made_fails_the_crew() -> None:
    class Failing:
        def executor(self) -> Any:
            if threading.current_thread().name.startswith("trial-runner"):
                raise RuntimeError("no infer request")
            return lambda batch, threads: []

    backend = Failing()
    with pytest.raises(RuntimeError, match="no infer request"):
        Crew(backend, backend.executor(), runners=2, threads=1)  # type: ignore[arg-type]
    assert not any(t.name.startswith("trial-runner") for t in threading.enumerate())
