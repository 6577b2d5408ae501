"""Scheduler batch formation: padding-aware token budget, batch size, seed choice, cancellation.

The test plays the runner: it calls `next_batch` until the queue is drained. Everything is
submitted and the scheduler closed first, so the sequence of batches is deterministic.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import Future

import pytest

from poolserve.engine.collate import text_item
from poolserve.engine.lanes import MAX_PASSED_OVER
from poolserve.engine.preparations import (
    BACK_SOON_SECONDS,
    SHARED_PREPARATION_INPUTS,
    Preparation,
)
from poolserve.engine.scheduler import Assignment, Scheduler, SchedulerClosedError
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem

WAIT = 5


def make_scheduler(
    *,
    max_batch_tokens: int,
    max_batch_size: int,
    window: int = 1024,
    lend_tokens: int = 0,
    bucket_padding_tokens: int | None = None,
    packed: bool = False,
) -> tuple[Scheduler, EngineStats]:
    stats = EngineStats()
    scheduler = Scheduler(
        max_batch_tokens=max_batch_tokens,
        max_batch_size=max_batch_size,
        window=window,
        stats=stats,
        lend_tokens=lend_tokens,
        bucket_padding_tokens=bucket_padding_tokens,
        packs=lambda head: packed and head == "embed",
    )
    return scheduler, stats


def drain(scheduler: Scheduler, items: list[WorkItem]) -> list[list[WorkItem]]:
    """Submit, close, and take every batch the scheduler forms, as the runner would."""
    scheduler.submit(items)
    scheduler.close()
    batches = []
    while (batch := take(scheduler)) is not None:
        batches.append(batch)
    return batches


def take(scheduler: Scheduler) -> list[WorkItem] | None:
    """The next batch's items, as a runner would take them; None once closed and drained."""
    assignment = scheduler.next_batch()
    return None if assignment is None else assignment.items


def next_batch_in_thread(scheduler: Scheduler) -> Future[Assignment | None]:
    """Call the blocking `next_batch` on another thread, as a runner does."""
    result: Future[Assignment | None] = Future()
    threading.Thread(target=lambda: result.set_result(scheduler.next_batch()), daemon=True).start()
    return result


def items_of_lengths(lengths: list[int], group: RequestGroup | None = None) -> list[WorkItem]:
    group = group or RequestGroup(len(lengths))
    return [text_item(group, index, [1] * length) for index, length in enumerate(lengths)]


def random_workload(rng: random.Random, max_len: int) -> tuple[list[WorkItem], set[int]]:
    """Items of random lengths in groups of 1 to 5; returns the items and the cancelled groups."""
    items: list[WorkItem] = []
    cancelled: set[int] = set()
    for _ in range(rng.randint(1, 60)):
        size = rng.randint(1, 5)
        group = RequestGroup(size)
        if rng.random() < 0.2:
            group.cancel()
            cancelled.add(id(group))
        items += [text_item(group, i, [7] * rng.randint(1, max_len)) for i in range(size)]
    return items, cancelled


@pytest.mark.parametrize("seed", range(40))
def test_random_workloads_respect_every_limit(seed: int) -> None:
    rng = random.Random(seed)
    max_len = rng.choice([8, 64, 256])
    max_batch_tokens = rng.choice([max_len, max_len + 1, 3 * max_len, 16384])
    max_batch_size = rng.choice([1, 2, 5, 32, 256])
    window = rng.choice([1, 3, 16, 1024])
    items, cancelled = random_workload(rng, max_len)
    scheduler, stats = make_scheduler(
        max_batch_tokens=max_batch_tokens, max_batch_size=max_batch_size, window=window
    )

    batches = drain(scheduler, items)

    live = [item for item in items if id(item.group) not in cancelled]
    remaining = list(live)  # in submission order
    passed: Counter[int] = Counter()  # batches in a row without the request, by request
    for batch in batches:
        # The seed: the oldest waiting item of the request with the fewest items waiting (of
        # all that wait), so small requests overtake large ones; but first a request passed
        # over MAX_PASSED_OVER batches in a row (the longest passed over first).
        waiting = Counter(id(item.group) for item in remaining)

        def turn(item: WorkItem, waiting: Counter[int] = waiting) -> tuple[int, int]:
            count = passed[id(item.group)]
            return (0, -count) if count >= MAX_PASSED_OVER else (1, waiting[id(item.group)])

        seed = min(remaining, key=turn)
        assert batch, "an empty batch was handed to the runner"
        longest = max(item.cost for item in batch)
        assert len(batch) * longest <= max_batch_tokens, "padded tokens exceed the budget"
        assert len(batch) <= max_batch_size
        assert all(id(item.group) not in cancelled for item in batch)
        assert any(item is seed for item in batch), "the seed item was left behind"
        taken = {id(item) for item in batch}
        served = {id(item.group) for item in batch}
        for group in waiting:
            passed[group] = 0 if group in served else passed[group] + 1
        remaining = [item for item in remaining if id(item) not in taken]
    assert remaining == []
    delivered = [id(item) for batch in batches for item in batch]
    assert sorted(delivered) == sorted(id(item) for item in live), "lost or duplicated items"
    assert stats.items_skipped == len(items) - len(live)


