"""Picking a batch's items from those waiting, within a padded-token budget (the scheduler,
scheduler.py, decides which requests go first and calls these).

Length buckets: a batch is padded to its longest item, and real text varies (5 to 60 tokens a
sentence), so the items picked are cut, by length, into buckets wherever the next-longer item
would add more than `bucket_padding_tokens` of padding (its length above the bucket's longest,
times the bucket's items); the runner takes the seed's bucket and the rest wait for the next
free runner, a moment later. Measured on real prose (all-MiniLM-L6-v2, bf16, one thread): 64
sentences took 284 ms as one padded batch and 110 ms as buckets (padding tolerance 32 tokens,
the default; 16 to 64 were within 3 %).

A model that runs packed batches (several inputs to a row, backends/torch_model/packing.py) has
nothing to cut among short inputs: a batch seeded by an input of at most `PACK_FREELY_TOKENS` takes
the short items in the order the scheduler gives, whatever their lengths, as many as the token
budget holds (counted in real tokens). Longer inputs share few rows (a row's attention costs its
length squared, so rows stay short), and go in length buckets as padded batches do: measured on real
passages (all-MiniLM-L6-v2, bf16, compiled, one thread, 64 passages of 100-205 tokens), packed rows
of 256 took 785 ms and length buckets 645 ms; 64 sentences took 71 ms packed.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

from poolserve.engine.work import WorkItem
from poolserve.models.kinds import Head

# Inputs up to this many tokens are packed together whatever their lengths (see above).
PACK_FREELY_TOKENS = 64


def pick_around(by_length: list[WorkItem], start: int, limit: int, budget: int) -> list[WorkItem]:
    """Grow a run of the sorted window around `start`, adding whichever neighbour pads least,
    up to `limit` items."""
    low = high = start
    longest = by_length[start].cost
    count = 1
    while count < limit:
        left = by_length[low - 1] if low > 0 else None
        right = by_length[high + 1] if high + 1 < len(by_length) else None
        left_fits = left is not None and (count + 1) * longest <= budget
        right_fits = right is not None and (count + 1) * right.cost <= budget
        if left_fits and right_fits:
            assert left is not None and right is not None
            take_left = longest - left.cost <= (right.cost - longest) * count
        elif left_fits or right_fits:
            take_left = left_fits
        else:
            break
        if take_left:
            low -= 1
        else:
            high += 1
            longest = by_length[high].cost
        count += 1
    return by_length[low : high + 1]


def fill_nearest(
    chosen: list[WorkItem], others: list[WorkItem], limit: int, budget: int
) -> list[WorkItem]:
    """Items of `others` (one request's) to add to `chosen`: those nearest in length to it
    first, while they fit in the token budget, up to `limit` items in all."""
    shortest = min(item.cost for item in chosen)
    longest = max(item.cost for item in chosen)

    def distance(item: WorkItem) -> int:
        return max(0, shortest - item.cost, item.cost - longest)

    added: list[WorkItem] = []
    count = len(chosen)
    for item in sorted(others, key=distance):
        if count >= limit:
            break
        padded_to = max(longest, item.cost)
        if (count + 1) * padded_to > budget:
            continue
        added.append(item)
        longest = padded_to
        count += 1
    return added


def fill_packed(
    seed: WorkItem, window: list[list[WorkItem]], limit: int, budget: int
) -> list[WorkItem]:
    """For a packed batch of short items: the seed, then the window's short items in order
    (the requests with the fewest items left first) while their tokens fit the budget, up
    to `limit` items."""
    chosen = [seed]
    tokens = seed.cost
    for item in itertools.chain.from_iterable(window):
        if len(chosen) >= limit:
            break
        if item is seed or item.cost > PACK_FREELY_TOKENS:
            continue
        if tokens + item.cost > budget:
            continue
        chosen.append(item)
        tokens += item.cost
    return chosen


def length_bucket(seed: WorkItem, chosen: list[WorkItem], tolerance: int | None) -> list[WorkItem]:
    """The length bucket of `chosen` that holds `seed`: sorted by length, a new bucket starts
    where the next item would pad the bucket's items by more than the tolerance in all."""
    if tolerance is None or len(chosen) < 2:
        return chosen
    by_length = sorted(chosen, key=lambda item: item.cost)
    start = 0
    for index in range(1, len(by_length) + 1):
        cut = (
            index == len(by_length)
            or (index - start) * (by_length[index].cost - by_length[index - 1].cost) > tolerance
        )
        if cut:
            bucket = by_length[start:index]
            if any(item is seed for item in bucket):
                return bucket
            start = index
    return chosen  # unreachable: the seed is in one of the buckets


def head_window(queues: list[deque[WorkItem]], size: int) -> list[list[WorkItem]]:
    """The items to choose a batch from: of each request's queue in turn (the first one's
    first item is the seed), those of the seed's head, `size` items in all at most."""
    head = queues[0][0].head
    window: list[list[WorkItem]] = []
    looked_at = 0
    for queue in queues:
        window.append([i for i in itertools.islice(queue, size - looked_at) if i.head == head])
        looked_at += len(window[-1])
        if looked_at >= size:
            break
    return window


def choose(
    window: list[list[WorkItem]],
    limit: int,
    budget: int,
    packs: Callable[[Head], bool],
    bucket_padding: int | None,
) -> list[WorkItem]:
    """A batch from `window` (its first item the seed), at most `limit` items within `budget`
    tokens: packed where the head packs and the seed is short, else around the seed in length,
    filled with the next requests' nearest items, cut to the seed's length bucket."""
    seed = window[0][0]
    if packs(seed.head) and seed.cost <= PACK_FREELY_TOKENS:
        return fill_packed(seed, window, limit, budget)
    first = sorted(window[0], key=lambda item: item.cost)
    chosen = pick_around(first, first.index(seed), limit, budget)
    for others in window[1:]:
        if len(chosen) >= limit:
            break
        chosen += fill_nearest(chosen, others, limit, budget)
    return length_bucket(seed, chosen, bucket_padding)
