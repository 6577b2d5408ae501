"""Priority lanes: what a request's priority means, wherever it waits.

A request carries vLLM's `priority` (its range: config/priorities.py). Each priority is a lane. A
request waits in three places, and each serves the higher lanes first; the first two age the
lower ones, so that nothing waits forever, and the door bounds their wait in time:

- the CPU pool (`lane_executor.py`): a job is queued as though it had been submitted
  `JOBS_PER_LANE` jobs later for each lane it is below the highest, so at most that many jobs
  submitted after it, per lane of difference, run before it;
- the scheduler (`scheduler.py`): a waiting request rises one lane for every `AGING_BATCHES`
  batches in a row that pass it over;
- admission (`server/admission/control.py`): a higher lane's request waiting at the door is let
  in before a lower one's (which gets its 429 after `--max-admission-wait` if higher lanes keep
  the room), and background lanes (below the default) hold at most a share of
  `--max-queued-tokens`, the rest kept for the default lane and above.

A request of the default lane or above that arrives while background batches hold every runner
runs at once on the express runner (scheduler.py's `next_express_batch`), beside them. Without
one (`--no-express-runner`, a GPU), background work runs in time slices instead while the
default lane or a higher one has work: a batch is then cut to what a runner runs in
`--background-slice` seconds (at the engine's measured rate), so that a request of a higher lane
waits at most about that long for a runner, however much background work is queued. A higher
lane "has work" from its request's arrival until `FOREGROUND_MEMORY` seconds after its last one:
a bulk job alone runs batches as large as any.
"""

from __future__ import annotations

from poolserve.config.priorities import DEFAULT_PRIORITY, LANES, PRIORITY_RANGE
from poolserve.errors import InvalidRequestError

# Jobs submitted later that may overtake a CPU-pool job, per lane it is below another's.
JOBS_PER_LANE = 32
# Batches in a row that pass a waiting request over before it rises one lane.
AGING_BATCHES = 4
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