def test_batch_is_cut_by_padded_tokens_not_real_tokens() -> None:
    # 3 items of 100 and 1 of 10: 4 x 100 padded = 400 > 399, so at most 3 fit together.
    scheduler, _ = make_scheduler(max_batch_tokens=399, max_batch_size=256)
    batches = drain(scheduler, items_of_lengths([10, 100, 100, 100]))
    assert [len(batch) for batch in batches] == [3, 1]
    assert max(item.cost for item in batches[0]) * 3 <= 399


def test_similar_lengths_are_batched_together() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=2)
    batches = drain(scheduler, items_of_lengths([10, 200, 11, 199]))
    assert [sorted(item.cost for item in batch) for batch in batches] == [[10, 11], [199, 200]]


def test_max_batch_size_is_respected_for_tiny_items() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=4)
    batches = drain(scheduler, items_of_lengths([3] * 10))
    assert [len(batch) for batch in batches] == [4, 4, 2]


def test_cancelled_items_are_skipped_and_counted() -> None:
    cancelled_group = RequestGroup(3)
    live_group = RequestGroup(2)
    cancelled_group.cancel()
    items = [
        text_item(cancelled_group, 0, [1] * 5),
        text_item(live_group, 0, [1] * 5),
        text_item(cancelled_group, 1, [1] * 5),
        text_item(live_group, 1, [1] * 5),
        text_item(cancelled_group, 2, [1] * 5),
    ]
    scheduler, stats = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    batches = drain(scheduler, items)
    assert [[item.group for item in batch] for batch in batches] == [[live_group, live_group]]
    assert stats.items_skipped == 3


def test_only_cancelled_work_forms_no_batch() -> None:
    group = RequestGroup(2)
    group.cancel()
    scheduler, stats = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    assert drain(scheduler, items_of_lengths([4, 4], group)) == []
    assert stats.items_skipped == 2


def test_submit_after_close_is_refused() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    scheduler.close()
    with pytest.raises(SchedulerClosedError):
        scheduler.submit(items_of_lengths([3]))


def test_next_batch_waits_for_work_and_wakes_on_submit() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    pending = next_batch_in_thread(scheduler)
    with pytest.raises(TimeoutError):
        pending.result(0.2)  # nothing submitted yet: the runner must be waiting, not spinning
    group = RequestGroup(2)
    scheduler.submit(items_of_lengths([5, 6], group))
    batch = pending.result(WAIT)
    assert batch is not None
    assert [item.cost for item in batch.items] == [5, 6]


def test_close_wakes_a_waiting_runner_with_none() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    pending = next_batch_in_thread(scheduler)
    scheduler.close()
    assert pending.result(WAIT) is None


def test_close_drains_the_queue_first() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=1)
    scheduler.submit(items_of_lengths([3, 4]))
    scheduler.close()
    assert [len(b) for b in iter(lambda: take(scheduler), None)] == [1, 1]


def test_abort_returns_the_waiting_items_and_stops() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    items = items_of_lengths([3, 4, 5])
    scheduler.submit(items)
    assert scheduler.queued_items == 3
    assert scheduler.abort() == items
    assert scheduler.queued_items == 0
    assert scheduler.next_batch() is None
    with pytest.raises(SchedulerClosedError):
        scheduler.submit(items_of_lengths([1]))


# -- several runners ---------------------------------------------------------------------------


