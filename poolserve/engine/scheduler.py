"""The scheduler: owns the waiting items (a queue per request) and forms token-budgeted batches.

Clients `submit` items from any thread. Each runner thread calls `next_batch` when it is free:
the batch is formed at that moment (padding-aware token budget, length-sorted window around a
seed item, cancelled items dropped), so it holds everything that arrived while the runner's
previous batch ran. The seed comes from the request with the fewest items left to run, among all
that wait: small requests overtake large ones (however many of those wait), which fill the rest
of each batch, the one nearest to done first. Forming the batch earlier, while the
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

Which items a batch takes, within its padded-token budget (length buckets, packed batches of
short inputs), is batch_picking.py's.

The scheduler also counts the tokens in work (waiting, or in a batch that has not ended) and the
most there ever were: what admission control promises to bound, measured where the work is.

Priority lanes come before all of that (the seed is of the highest lane waiting): how lower
lanes age, their bound, slices and the express runner (`next_express_batch`): engine/lanes.py.

Runners also run small requests' preparations (`prepare`, engine/preparations.py) before they
form their next batch. One condition variable wakes the runners; nothing polls.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable

from poolserve.config.priorities import is_background
from poolserve.engine.batch_picking import choose, head_window
from poolserve.engine.lanes import in_turn, one_side, slice_budget
from poolserve.engine.preparations import Preparation, Preparations, Tokenizing
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import Assignment, WorkItem
from poolserve.models.kinds import Head


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
        lend_tokens: int = 0,
        bucket_padding_tokens: int | None = None,
        packs: Callable[[Head], bool] = lambda head: False,
        background_slice: float = 0.0,
        express: bool = False,
        tokenizing: Tokenizing | None = None,
    ) -> None:
        self._max_batch_tokens = max_batch_tokens
        # Whether an express runner takes the default lane and above beside background batches
        # (then no batch mixes the two: lanes.py's `one_side`).
        self._express = express
        # Seconds a batch may run while background work waits (0: no slices), and when the
        # last item of the default lane or above was submitted.
        self._background_slice = background_slice
        self._foreground_at = -math.inf
        # Padding one item may add to a batch before the batch is cut there; None: never cut.
        self._bucket_padding = bucket_padding_tokens
        # Whether a head's batches run packed (no padding to cut: their tokens their items').
        self._packs = packs
        self._max_batch_size = max_batch_size
        self._window = window
        self._stats = stats
        # Batches of at least this many padded tokens borrow idle runners; 0: never.
        self._lend_tokens = lend_tokens
        lock = threading.Lock()
        self._condition = threading.Condition(lock)
        # Signals each change of `_idle`, for `wait_for_idle_runners` (never wakes a runner).
        self._idle_changed = threading.Condition(lock)
        # The waiting items, one queue per request (in order of arrival), and how many in all.
        self._waiting: dict[int, deque[WorkItem]] = {}
        self._waiting_items = 0
        # Waiting items by lane (priority).
        self._lane_items: Counter[int] = Counter()
        # Batches formed so far, and by request the count when it last had an item in one (or
        # began to wait): how many batches in a row have passed it over is the difference.
        self._batches_formed = 0
        self._last_served: dict[int, int] = {}
        # Tokens of the waiting items, of the items in batches not yet ended, and the most
        # tokens ever in work at once.
        self._waiting_tokens = 0
        self._running_tokens = 0
        self._peak_tokens = 0
        self._closed = False
        # Runners blocked in `next_batch`, and how many of those are lent to a running batch.
        self._idle = 0
        self._lent = 0
        # Small requests' preparations waiting for a runner (`prepare`), and their tokenizing.
        self._preparing = Preparations(tokenizing)
        # The express runner (`next_express_batch`): whether it waits for work, what wakes it,
        # and the batches running that hold background items (only those leave it work).
        self._express_idle = False
        self._express_wake = threading.Condition(lock)
        self._background_running = 0

    # -- called from any thread -------------------------------------------------------------

    def submit(self, items: Iterable[WorkItem]) -> None:
        with self._condition:
            if self._closed:
                raise SchedulerClosedError("the engine is shutting down")
            foreground = False
            for item in items:
                foreground = foreground or not is_background(item.group.priority)
                queue = self._waiting.get(id(item.group))
                if queue is None:
                    queue = self._waiting[id(item.group)] = deque()
                    self._last_served[id(item.group)] = self._batches_formed
                queue.append(item)
                self._lane_items[item.group.priority] += 1
                self._waiting_items += 1
                self._waiting_tokens += item.cost
                item.group.submitted += 1
            if foreground:
                self._foreground_at = time.monotonic()
            self._peak_tokens = max(self._peak_tokens, self._waiting_tokens + self._running_tokens)
            if foreground and self._express_may_take():
                self._express_wake.notify()
            elif not self._preparing.on_this_thread():  # (it batches them next)
                self._condition.notify()

    def prepare(
        self, priority: int, inputs: int, preparation: Preparation, *, wake: bool = True
    ) -> None:
        """Have a runner run a small request's `preparation` first: an idle one is woken (by
        the caller's `wake_preparers` soon, once for several, without `wake`)."""
        with self._condition:
            if self._closed:
                raise SchedulerClosedError("the engine is shutting down")
            self._preparing.add(priority, inputs, preparation)
        if wake:
            self.wake_preparers()

    def wake_preparers(self) -> None:
        """Wake an idle runner for the preparations waiting, unless a busy one is back soon."""
        with self._condition:
            if not self._preparing:
                return
            ends_in = self._running_tokens * self._stats.seconds_per_token
            if self._idle > self._lent and self._preparing.wake_for(ends_in):
                self._condition.notify()
            elif self._express_may_take():
                self._express_wake.notify()

    def close(self) -> None:
        """Accept no more work; the queue drains, then `next_batch` returns None."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            self._express_wake.notify_all()

    def abort(self) -> list[WorkItem]:
        """Stop at once: return every waiting item so that their groups can be failed."""
        with self._condition:
            self._closed = True
            items = [item for queue in self._waiting.values() for item in queue]
            dropped = self._preparing.take()
            self._waiting.clear()
            self._last_served.clear()
            self._lane_items.clear()
            self._waiting_items = 0
            self._waiting_tokens = 0
            self._condition.notify_all()
            self._express_wake.notify_all()
        for preparation in dropped:
            preparation.dropped()
        return items

    @property
    def queued_items(self) -> int:
        return self._waiting_items + self._preparing.total_inputs

    @property
    def queued_tokens(self) -> int:
        return self._waiting_tokens

    def queued_by_lane(self) -> dict[int, int]:
        """Waiting items by lane (priority), the lanes with none left out."""
        with self._condition:
            lanes = self._lane_items + self._preparing.inputs
            return {lane: count for lane, count in sorted(lanes.items()) if count}

    @property
    def tokens_in_work(self) -> int:
        """Tokens waiting or in a batch that has not ended."""
        return self._waiting_tokens + self._running_tokens

    @property
    def peak_tokens_in_work(self) -> int:
        """The most tokens ever in work at once."""
        return self._peak_tokens

    def wait_for_idle_runners(self, count: int, timeout: float) -> bool:
        """Block until exactly `count` runners wait in `next_batch` (a hook for tests)."""
        with self._idle_changed:
            return self._idle_changed.wait_for(lambda: self._idle == count, timeout)

    def _set_idle(self, idle: int) -> None:
        self._idle = idle
        self._idle_changed.notify_all()

    def drain(self, runners: int) -> list[list[WorkItem]]:
        """Every waiting item popped as the batches `runners` free runners would take them one
        after another (each sharing what waits with those still free), without waiting for any
        (`--backend auto` times a candidate over these: backends/choice/trial.py)."""
        batches: list[list[WorkItem]] = []
        with self._condition:
            while self._waiting:
                items = self._form_batch(share=max(1, runners - len(batches)))
                if items:
                    batches.append(items)
        return batches

    # -- the runner threads -----------------------------------------------------------------

    def next_batch(self) -> Assignment | None:
        """Block until work is waiting and pop the next batch; None once closed and drained."""
        with self._condition:
            self._set_idle(self._idle + 1)
            while True:
                self._condition.wait_for(self._may_take)
                if self._prepared_waiting():
                    continue
                if not self._waiting:
                    self._set_idle(self._idle - 1)
                    return None
                # Other runners free to take work now: they share what waits with this one.
                peers = max(0, self._idle - self._lent - 1)
                items = self._form_batch(share=1 + peers)
                if not items:
                    continue  # everything looked at was cancelled
                self._set_idle(self._idle - 1)
                background = any(is_background(item.group.priority) for item in items)
                assignment = Assignment(items, background=background)
                self._running_tokens += assignment.tokens
                self._background_running += background
                if self._express_may_take():
                    self._express_wake.notify()
                if self._waiting:
                    self._condition.notify()
                elif self._may_lend(assignment, peers):
                    self._lent += peers
                    assignment = Assignment(items, borrowed=peers, background=background)
                return assignment

    def batch_ended(self, assignment: Assignment) -> None:
        """A runner is done with `assignment`: its tokens leave the work, and the runners lent
        to it may take work again."""
        with self._condition:
            self._running_tokens -= assignment.tokens
            self._background_running -= assignment.background
            if assignment.borrowed:
                self._lent = max(0, self._lent - assignment.borrowed)
                self._condition.notify_all()
            elif self._preparing and self._idle > self._lent:  # left for a runner that may
                self._condition.notify()  # not come back (`wake_for`): the express one, or dead

    def next_express_batch(self) -> Assignment | None:
        """The express runner's `next_batch`: block until work of the default lane or above
        waits while a background batch runs, then run its preparations or pop a batch of it
        (no background items); None once closed."""
        with self._condition:
            self._express_idle = True
            try:
                while True:
                    self._express_wake.wait_for(lambda: self._closed or self._express_may_take())
                    if self._closed:
                        return None
                    preparations = self._preparing.take(foreground_only=True)
                    if preparations:
                        self._preparing.run_unlocked(self._condition, preparations, counted=False)
                        continue
                    items = self._form_batch(share=1, foreground_only=True)
                    if items:
                        assignment = Assignment(items)
                        self._running_tokens += assignment.tokens
                        return assignment
            finally:
                self._express_idle = False

    def _express_may_take(self) -> bool:
        """Whether foreground work waits that the express runner should take: a background batch
        runs (the runners then run at a lower OS priority: an idle one would run it slower)."""
        return (
            self._express_idle
            and self._background_running > 0
            and (
                any(count for lane, count in self._lane_items.items() if not is_background(lane))
                or self._preparing.has_foreground()
            )
        )

    def _may_lend(self, assignment: Assignment, peers: int) -> bool:
        """Lend idle runners' cores to a large batch that is all the work there is: nothing else
        waits, and its requests have no items still being tokenized (their next chunk would
        otherwise find the idle runners lent, and wait)."""
        return (
            peers > 0
            and self._lend_tokens > 0
            and assignment.padded_tokens >= self._lend_tokens
            and all(
                item.group.submitted + item.group.cached == item.group.items
                for item in assignment.items
            )
        )

    def _may_take(self) -> bool:
        return self._closed or (bool(self._waiting or self._preparing) and self._idle > self._lent)

    def _prepared_waiting(self) -> bool:
        """Run the waiting preparations, if any, outside the lock (they submit), not idle."""
        if not self._preparing:
            return False
        self._set_idle(self._idle - 1)
        try:
            self._preparing.run_unlocked(self._condition, self._preparing.take())
        finally:
            self._set_idle(self._idle + 1)
        return True

    def _form_batch(self, share: int, foreground_only: bool = False) -> list[WorkItem]:
        """Pop a batch: the oldest item of the request with the fewest items left, with that
        request's waiting items of its head closest to it in length, then (while the batch has
        room) the next requests' in the same order, each request's items closest in length
        first; at most 1/`share` of the items looked at, when runners share them."""
        self._drop_finished()
        if not self._waiting:
            return []

        waiting = list(self._waiting.values())
        if foreground_only:
            waiting = [queue for queue in waiting if not is_background(queue[0].group.priority)]
        if not waiting:
            return []
        queues = in_turn(waiting, self._batches_formed, self._last_served)
        if self._express and not foreground_only:
            queues = one_side(queues, express_free=self._express_idle)
        budget = self._max_batch_tokens
        if self._background_slice and not foreground_only:
            rate = self._stats.runner_token_rate
            budget = slice_budget(queues, budget, self._background_slice, self._foreground_at, rate)
        window = head_window(queues, self._window)
        limit = min(self._max_batch_size, math.ceil(sum(map(len, window)) / share))
        chosen = choose(window, limit, budget, self._packs, self._bucket_padding)
        self._take(chosen)
        return chosen

    def _drop_finished(self) -> None:
        """Forget the waiting items of requests that were cancelled or failed."""
        skipped = 0
        for key, queue in list(self._waiting.items()):
            if queue[0].group.finished:
                skipped += len(queue)
                self._lane_items[queue[0].group.priority] -= len(queue)
                self._waiting_tokens -= sum(item.cost for item in queue)
                del self._waiting[key]
                self._last_served.pop(key, None)
        if skipped:
            self._waiting_items -= skipped
            self._stats.items_were_skipped(skipped)

    def _take(self, chosen: list[WorkItem]) -> None:
        """Remove `chosen` from their requests' queues, keeping the others in order; the batch
        is one more that passed over every other waiting request."""
        taken = {id(item) for item in chosen}
        self._batches_formed += 1
        for item in chosen:
            self._lane_items[item.group.priority] -= 1
        for key in {id(item.group) for item in chosen}:
            queue = self._waiting[key]
            left = deque(item for item in queue if id(item) not in taken)
            if left:
                self._waiting[key] = left
                self._last_served[key] = self._batches_formed
            else:
                del self._waiting[key]
                del self._last_served[key]
        self._waiting_items -= len(chosen)
        self._waiting_tokens -= sum(item.cost for item in chosen)
