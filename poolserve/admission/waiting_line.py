"""The line at the door: requests waiting for room (control.py), higher lanes first
(engine/lanes.py), each lane in arrival order, and who goes in when room is made.

Not thread-safe by itself: the control calls it under its lock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from poolserve.admission.tickets import MAX_PASSED_OVER, Waiter


class WaitingLine:
    def __init__(self) -> None:
        self._waiters: deque[Waiter] = deque()
        # The sum of their door estimates.
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._waiters)

    def by_lane(self) -> dict[int, int]:
        return dict(sorted(Counter(waiter.priority for waiter in self._waiters).items()))

    def tokens_ahead(self, priority: int) -> int:
        """The estimates of the requests of lane `priority` or a higher one."""
        return sum(waiter.estimate for waiter in self._waiters if waiter.priority <= priority)

    def holds_lane(self, priority: int) -> bool:
        """Whether a request of lane `priority` or a higher one waits (a new request of that
        lane then lines up behind it)."""
        return any(waiter.priority <= priority for waiter in self._waiters)

    def join(self, waiter: Waiter) -> None:
        """`waiter` lines up behind every request of its lane or a higher one, before those of
        lower lanes."""
        self._waiters.append(waiter)
        self.tokens += waiter.estimate
        if any(other.priority > waiter.priority for other in self._waiters):
            ordered = sorted(self._waiters, key=lambda each: each.priority)  # stable: in arrival
            self._waiters.clear()
            self._waiters.extend(ordered)

    def leave(self, waiter: Waiter) -> None:
        waiter.waiting = False
        self._waiters.remove(waiter)
        self.tokens -= waiter.estimate

    def let_in(
        self,
        open_door: Callable[[], bool],
        fits: Callable[[Waiter], bool],
        admit: Callable[[Waiter], None],
    ) -> list[Waiter]:
        """Admit (`admit`) the waiting requests that `fit`, in line order, while the door is
        open (`open_door`: room for one more request). A request that does not fit lets later,
        smaller ones pass it only MAX_PASSED_OVER times; then nobody passes it until it is in."""
        granted: list[Waiter] = []
        passed: list[Waiter] = []
        for waiter in list(self._waiters):
            if not open_door():
                break
            if not fits(waiter):
                if waiter.passed_over >= MAX_PASSED_OVER:
                    break
                passed.append(waiter)
                continue
            for earlier in passed:
                earlier.passed_over += 1
            self.leave(waiter)
            admit(waiter)
            granted.append(waiter)
            if any(earlier.passed_over >= MAX_PASSED_OVER for earlier in passed):
                break
        return granted
