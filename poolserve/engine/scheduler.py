"""The scheduler: owns the queue of waiting items and forms token-budgeted batches from it.

Clients `submit` items from any thread. Each runner thread calls `next_batch` when it is free:
the batch is formed at that moment (padding-aware token budget, length-sorted window around a
seed item, cancelled items dropped), so it holds everything that arrived while the runner's
previous batch ran. The seed comes from the request with the fewest items waiting: small requests
overtake large ones, which fill the rest of each batch. Forming the batch earlier, while the
runner is busy, was measured to halve batch sizes at moderate concurrency on CPU.

With several runners:
- a runner takes its fair share of what waits: if other runners are idle, the waiting items are
  split between them rather than all run on one thread while the others sleep;
- a runner that leaves items behind wakes the next idle runner (`submit` wakes only one);
- a large batch (at least `lend_tokens` padded tokens) that is all the work there is (nothing
  else waits, and its requests are wholly submitted) borrows the runners that are idle: they
  take no batch until it has ended (`batch_ended`), and their cores run it with the lender's
  (`Assignment.borrowed`). A lone long passage thus uses every core, while under load, when no
  runner is idle or more work is coming, every runner keeps to its own threads.

The scheduler also counts the tokens in work (waiting, or in a batch that has not ended) and the
most there ever were: what admission control promises to bound, measured where the work is.

One condition variable wakes the runners; nothing polls.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

from poolserve.engine.stats import EngineStats
from poolserve.engine.work import WorkItem


class SchedulerClosedError(Exception):
    """Raised by `submit` once the scheduler no longer accepts work."""


@dataclass(frozen=True)
class Assignment:
    """A batch for one runner, and how many idle runners lend it their cores until it is done
    (the runner hands them back with `Scheduler.batch_ended`)."""

    items: list[WorkItem]
    borrowed: int = 0

    @property
    def padded_tokens(self) -> int:
        return len(self.items) * max(item.length for item in self.items)

    @property
    def tokens(self) -> int:
        return sum(item.length for item in self.items)


class Scheduler:
    def __init__(
        self,
        *,
        max_batch_tokens: int,
        max_batch_size: int,
        window: int,
        stats: EngineStats,
        lend_tokens: int = 0,
    ) -> None:
        self._max_batch_tokens = max_batch_tokens
        self._max_batch_size = max_batch_size
        self._window = window
        self._stats = stats
        # Batches of at least this many padded tokens borrow idle runners; 0: never.
        self._lend_tokens = lend_tokens
        lock = threading.Lock()
        self._condition = threading.Condition(lock)
        # Signals each change of `_idle`, for `wait_for_idle_runners` (never wakes a runner).
        self._idle_changed = threading.Condition(lock)
        self._waiting: deque[WorkItem] = deque()
        # Tokens of the waiting items, of the items in batches not yet ended, and the most
        # tokens ever in work at once.
        self._waiting_tokens = 0
        self._running_tokens = 0
        self._peak_tokens = 0
        self._closed = False
        # Runners blocked in `next_batch`, and how many of those are lent to a running batch.
        self._idle = 0
        self._lent = 0

    # -- called from any thread -------------------------------------------------------------

    def submit(self, items: Iterable[WorkItem]) -> None:
        with self._condition:
            if self._closed:
                raise SchedulerClosedError("the engine is shutting down")
            for item in items:
                self._waiting.append(item)
                self._waiting_tokens += item.length
                item.group.submitted += 1
            self._peak_tokens = max(self._peak_tokens, self._waiting_tokens + self._running_tokens)
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

    @property
    def tokens_in_work(self) -> int:
        """Tokens waiting or in a batch that has not ended."""
        return self._waiting_tokens + self._running_tokens

    @property
    def peak_tokens_in_work(self) -> int:
        """The most tokens ever in work at once."""
        return self._peak_tokens

    @property
    def idle_runners(self) -> int:
        """Runners waiting in `next_batch` (lent ones included)."""
        return self._idle

    def wait_for_idle_runners(self, count: int, timeout: float) -> bool:
        """Block until exactly `count` runners wait in `next_batch` (a hook for tests)."""
        with self._idle_changed:
            return self._idle_changed.wait_for(lambda: self._idle == count, timeout)

    def _set_idle(self, idle: int) -> None:
        self._idle = idle
        self._idle_changed.notify_all()

    # -- the runner threads -----------------------------------------------------------------

    def next_batch(self) -> Assignment | None:
        """Block until work is waiting and pop the next batch; None once closed and drained."""
        with self._condition:
            self._set_idle(self._idle + 1)
            while True:
                self._condition.wait_for(self._may_take)
                if not self._waiting:
                    self._set_idle(self._idle - 1)
                    return None
                # Other runners free to take work now: they share what waits with this one.
                peers = max(0, self._idle - self._lent - 1)
                items = self._form_batch(share=1 + peers)
                if not items:
                    continue  # everything looked at was cancelled
                self._set_idle(self._idle - 1)
                assignment = Assignment(items)
                self._running_tokens += assignment.tokens
                if self._waiting:
                    self._condition.notify()
                elif self._may_lend(assignment, peers):
                    self._lent += peers
                    assignment = Assignment(items, borrowed=peers)
                return assignment

    def batch_ended(self, assignment: Assignment) -> None:
        """A runner is done with `assignment`: its tokens leave the work, and the runners lent
        to it may take work again."""
        with self._condition:
            self._running_tokens -= assignment.tokens
            if assignment.borrowed:
                self._lent = max(0, self._lent - assignment.borrowed)
                self._condition.notify_all()

    def _may_lend(self, assignment: Assignment, peers: int) -> bool:
        """Lend idle runners' cores to a large batch that is all the work there is: nothing else
        waits, and its requests have no items still being tokenized (their next chunk would
        otherwise find the idle runners lent, and wait)."""
        return (
            peers > 0
            and self._lend_tokens > 0
            and assignment.padded_tokens >= self._lend_tokens
            and all(item.group.submitted == item.group.size for item in assignment.items)
        )

    def _may_take(self) -> bool:
        return self._closed or (bool(self._waiting) and self._idle > self._lent)

    def _form_batch(self, share: int) -> list[WorkItem]:
        """Pop a batch: the oldest live item plus the waiting items of its head closest to it in
        length; at most 1/`share` of the live items looked at, when runners share them."""
        waiting = self._waiting
        window: list[WorkItem] = []
        skipped = 0
        while waiting and len(window) < self._window:
            item = waiting.popleft()
            if item.group.finished:
                skipped += 1
                self._waiting_tokens -= item.length
            else:
                window.append(item)
        if skipped:
            self._stats.items_were_skipped(skipped)
        if not window:
            return []
        # The seed: the oldest item of the request with the fewest items waiting, so that a
        # small request is never stuck behind a large one that arrived first (the large one
        # still fills the rest of the batch). One head per batch: the seed's.
        waiting_per_group = Counter(id(item.group) for item in window)
        seed = min(window, key=lambda item: waiting_per_group[id(item.group)])
        same_head = [item for item in window if item.head == seed.head]
        by_length = sorted(same_head, key=lambda item: item.length)
        limit = min(self._max_batch_size, math.ceil(len(by_length) / share))
        chosen = self._pick_around(by_length, by_length.index(seed), limit)
        taken = {id(item) for item in chosen}
        waiting.extendleft(reversed([item for item in window if id(item) not in taken]))
        self._waiting_tokens -= sum(item.length for item in chosen)
        return chosen

    def _pick_around(self, by_length: list[WorkItem], start: int, limit: int) -> list[WorkItem]:
        """Grow a run of the sorted window around `start`, adding whichever neighbour pads least,
        up to `limit` items."""
        low = high = start
        longest = by_length[start].length
        count = 1
        while count < limit:
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