def idle_runners(scheduler: Scheduler, count: int) -> list[Future[Assignment | None]]:
    """`count` runner threads blocked in `next_batch`, once the scheduler counts them idle."""
    pending = [next_batch_in_thread(scheduler) for _ in range(count)]
    assert scheduler.wait_for_idle_runners(count, WAIT)
    return pending


def test_idle_runners_share_what_waits() -> None:
    """Ten items and two idle runners: each takes half, instead of one running all ten while
    the other sleeps (the second is woken by the first, since submit wakes only one)."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    pending = idle_runners(scheduler, 2)
    scheduler.submit(items_of_lengths([5] * 10))
    batches = [future.result(WAIT) for future in pending]
    assert sorted(len(batch.items) for batch in batches if batch) == [5, 5]
    assert all(batch is not None and batch.borrowed == 0 for batch in batches)


def test_a_busy_runner_leaves_a_free_one_the_whole_queue() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    scheduler.submit(items_of_lengths([5] * 10))
    assignment = scheduler.next_batch()  # the only runner asking: nobody to share with
    assert assignment is not None and len(assignment.items) == 10


def test_a_large_lone_batch_borrows_the_idle_runners_until_it_gives_them_back() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256, lend_tokens=256)
    first, second = idle_runners(scheduler, 2)
    scheduler.submit(items_of_lengths([300]))
    assert scheduler.wait_for_idle_runners(1, WAIT)
    lender, lent = (first, second) if first.done() else (second, first)
    assignment = lender.result(WAIT)
    assert assignment is not None and assignment.borrowed == 1
    # The lent runner takes nothing while its cores run the large batch...
    scheduler.submit(items_of_lengths([4]))
    with pytest.raises(TimeoutError):
        lent.result(0.2)
    # ...and takes the waiting work as soon as they are given back.
    scheduler.batch_ended(assignment)
    taken = lent.result(WAIT)
    assert taken is not None and [item.cost for item in taken.items] == [4]


def test_small_batches_and_batches_with_work_behind_them_borrow_nothing() -> None:
    small, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=1, lend_tokens=256)
    pending = idle_runners(small, 2)
    small.submit(items_of_lengths([10]))
    assert small.wait_for_idle_runners(1, WAIT)
    assignment = next(future for future in pending if future.done()).result()
    assert assignment is not None and assignment.borrowed == 0
    small.close()

    shared, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=1, lend_tokens=256)
    pending = idle_runners(shared, 2)
    shared.submit(items_of_lengths([300, 300]))  # one each: nobody idle to borrow
    for future in pending:
        assignment = future.result(WAIT)
        assert assignment is not None and assignment.borrowed == 0
        assert len(assignment.items) == 1


def test_a_batch_whose_request_is_still_being_submitted_borrows_nothing() -> None:
    """The first chunk of a large request must not lock the idle runner out of the next one."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256, lend_tokens=256)
    first, second = idle_runners(scheduler, 2)
    group = RequestGroup(2)  # submitted in two chunks of one
    first_chunk, second_chunk = items_of_lengths([300, 300], group)
    scheduler.submit([first_chunk])
    assert scheduler.wait_for_idle_runners(1, WAIT)
    taker, other = (first, second) if first.done() else (second, first)
    assignment = taker.result(WAIT)
    assert assignment is not None and assignment.borrowed == 0
    scheduler.submit([second_chunk])
    taken = other.result(WAIT)
    assert taken is not None and taken.items == [second_chunk]


def test_a_small_request_behind_more_large_items_than_the_window_goes_first() -> None:
    """Thousands of items of large requests wait; a one-item request that arrives after them is
    in the next batch, whatever the window."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=16, window=64)
    large = [item for _ in range(4) for item in items_of_lengths([10] * 500)]
    scheduler.submit(large)
    small = items_of_lengths([12])
    scheduler.submit(small)
    first = take(scheduler)
    assert first is not None and small[0] in first
    assert len(first) == 16


def test_a_request_still_being_submitted_counts_all_its_items() -> None:
    """Of two large requests, the one with fewer items left runs first, even when the other has
    fewer items waiting so far because it is still being tokenized."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=64)
    nearly_done = items_of_lengths([10] * 300)
    scheduler.submit(nearly_done)
    big = RequestGroup(1000)
    scheduler.submit(items_of_lengths([10] * 100, group=big)[:100])
    for _ in range(3):
        batch = take(scheduler)
        assert batch is not None and all(item.group is nearly_done[0].group for item in batch)


