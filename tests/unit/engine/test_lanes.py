"""Priority lanes in the engine: the scheduler serves higher lanes first, ages the lower ones
within the stated bound, and cuts batches to slices while background work waits beside other
work; the CPU pool's queue does the same for its jobs."""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

import pytest

from poolserve.config.priorities import HIGHEST_PRIORITY, LOWEST_PRIORITY
from poolserve.engine import lanes as lanes_module
from poolserve.engine import scheduler as scheduler_module
from poolserve.engine.collate import text_item
from poolserve.engine.lane_executor import LaneExecutor
from poolserve.engine.lanes import (
    AGING_BATCHES,
    FOREGROUND_MEMORY,
    JOBS_PER_LANE,
    MAX_PASSED_OVER,
    header_priority,
    request_priority,
)
from poolserve.engine.preparations import Preparation
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import InvalidRequestError
from tests.unit.engine.test_scheduler import next_batch_in_thread

WAIT = 5


def scheduler(**options: object) -> tuple[Scheduler, EngineStats]:
    stats = EngineStats()
    settings: dict[str, object] = {
        "max_batch_tokens": 16384,
        "max_batch_size": 256,
        "window": 1024,
        "stats": stats,
        **options,
    }
    return Scheduler(**settings), stats  # type: ignore[arg-type]


def request(priority: int, lengths: list[int]) -> list[WorkItem]:
    group = RequestGroup(len(lengths), priority)
    return [text_item(group, index, [1] * length) for index, length in enumerate(lengths)]


def lanes_of(items: list[WorkItem]) -> list[int]:
    return [item.group.priority for item in items]


def take(scheduler: Scheduler) -> list[WorkItem]:
    assignment = scheduler.next_batch()
    assert assignment is not None
    scheduler.batch_ended(assignment)
    return assignment.items


def test_a_higher_lane_seeds_the_batch_and_fills_it_first() -> None:
    """Fewest items left first, but only within a lane: a 3-item request of a higher lane goes
    before a 1-item one of a lower lane that arrived first."""
    runs, _ = scheduler(max_batch_size=2)
    runs.submit(request(5, [4]))
    runs.submit(request(-1, [4, 4, 4]))
    runs.close()
    assert [lanes_of(take(runs)) for _ in range(2)] == [[-1, -1], [-1, 5]]
    assert runs.queued_by_lane() == {}


def test_a_low_request_under_an_endless_high_stream_runs_within_the_stated_bound() -> None:
    """The module's bound: a request d lanes below the highest waiting is passed over by at
    most max(AGING_BATCHES × d, MAX_PASSED_OVER) batches in a row, then seeds the next."""
    runs, _ = scheduler(max_batch_size=1)
    low = request(LOWEST_PRIORITY, [5])
    runs.submit(low)
    lanes = LOWEST_PRIORITY - HIGHEST_PRIORITY
    bound = max(AGING_BATCHES * lanes, MAX_PASSED_OVER)
    passed_over = 0
    while True:
        runs.submit(request(HIGHEST_PRIORITY, [5]))  # two high ones wait at every turn
        runs.submit(request(HIGHEST_PRIORITY, [5]))
        batch = take(runs)
        if batch[0] is low[0]:
            break
        passed_over += 1
        assert passed_over <= bound, "the low request waited past the stated bound"
    # The lanes held it back as long as the bound says, not less: aging, not round-robin.
    assert passed_over == bound
    assert runs.queued_by_lane() == {HIGHEST_PRIORITY: 2 * (bound + 1) - bound}


def test_queued_items_are_counted_by_lane_and_forgotten_when_cancelled() -> None:
    runs, _ = scheduler()
    background, default = request(3, [5, 5]), request(0, [5])
    runs.submit(background + default)
    assert runs.queued_by_lane() == {0: 1, 3: 2}
    background[0].group.cancel()
    runs.close()
    assert lanes_of(take(runs)) == [0]
    assert runs.queued_by_lane() == {}


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    for module in (scheduler_module, lanes_module):
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def test_background_work_runs_in_slices_only_while_other_work_arrives(clock: Clock) -> None:
    runs, stats = scheduler(background_slice=0.05)
    # A runner has run 1,000 tokens a second: a slice is 50 tokens.
    stats.batch_started()
    stats.batch_ended(0, items=10, tokens=1000, padded_tokens=1000, seconds=1.0)

    runs.submit(request(5, [10] * 40))
    assert len(take(runs)) == 40, "a bulk job alone runs batches as large as any"

    runs.submit(request(5, [10] * 40))
    runs.submit(request(0, [10]))
    batch = take(runs)
    assert lanes_of(batch)[0] == 0 and len(batch) * 10 <= 50
    assert len(take(runs)) * 10 <= 50, "still sliced: the default lane was just here"
    clock.now += FOREGROUND_MEMORY + 0.1
    assert len(take(runs)) == 40 - 5 - 4, "the rest at once: nobody else has come for a while"


