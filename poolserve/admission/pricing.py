"""What requests not tokenized yet will cost: admission's forecast (control.py) of the work
before room is made, from what tokenized requests have really cost against the door's
estimates (their body's bytes).

Not thread-safe by itself: the control calls it under its lock.
"""

from __future__ import annotations

from collections import deque

# The weight of each tokenized request in the moving average of cost over door estimate.
COST_AVERAGING = 0.05
# The last requests whose cost over estimate, all lower than the average, prices the next ones.
RECENT_COSTS = 8


class CostForecast:
    def __init__(self, cost_per_estimate: float) -> None:
        # What tokenized requests cost over what the door reserved for them (a moving average
        # from English JSON's token per four bytes), and the door estimates of the admitted
        # requests not tokenized yet.
        self._cost_per_estimate = cost_per_estimate
        # The last requests' cost over estimate: a run of requests far cheaper than their
        # bodies (images: base64 bytes, not tokens) is priced at once, not after the average
        # has crept down to them.
        self._recent_costs: deque[float] = deque(maxlen=RECENT_COSTS)
        self.unpriced = 0

    def admitted(self, estimate: int) -> None:
        """A request was admitted on its door estimate."""
        self.unpriced += estimate

    def priced(self, door_estimate: int, cost: int | None) -> None:
        """An admitted request's real cost is known (None: it left before it was)."""
        self.unpriced -= door_estimate
        if cost is not None and door_estimate > 0:
            sample = min(cost / door_estimate, 1.0)
            self._cost_per_estimate += COST_AVERAGING * (sample - self._cost_per_estimate)
            self._recent_costs.append(sample)

    def ratio(self) -> float:
        """What a request not tokenized yet will cost per token of its door estimate: the
        moving average, or less where every one of the last `RECENT_COSTS` requests cost less
        (the guess only decides whether a request waits or is refused at once; waiting is
        bounded by --max-admission-wait either way)."""
        recent = self._recent_costs
        if len(recent) < RECENT_COSTS:
            return self._cost_per_estimate
        return min(self._cost_per_estimate, max(recent))

    def work(self, admitted_tokens: int, waiting_tokens: int, estimate: int) -> float:
        """The tokens the engine runs before room for a new request of `estimate` is made:
        the admitted and waiting requests at what they will really cost (the ones not
        tokenized yet at what tokenized ones have cost over their estimates), and the new one
        at its estimate (what it will reserve)."""
        guessed = self.unpriced + waiting_tokens
        return admitted_tokens - self.unpriced + self.ratio() * guessed + estimate