def lengths_of(batches: list[list[WorkItem]]) -> list[list[int]]:
    return [sorted(item.cost for item in batch) for batch in batches]


def test_a_batch_is_cut_into_length_buckets_where_padding_would_not_pay() -> None:
    """One-sentence requests of real lengths: the seed's bucket goes first, each bucket padded
    by little; without a tolerance, one batch padded to 60."""
    lengths = [6, 60, 5, 58, 7, 20, 22, 5]
    requests = [items_of_lengths([length]) for length in lengths]
    scheduler, _ = make_scheduler(
        max_batch_tokens=16384, max_batch_size=256, bucket_padding_tokens=32
    )
    batches = drain(scheduler, [item for request in requests for item in request])
    # The seed is the oldest (length 6): 6 joins 5, 5 and 7 (padding 1 + 1 + 2); 20 would pad
    # four items by 13 each, so it starts another bucket, and 58 would pad two by 36. The next
    # seed is the oldest left, 60.
    assert lengths_of(batches) == [[5, 5, 6, 7], [58, 60], [20, 22]]
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    one = drain(scheduler, [item for length in lengths for item in items_of_lengths([length])])
    assert lengths_of(one) == [sorted(lengths)]


def test_a_zero_tolerance_gives_each_length_its_own_batch() -> None:
    scheduler, _ = make_scheduler(
        max_batch_tokens=16384, max_batch_size=256, bucket_padding_tokens=0
    )
    batches = drain(scheduler, items_of_lengths([3, 3, 4, 4, 4, 9]))
    assert sorted(lengths_of(batches)) == [[3, 3], [4, 4, 4], [9]]


def test_a_packed_head_is_not_cut_into_buckets_and_counts_real_tokens() -> None:
    """The lengths that buckets cut in three go in one packed batch; the budget counts real
    tokens (183 here; padded to 60, 8 items would count 480); another head is still cut, and
    so are long inputs."""
    lengths = [6, 60, 5, 58, 7, 20, 22, 5]
    scheduler, _ = make_scheduler(
        max_batch_tokens=183, max_batch_size=256, bucket_padding_tokens=32, packed=True
    )
    requests = [items_of_lengths([length]) for length in lengths]
    batches = drain(scheduler, [item for request in requests for item in request])
    assert lengths_of(batches) == [sorted(lengths)]
    scheduler, _ = make_scheduler(
        max_batch_tokens=100, max_batch_size=256, bucket_padding_tokens=32, packed=True
    )
    batches = drain(scheduler, [item for request in requests for item in request])
    assert all(sum(item.cost for item in batch) <= 100 for batch in batches)
    assert sorted(length for batch in lengths_of(batches) for length in batch) == sorted(lengths)
    scheduler, _ = make_scheduler(
        max_batch_tokens=16384, max_batch_size=256, bucket_padding_tokens=32, packed=True
    )
    group = RequestGroup(len(lengths))
    tokens = [text_item(group, i, [1] * n, head="token_embed") for i, n in enumerate(lengths)]
    assert len(drain(scheduler, tokens)) == 3
    scheduler, _ = make_scheduler(
        max_batch_tokens=16384, max_batch_size=256, bucket_padding_tokens=32, packed=True
    )
    mixed = [10, 200, 64, 100, 190, 5, 65]
    batches = drain(scheduler, items_of_lengths(mixed))
    # Short ones (at most 64 tokens) together; the long ones in buckets of their own.
    assert lengths_of(batches) == [[5, 10, 64], [190, 200], [100], [65]]


