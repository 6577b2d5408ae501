"""How a first start's trials share their time: `BUDGET_SECONDS` from the start of the first
trial, whatever the machine, every candidate timed in it.

A trial is the candidate's load (an export, a compile) and its passes over the same real
sentences: a first pass that warms it up and gives its outputs, one more that settles it, then
timed passes. The candidates share the budget by shortening their passes, not by leaving any
out:

- **The sentences a pass runs** are chosen once, from the reference's first pass (torch float32,
  over `trial.TIMED_SENTENCES`): as many as fit `PASSES_PER_SHARE` passes at the reference's
  speed into an even share of what is left (a multiple of a request, at least
  `MIN_SENTENCES`, which the gate judges on). A slow CPU, or one busy with other work, runs
  fewer sentences a pass; a fast one all of them. Measured on a 2-core AVX2 EPYC, the first
  pass alone of the old fixed 256 sentences took 1.6 s (2.6 s beside a `pip install`), and
  the third runtime was never timed.
- **Each trial's timed passes** go on while one more fits in its share of what is left
  (`share_end`): one at least, so a trial that loads slowly (the ONNX export) leaves the next
  ones a little less, and every one of them is timed.
- **Timing two close ones again** (trial.duel) takes what the budget has left: the trials
  share all but `DUEL_SHARE` of it, so that some is left where two come out close; where nothing
  is left the duel is left out: a noisy choice at worst, never a longer start.

`poolserve compile` has no bound (`unbounded`): every pass of `TIMED_SENTENCES`, every duel.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

BUDGET_SECONDS = 30.0
# Passes of the reference's speed a trial's share is sized for: a first and a settling pass,
# timed ones, and room for its load.
PASSES_PER_SHARE = 8
# Sentences a request of the trials holds; a pass runs a whole number of them.
REQUEST_SENTENCES = 32
MIN_SENTENCES = 64
# The part of the budget the trials leave for timing the two fastest again, where they are near.
DUEL_SHARE = 0.15


@dataclass(frozen=True)
class TrialBudget:
    """The trials' time: `seconds` from `started` (`time.perf_counter()` times)."""

    started: float
    seconds: float = BUDGET_SECONDS

    @staticmethod
    def unbounded() -> TrialBudget:
        return TrialBudget(time.perf_counter(), math.inf)

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def left(self) -> float:
        """Seconds left (none once past)."""
        return max(0.0, self.deadline - time.perf_counter())

    def _for_trials(self) -> float:
        """Seconds left for the trials: what is left but the duel's share."""
        return max(0.0, self.left() - DUEL_SHARE * self.seconds)

    def sentences(self, first_pass: float, ran: int, trials: int) -> int:
        """Sentences a pass runs, sized from the reference's first pass (`first_pass` seconds
        over `ran` sentences) for `trials` trials still to time."""
        if math.isinf(self.seconds):
            return ran
        per_pass = self._for_trials() / max(1, trials) / PASSES_PER_SHARE
        fit = ran * per_pass / max(first_pass, 1e-6)
        whole = int(fit) // REQUEST_SENTENCES * REQUEST_SENTENCES
        return max(min(MIN_SENTENCES, ran), min(ran, whole))

    def share_end(self, trials: int) -> float:
        """When a trial that starts now, with `trials` trials still to time (its own
        included), should end its timed passes: an even share of what is left."""
        if math.isinf(self.seconds):
            return math.inf
        return time.perf_counter() + self._for_trials() / max(1, trials)

    def duel_passes(self, one: float, other: float, most: int) -> int:
        """Passes of each of two candidates (`one`, `other`: seconds a pass) that fit in what
        is left, taken in turn, at most `most`."""
        if math.isinf(self.seconds):
            return most
        return min(most, int(self.left() / max(one + other, 1e-6)))