def test_no_slices_before_the_rate_is_measured_or_when_switched_off(clock: Clock) -> None:
    for slice_seconds, measured in ((0.05, False), (0.0, True)):
        runs, stats = scheduler(background_slice=slice_seconds)
        if measured:
            stats.batch_started()
            stats.batch_ended(0, items=10, tokens=1000, padded_tokens=1000, seconds=1.0)
        runs.submit(request(5, [10] * 40) + request(0, [10]))
        assert len(take(runs)) == 41


def express_runner(
    runs: Scheduler, holds_until: threading.Event | None = None
) -> tuple[queue.Queue[list[WorkItem] | None], threading.Thread]:
    """An express runner's thread over `runs`: each batch it takes is put in the queue (then
    None once closed), and ended at once, or once `holds_until` is set."""
    taken: queue.Queue[list[WorkItem] | None] = queue.Queue()

    def express() -> None:
        while (assignment := runs.next_express_batch()) is not None:
            taken.put(assignment.items)
            if holds_until is not None:
                holds_until.wait(WAIT)
            runs.batch_ended(assignment)
        taken.put(None)

    thread = threading.Thread(target=express, name="express", daemon=True)
    thread.start()
    return taken, thread


def test_the_express_runner_takes_the_default_lane_and_above_only_beside_background_batches() -> (
    None
):
    """Beside a runner holding a background batch, the express runner runs a small request's
    preparation and its batch, takes no background item however much room its batch has, and
    takes nothing once no background batch runs (a runner is for that)."""
    runs, _ = scheduler(express=True)
    taken, thread = express_runner(runs)
    runs.submit(request(5, [10] * 8))
    background = runs.next_batch()  # the only runner now holds background items
    assert background is not None and lanes_of(background.items) == [5] * 8
    prepared_on = []

    def prepare() -> None:
        prepared_on.append(threading.current_thread().name)
        runs.submit(request(0, [4, 4]))

    runs.prepare(0, 2, Preparation(prepare, (), lambda: None))
    assert lanes_of(taken.get(timeout=WAIT) or []) == [0, 0]
    assert prepared_on == ["express"]
    runs.submit(request(5, [10] * 4) + request(-1, [4]))
    assert lanes_of(taken.get(timeout=WAIT) or []) == [-1]
    runs.batch_ended(background)

    runs.submit(request(0, [4]))
    # No background batch runs, and background items wait: a runner takes them and leaves the
    # query to the express runner, which its batch lets start.
    bulk = runs.next_batch()
    assert bulk is not None and lanes_of(bulk.items) == [5, 5, 5, 5]
    assert lanes_of(taken.get(timeout=WAIT) or []) == [0]
    runs.batch_ended(bulk)
    runs.close()
    assert taken.get(timeout=WAIT) is None
    thread.join(WAIT)


def test_beside_an_express_runner_no_batch_holds_a_query_and_background_work() -> None:
    """A query in a background batch waits as long as the batch runs. A runner that finds
    both waiting leaves the query to the express runner while it is free (its background batch
    lets it start), and takes the query alone while the express runner is busy; without an
    express runner a batch is filled from the lower lanes, as before."""
    runs, _ = scheduler(express=True)
    release = threading.Event()
    express_took, thread = express_runner(runs, holds_until=release)
    runs.submit(request(5, [10] * 8))
    runs.submit(request(0, [4]))
    bulk = runs.next_batch()
    assert bulk is not None and lanes_of(bulk.items) == [5] * 8 and bulk.background
    assert lanes_of(express_took.get(timeout=WAIT) or []) == [0]
    # The express runner is busy: the next query goes to a runner, without background items.
    runs.submit(request(5, [10] * 8) + request(0, [4]))
    assert lanes_of(take(runs)) == [0]
    assert lanes_of(take(runs)) == [5] * 8
    release.set()
    runs.batch_ended(bulk)
    runs.close()
    thread.join(WAIT)

    alone, _ = scheduler()  # no express runner
    alone.submit(request(5, [10] * 8) + request(0, [4]))
    alone.close()
    assert lanes_of(take(alone)) == [0] + [5] * 8


# -- the CPU pool's queue -------------------------------------------------------------------------


def run_order(priorities: list[int]) -> list[int]:
    """The order (by submission index) in which a one-thread pool runs jobs of these lanes,
    all queued while its thread is busy."""
    pool = LaneExecutor(1, thread_name_prefix="test-lanes")
    release = threading.Event()
    started = threading.Event()

    def block() -> None:
        started.set()
        release.wait()

    order: list[int] = []
    pool.submit(0, block)
    started.wait()
    futures = [pool.submit(lane, order.append, index) for index, lane in enumerate(priorities)]
    release.set()
    for future in futures:
        future.result()
    pool.shutdown()
    return order


def test_the_cpu_pool_runs_higher_lanes_first_and_each_lane_in_order() -> None:
    assert run_order([10, 0, 10, -5, 0]) == [3, 1, 4, 0, 2]


def test_a_low_job_is_overtaken_by_a_bounded_number_of_later_high_jobs() -> None:
    lanes = LOWEST_PRIORITY - HIGHEST_PRIORITY
    order = run_order([LOWEST_PRIORITY] + [HIGHEST_PRIORITY] * (JOBS_PER_LANE * lanes + 50))
    assert order.index(0) == JOBS_PER_LANE * lanes - 1