def test_a_large_request_under_a_steady_stream_of_small_ones_is_passed_over_a_bounded_time() -> (
    None
):
    """One item a batch, a new one-item request arriving after every batch: the small ones are
    always nearer to done, yet the large request gets a batch at least every
    MAX_PASSED_OVER + 1 batches."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=1)
    large = items_of_lengths([5] * 20)
    scheduler.submit(large)
    scheduler.submit(items_of_lengths([5]))
    served_large: list[int] = []
    for batch_number in range(60):
        batch = take(scheduler)
        assert batch is not None
        if batch[0].group is large[0].group:
            served_large.append(batch_number)
        scheduler.submit(items_of_lengths([5]))
    assert served_large, "the large request never ran"
    gaps = [b - a for a, b in zip([-1, *served_large], served_large, strict=False)]
    assert max(gaps) <= MAX_PASSED_OVER + 1, gaps
    assert len(served_large) >= 60 // (MAX_PASSED_OVER + 1)


# -- preparations run by the runners ------------------------------------------------------------


def test_a_runner_runs_what_waits_to_be_prepared_before_it_forms_its_batch() -> None:
    """Three requests' preparations queued while the runner was busy: the runner runs them
    all (higher lanes first), and its next batch holds what they submitted."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    ran: list[str] = []
    threads: list[str] = []

    def prepare(name: str, length: int) -> None:
        ran.append(name)
        threads.append(threading.current_thread().name)
        scheduler.submit(items_of_lengths([length]))

    never = pytest.fail
    scheduler.prepare(5, 1, Preparation(prepare, ("background", 3), never))
    scheduler.prepare(0, 1, Preparation(prepare, ("first", 4), never))
    scheduler.prepare(0, 1, Preparation(prepare, ("second", 5), never))
    # Their inputs wait for a runner as much as submitted items do (the queue depth says so).
    assert scheduler.queued_items == 3 and scheduler.queued_by_lane() == {0: 2, 5: 1}
    assignment = next_batch_in_thread(scheduler).result(WAIT)
    assert ran == ["first", "second", "background"]
    assert set(threads) == {threads[0]} and threads[0] != threading.current_thread().name
    assert assignment is not None and sorted(item.cost for item in assignment.items) == [3, 4, 5]


def test_a_runner_preparing_runs_the_small_preparations_that_come_meanwhile() -> None:
    """While a runner prepares, a small request's preparation leaves the idle runner asleep
    (a wake-up costs both threads a turn at the GIL) and so do the preparing runner's own
    submits: the preparing runner runs it next (then shares the batch with the idle one)."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    preparing, go_on = threading.Event(), threading.Event()
    ran: dict[str, str] = {}

    def first() -> None:
        ran["first"] = threading.current_thread().name
        preparing.set()
        assert go_on.wait(WAIT)
        scheduler.submit(items_of_lengths([3]))

    def small() -> None:
        ran["small"] = threading.current_thread().name
        scheduler.submit(items_of_lengths([4]))

    (runner,) = idle_runners(scheduler, 1)
    scheduler.prepare(0, 1, Preparation(first, (), pytest.fail))
    assert preparing.wait(WAIT)
    (idle,) = idle_runners(scheduler, 1)
    scheduler.prepare(0, 1, Preparation(small, (), pytest.fail))
    go_on.set()
    batches = [runner.result(WAIT), idle.result(WAIT)]
    assert ran["small"] == ran["first"]
    assert sorted(item.cost for batch in batches if batch for item in batch.items) == [3, 4]


def test_how_soon_a_batch_ends_is_judged_by_the_wall_time_batches_took() -> None:
    """Under load a runner waits on the GIL for most of a short batch: the estimate follows the
    wall time a token (a moving average), not the runner's CPU time."""
    stats = EngineStats(runner_count=1)
    stats.batch_started()
    stats.batch_ended(0, items=2, tokens=100, padded_tokens=100, seconds=0.01, cpu_seconds=0.001)
    assert stats.seconds_per_token == pytest.approx(1e-4)
    stats.batch_started()
    stats.batch_ended(0, items=2, tokens=100, padded_tokens=100, seconds=0.02, cpu_seconds=0.001)
    assert stats.seconds_per_token == pytest.approx(0.8 * 1e-4 + 0.2 * 2e-4)


