"""The scheduler: owns the queue of waiting items and forms token-budgeted batches from it.

Clients `submit` items from any thread. The runner thread calls `next_batch` when it is free: the
batch is formed at that moment (padding-aware token budget, length-sorted window around a seed
item, cancelled items dropped), so it holds everything that arrived while the previous batch
ran. The seed comes from the request with the fewest items waiting: small requests overtake
large ones, which fill the rest of each batch. Forming the batch earlier, while the runner is
busy, was measured to halve batch sizes at moderate concurrency on CPU. One condition variable
wakes the runner; nothing polls.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable

from poolserve.engine.stats import EngineStats
from poolserve.engine.work import WorkItem


class SchedulerClosedError(Exception):
    """Raised by `submit` once the scheduler no longer accepts work."""


class Scheduler:
    def __init__(
        self,
        *,
        max_batch_tokens: int,
        max_batch_size: int,
        window: int,
        stats: EngineStats,
    ) -> None:
        self._max_batch_tokens = max_batch_tokens
        self._max_batch_size = max_batch_size
        self._window = window
        self._stats = stats
        self._condition = threading.Condition()
        self._waiting: deque[WorkItem] = deque()
        # Tokens of the waiting items: what admission control bounds.
        self._waiting_tokens = 0
        self._closed = False

    # -- called from any thread -------------------------------------------------------------

    def submit(self, items: Iterable[WorkItem]) -> None:
        with self._condition:
            if self._closed:
                raise SchedulerClosedError("the engine is shutting down")
            for item in items:
                self._waiting.append(item)
                self._waiting_tokens += item.length
            self._condition.notify()

    def close(self) -> None:
        """Accept no more work; the queue drains, then `next_batch` returns None."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def abort(self) -> list[WorkItem]:
        """Stop at once: return every waiting item so that their groups can be failed."""
        with self._condition:
            self._closed = True
            items = list(self._waiting)
            self._waiting.clear()
            self._waiting_tokens = 0
            self._condition.notify_all()
        return items

    @property
    def queued_items(self) -> int:
        return len(self._waiting)

    @property
    def queued_tokens(self) -> int:
        return self._waiting_tokens

    # -- the runner thread ------------------------------------------------------------------

    def next_batch(self) -> list[WorkItem] | None:
        """Block until work is waiting and pop the next batch; None once closed and drained."""
        with self._condition:
            while True:
                self._condition.wait_for(lambda: bool(self._waiting) or self._closed)
                if not self._waiting:
                    return None
                batch = self._form_batch()
                if batch:
                    return batch

    def _form_batch(self) -> list[WorkItem]:
        """Pop a batch: the oldest live item plus the waiting items of its head closest to it in
        length."""
        waiting = self._waiting
        window: list[WorkItem] = []
        while waiting and len(window) < self._window:
            item = waiting.popleft()
            if item.group.finished:
                self._stats.items_skipped += 1
                self._waiting_tokens -= item.length
            else:
                window.append(item)
        if not window:
            return []
        # The seed: the oldest item of the request with the fewest items waiting, so that a
        # small request is never stuck behind a large one that arrived first (the large one
        # still fills the rest of the batch). One head per batch: the seed's.
        waiting_per_group = Counter(id(item.group) for item in window)
        seed = min(window, key=lambda item: waiting_per_group[id(item.group)])
        same_head = [item for item in window if item.head == seed.head]
        by_length = sorted(same_head, key=lambda item: item.length)
        chosen = self._pick_around(by_length, by_length.index(seed))
        taken = {id(item) for item in chosen}
        waiting.extendleft(reversed([item for item in window if id(item) not in taken]))
        self._waiting_tokens -= sum(item.length for item in chosen)
        return chosen

    def _pick_around(self, by_length: list[WorkItem], start: int) -> list[WorkItem]:
        """Grow a run of the sorted window around `start`, adding whichever neighbour pads least."""
        low = high = start
        longest = by_length[start].length
        count = 1
        while count < self._max_batch_size:
            left = by_length[low - 1] if low > 0 else None
            right = by_length[high + 1] if high + 1 < len(by_length) else None
            left_fits = left is not None and (count + 1) * longest <= self._max_batch_tokens
            right_fits = right is not None and (count + 1) * right.length <= self._max_batch_tokens
            if left_fits and right_fits:
                assert left is not None and right is not None
                take_left = longest - left.length <= (right.length - longest) * count
            elif left_fits or right_fits:
                take_left = left_fits
            else:
                break
            if take_left:
                low -= 1
            else:
                high += 1
                longest = by_length[high].length
            count += 1
        return by_length[low : high + 1]
