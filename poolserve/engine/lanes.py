"""Priority lanes: what a request's priority means, wherever it waits.

A request carries vLLM's `priority` (its range: config/priorities.py). Each priority is a lane. A
request waits in three places, and each serves the higher lanes first; the first two age the
lower ones, so that nothing waits forever, and the door bounds their wait in time:

- the CPU pool (`lane_executor.py`): a job is queued as though it had been submitted
  `JOBS_PER_LANE` jobs later for each lane it is below the highest, so at most that many jobs
  submitted after it, per lane of difference, run before it;
- the scheduler (`scheduler.py`): a waiting request rises one lane for every `AGING_BATCHES`
  batches in a row that pass it over;
- admission (`admission/control.py`): a higher lane's request waiting at the door is let
  in before a lower one's (which gets its 429 after `--max-admission-wait` if higher lanes keep
  the room), and background lanes (below the default) hold at most a share of
  `--max-queued-tokens`, the rest kept for the default lane and above.

No request waits forever in the scheduler: one that `MAX_PASSED_OVER` batches in a row
(scheduler.py) have passed over, none of its items in them, seeds the next batch among those of
its lane, however many items it has left (a large request under a steady stream of small ones
would otherwise never be seeded, and, with the batches full of small ones, never filled in
either). The bound, under an endless stream of higher-lane work: a request `d` lanes below the
highest waiting is passed over by at most max(`AGING_BATCHES` × d, `MAX_PASSED_OVER`) batches in
a row, then seeds the next one unless another has been passed over longer.

A forward pass cannot be interrupted. The express runner (scheduler.py's `next_express_batch`,
on CPU unless `--no-express-runner`) is one more runner thread, for work of the default lane and
above only, and only while a background batch runs: a query that arrives then runs at once
beside the background batches, sharing the cores (its thread has the higher OS priority:
runner.py; an idle runner, at the lower one, would run it more slowly), rather than wait for one
of them to end. It runs those requests' preparations too, and its batches hold no background
item; nor does any batch hold both sides beside it (`one_side`): a runner that finds both
waiting leaves the query to the express runner while it is free. Background batches are then as
large as any (slices would cost the bulk work a forward pass's fixed cost each).

Without an express runner (`--no-express-runner`, a GPU), background work runs in time slices
while the default lane or a higher one has work: a batch is then cut to what a runner runs in
`--background-slice` seconds (at the engine's measured rate), so that a request of a higher lane
waits at most about that long for a runner, however much background work is queued. A higher
lane "has work" from its request's arrival until `FOREGROUND_MEMORY` seconds after its last one:
a bulk job alone runs batches as large as any.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from poolserve.config.priorities import DEFAULT_PRIORITY, LANES, PRIORITY_RANGE, is_background
from poolserve.engine.work import WorkItem, items_left
from poolserve.errors import InvalidRequestError

# Jobs submitted later that may overtake a CPU-pool job, per lane it is below another's.
JOBS_PER_LANE = 32
# Batches in a row that pass a waiting request over before it rises one lane.
AGING_BATCHES = 4
# A waiting request passed over by this many batches in a row seeds the next one (see above).
MAX_PASSED_OVER = 8
# Seconds after the last request of the default lane or above that background work still runs in
# slices (the next such request is likely near: a client at work sends one after another).
FOREGROUND_MEMORY = 1.0


def header_priority(value: str | None) -> int | None:
    """The priority an `x-priority` header asks for (None: no header); a bad one is a 400."""
    if value is None:
        return None
    try:
        priority = int(value.strip())
    except ValueError:
        priority = None
    if priority is None or priority not in LANES:
        raise InvalidRequestError(f"x-priority must be {PRIORITY_RANGE}; got {value[:32]!r}")
    return priority


def request_priority(in_body: int | None, in_header: int | None) -> int:
    """A request's priority from its body's `priority` and its `x-priority` header: either, or
    both when they agree."""
    if in_body is not None and in_header is not None and in_body != in_header:
        raise InvalidRequestError(
            f"the body's priority ({in_body}) and the x-priority header ({in_header}) disagree; "
            "send one of them"
        )
    chosen = in_body if in_body is not None else in_header
    return DEFAULT_PRIORITY if chosen is None else chosen


def in_turn(
    queues: list[deque[WorkItem]], batches_formed: int, last_served: dict[int, int]
) -> list[deque[WorkItem]]:
    """The waiting requests' queues in the order the scheduler serves them.

    Lanes first: a request rises one lane for every AGING_BATCHES batches in a row that passed
    it over (`batches_formed` less the count when it `last_served`, by its group's id), up to
    the highest lane waiting; one passed over MAX_PASSED_OVER times goes first in its lane.
    Within a lane, the requests with the fewest items left to run come first (the oldest first
    among equals): a small request is never stuck behind large ones that arrived before it, and
    of the large ones the nearest to done goes on first and finishes, rather than all of them
    sharing the runner and finishing late together (measured: 8 requests of 500 sentences sent
    at once all took 4.4 s or more). Items left count those not yet submitted: a request still
    being tokenized chunk by chunk is as large as it will be."""
    top = min(queue[0].group.priority for queue in queues)

    def turn(queue: deque[WorkItem]) -> tuple[int, int, int]:
        count = batches_formed - last_served[id(queue[0].group)]
        lane = max(top, queue[0].group.priority - count // AGING_BATCHES)
        return (lane, 0, -count) if count >= MAX_PASSED_OVER else (lane, 1, items_left(queue))

    return sorted(queues, key=turn)


def one_side(queues: list[deque[WorkItem]], *, express_free: bool) -> list[deque[WorkItem]]:
    """The queues (in turn) a runner's batch beside an express runner takes from: background
    ones only, or none. A query in a background batch waits as long as the batch runs
    (measured with ONNX Runtime: a one-sentence query filled up with 30 bulk sentences took
    424 ms); so while the express runner is free, a runner leaves the default lane and above to
    it and takes background work (whose batch lets the express runner start); else the batch
    holds its seed's side only."""
    background = [queue for queue in queues if is_background(queue[0].group.priority)]
    if not background or len(background) == len(queues):
        return queues
    if express_free or is_background(queues[0][0].group.priority):
        return background
    return [queue for queue in queues if not is_background(queue[0].group.priority)]


def slice_budget(
    queues: list[deque[WorkItem]],
    max_tokens: int,
    slice_seconds: float,
    foreground_at: float,
    rate: Callable[[], float],
) -> int:
    """A batch's token budget (without an express runner): where background work is among the
    `queues` it takes from, what a runner runs in `slice_seconds` at its measured `rate()`
    (padded tokens a second), while the default lane or above was last here (`foreground_at`,
    monotonic) within FOREGROUND_MEMORY seconds; else, or before any rate is measured,
    `max_tokens`."""
    if not any(is_background(queue[0].group.priority) for queue in queues):
        return max_tokens
    if time.monotonic() - foreground_at > FOREGROUND_MEMORY:
        return max_tokens
    measured = rate()
    if not measured:
        return max_tokens
    return max(1, min(max_tokens, int(measured * slice_seconds)))