@pytest.mark.parametrize("seconds_a_token", [1e-7, 1e-3])
def test_a_batch_that_ends_soon_takes_the_preparations_that_come_meanwhile(
    seconds_a_token: float,
) -> None:
    """A runner running a batch that ends within BACK_SOON_SECONDS at its recent seconds a token
    takes a small request's preparation next (the idle one sleeps on); a longer batch wakes
    the idle runner for it."""
    scheduler, stats = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    stats.seconds_per_token = seconds_a_token
    scheduler.submit(items_of_lengths([100]))
    running = take(scheduler)
    assert running is not None
    (idle,) = idle_runners(scheduler, 1)
    scheduler.prepare(0, 1, Preparation(scheduler.submit, (items_of_lengths([4]),), pytest.fail))
    if seconds_a_token * 100 < BACK_SOON_SECONDS:
        back = next_batch_in_thread(scheduler)  # the busy runner, done with its batch
        assignment = back.result(WAIT)
        assert assignment is not None and [item.cost for item in assignment.items] == [4]
        assert not idle.done()
        scheduler.close()
        assert idle.result(WAIT) is None
    else:
        assignment = idle.result(WAIT)
        assert assignment is not None and [item.cost for item in assignment.items] == [4]


def test_enough_inputs_wake_an_idle_runner_to_prepare_beside_a_busy_one() -> None:
    """Preparations holding SHARED_PREPARATION_INPUTS inputs wake the idle runner while
    another prepares: it tokenizes them meanwhile."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    preparing, go_on, large_ran = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        preparing.set()
        assert go_on.wait(WAIT)

    (runner,) = idle_runners(scheduler, 1)
    scheduler.prepare(0, 1, Preparation(first, (), pytest.fail))
    assert preparing.wait(WAIT)
    (idle,) = idle_runners(scheduler, 1)
    lengths = [2] * SHARED_PREPARATION_INPUTS

    def large() -> None:
        scheduler.submit(items_of_lengths(lengths))
        large_ran.set()

    scheduler.prepare(0, len(lengths), Preparation(large, (), pytest.fail))
    assert large_ran.wait(WAIT)  # while the first runner still prepares
    assignment = idle.result(WAIT)
    assert assignment is not None and len(assignment.items) == len(lengths)
    go_on.set()
    scheduler.close()
    assert runner.result(WAIT) is None


def test_an_idle_runner_is_woken_to_prepare() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    (pending,) = idle_runners(scheduler, 1)
    scheduler.prepare(
        0, 1, Preparation(lambda: scheduler.submit(items_of_lengths([7])), (), pytest.fail)
    )
    assignment = pending.result(WAIT)
    assert assignment is not None and [item.cost for item in assignment.items] == [7]


def test_a_preparation_queued_without_a_wake_waits_for_wake_preparers() -> None:
    """`prepare(wake=False)` (a request queued on an event loop) leaves the idle runner asleep:
    `wake_preparers`, once for every preparation the loop's turn queued, wakes it, and it runs
    them all into one batch."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    (pending,) = idle_runners(scheduler, 1)
    for length in (7, 8):
        submit = Preparation(scheduler.submit, (items_of_lengths([length]),), pytest.fail)
        scheduler.prepare(0, 1, submit, wake=False)
    assert scheduler.queued_items == 2 and scheduler.wait_for_idle_runners(1, 0)
    scheduler.wake_preparers()
    assignment = pending.result(WAIT)
    assert assignment is not None and sorted(item.cost for item in assignment.items) == [7, 8]
    scheduler.wake_preparers()  # nothing waits: nothing happens
    assert scheduler.queued_items == 0


def test_preparations_not_run_when_the_scheduler_aborts_are_dropped_and_more_refused() -> None:
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)
    dropped: list[int] = []
    for index in range(3):
        scheduler.prepare(
            0, 1, Preparation(pytest.fail, (), lambda index=index: dropped.append(index))
        )
    assert scheduler.abort() == []
    assert dropped == [0, 1, 2]
    with pytest.raises(SchedulerClosedError):
        scheduler.prepare(0, 1, Preparation(pytest.fail, (), pytest.fail))


def test_a_preparation_that_raises_leaves_the_runner_serving() -> None:
    """Something not an Exception escaping a preparation (it has failed its request first) is
    logged; the runner runs the next one and forms its batch."""
    scheduler, _ = make_scheduler(max_batch_tokens=16384, max_batch_size=256)

    def interrupted() -> None:
        raise KeyboardInterrupt

    scheduler.prepare(0, 1, Preparation(interrupted, (), pytest.fail))
    scheduler.prepare(
        0, 1, Preparation(lambda: scheduler.submit(items_of_lengths([2])), (), pytest.fail)
    )
    assignment = next_batch_in_thread(scheduler).result(WAIT)
    assert assignment is not None and [item.cost for item in assignment.items] == [2]