def test_a_shut_down_pool_cancels_what_waits_and_refuses_more() -> None:
    pool = LaneExecutor(1, thread_name_prefix="test-lanes")
    release, started = threading.Event(), threading.Event()
    running = pool.submit(0, lambda: (started.set(), release.wait()))
    started.wait()
    waiting = pool.submit(0, lambda: None)
    pool.shutdown(wait=False)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(0, lambda: None)
    release.set()
    assert running.result() == (None, True)


def test_jobs_posted_while_holding_are_queued_together_at_the_end_in_their_lanes() -> None:
    pool = LaneExecutor(1, thread_name_prefix="test-lanes")
    order: list[int] = []
    done = threading.Event()
    with pool.holding():
        pool.post(10, order.append, 0)
        pool.post(0, order.append, 1)
        pool.post(10, lambda: (order.append(2), done.set()))
        assert order == []  # not queued yet: nothing can have run them
    assert done.wait(WAIT)
    assert order == [1, 0, 2]
    pool.shutdown()


def test_a_shut_down_pool_drops_posted_jobs_and_those_still_held() -> None:
    pool = LaneExecutor(1, thread_name_prefix="test-lanes")
    release, started = threading.Event(), threading.Event()
    pool.post(0, lambda: (started.set(), release.wait()))
    assert started.wait(WAIT)
    dropped: list[str] = []
    pool.post(0, pytest.fail, dropped=lambda: dropped.append("queued"))
    with pool.holding():
        pool.post(0, pytest.fail, dropped=lambda: dropped.append("held"))
        pool.shutdown(wait=False)
    assert dropped == ["queued", "held"]
    with pytest.raises(RuntimeError):
        pool.post(0, pytest.fail)
    release.set()


# -- a request's priority -------------------------------------------------------------------------


def test_a_priority_comes_from_the_body_or_the_header_and_both_must_agree() -> None:
    assert request_priority(None, None) == 0
    assert request_priority(4, None) == 4
    assert request_priority(None, header_priority(" -3 ")) == -3
    assert request_priority(2, 2) == 2
    with pytest.raises(InvalidRequestError, match="disagree"):
        request_priority(2, 5)
    for bad in ("high", "11", "-11", "1.5", ""):
        with pytest.raises(InvalidRequestError, match="x-priority must be an integer from -10"):
            header_priority(bad)
    assert header_priority(None) is None


def test_the_express_runner_preparing_leaves_other_lanes_to_an_idle_runner() -> None:
    """A preparation the express runner will not take (a background one) wakes an idle runner
    even while the express runner prepares: it would otherwise wait for the next request."""
    runs, _ = scheduler(express=True)
    preparing, go_on = threading.Event(), threading.Event()
    taken, thread = express_runner(runs)
    runs.submit(request(5, [10] * 8))
    background = runs.next_batch()  # the runner holds background items: the express one works
    assert background is not None

    def query() -> None:
        preparing.set()
        assert go_on.wait(WAIT)
        runs.submit(request(0, [4]))

    runs.prepare(0, 1, Preparation(query, (), lambda: None))
    assert preparing.wait(WAIT)  # the express runner prepares it
    idle = next_batch_in_thread(runs)
    assert runs.wait_for_idle_runners(1, WAIT)
    runs.prepare(5, 1, Preparation(runs.submit, (request(5, [3]),), lambda: None))
    bulk = idle.result(WAIT)
    assert bulk is not None and lanes_of(bulk.items) == [5]
    go_on.set()
    assert lanes_of(taken.get(timeout=WAIT) or []) == [0]
    for assignment in (background, bulk):
        runs.batch_ended(assignment)
    runs.close()
    assert taken.get(timeout=WAIT) is None
    thread.join(WAIT)


def test_a_preparation_left_to_the_express_runners_batch_is_taken_once_it_ends() -> None:
    """A small query's preparation that comes while only the express runner's short batch runs
    is left for a runner that comes back (no wake-up), but the express runner takes none once
    no background batch runs: its batch's end wakes the idle runner for it."""
    runs, stats = scheduler(express=True)
    stats.seconds_per_token = 1e-7  # batches end within a millisecond
    ends = threading.Event()
    taken, thread = express_runner(runs, holds_until=ends)
    runs.submit(request(5, [10] * 8))
    background = runs.next_batch()
    assert background is not None
    runs.submit(request(0, [4]))
    assert lanes_of(taken.get(timeout=WAIT) or []) == [0]  # the express runner's batch runs
    runs.batch_ended(background)  # no background batch now: the express runner takes nothing
    idle = next_batch_in_thread(runs)
    assert runs.wait_for_idle_runners(1, WAIT)
    runs.prepare(0, 1, Preparation(runs.submit, (request(0, [3]),), lambda: None))
    ends.set()  # the express runner's batch ends
    query = idle.result(WAIT)
    assert query is not None and [item.cost for item in query.items] == [3]
    runs.batch_ended(query)
    runs.close()
    assert taken.get(timeout=WAIT) is None
    thread.join(WAIT)
