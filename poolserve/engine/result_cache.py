"""The result cache (`--cache-bytes`, off by default): the model's output for a prepared input,
kept in a bounded LRU and handed to the next item that asks for the same computation.

The key is what the model computes on, not what the request said: an item's payload (its token
ids, token types, attention mask, pooling start) and its head, within one model's engine. So a
prompt, a truncation or a chunking (which change the ids) are in the key, and what is applied
after the model (normalization, a Matryoshka slice, the wire's number type) is applied to a hit
as to a miss: a hit gives the same bytes, and never a vector of other parameters. Hits skip the
model, not the tokenizer.

Identical items in flight at once run once: the first is the leader (it runs, and its output is
copied into the cache and handed to the others); if the leader's request ends before its output
came (cancelled, failed), the waiters go to the scheduler again, the first of them leading.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from poolserve.engine.work import WorkItem

# What an entry costs beyond its array's bytes and its key's (the dict slot, the objects).
ENTRY_OVERHEAD = 200


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    bytes: int
    entries: int
    max_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "cache_evictions": self.evictions,
            "cache_bytes": self.bytes,
            "cache_entries": self.entries,
            "cache_max_bytes": self.max_bytes,
        }


@dataclass(eq=False)
class _Flight:
    """One computation in flight, and the items waiting for its output."""

    cache: ResultCache
    key: Hashable
    key_bytes: int
    waiters: list[WorkItem] = field(default_factory=list)
    done: bool = False

    def resolve(self, output: Any) -> None:
        self.cache._resolved(self, output)


def key_of(item: WorkItem) -> tuple[Hashable, int] | None:
    """An item's key and its size in bytes; None for a payload that has no key."""
    cache_key = getattr(item.payload, "cache_key", None)
    if cache_key is None:
        return None
    key, size = cache_key()
    return (item.head, key), size


class ResultCache:
    def __init__(self, max_bytes: int, submit: Callable[[list[WorkItem]], None]) -> None:
        """`submit`: hands items to the scheduler (for waiters whose leader went away)."""
        self.max_bytes = max_bytes
        self._submit = submit
        self._entries: OrderedDict[Hashable, tuple[np.ndarray, int]] = OrderedDict()
        self._flights: dict[Hashable, _Flight] = {}
        self._lock = threading.Lock()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def route(self, items: Iterable[WorkItem], *, counted: bool = False) -> list[WorkItem]:
        """Answer the items the cache holds, join those already in flight; returns the items
        the model must run (each now leading its flight). `counted`: their misses were
        counted already (waiters routed again)."""
        to_run: list[WorkItem] = []
        hits: list[tuple[WorkItem, np.ndarray]] = []
        leaders: list[tuple[WorkItem, _Flight]] = []
        with self._lock:
            for item in items:
                keyed = key_of(item)
                if keyed is None:
                    to_run.append(item)
                    continue
                key, size = keyed
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self._hits += 1
                    item.group.cached += 1
                    hits.append((item, entry[0]))
                    continue
                self._misses += not counted
                flight = self._flights.get(key)
                if flight is not None:
                    item.group.cached += 1
                    flight.waiters.append(item)
                    continue
                flight = self._flights[key] = _Flight(self, key, size)
                item.sink = flight
                to_run.append(item)
                leaders.append((item, flight))
        now = time.perf_counter()
        for item, output in hits:
            item.group.set_output(item.index, output, now, item.part)
        for item, flight in leaders:
            item.group.future.add_done_callback(partial(self._leader_gone, flight))
        return to_run

    def _resolved(self, flight: _Flight, output: Any) -> None:
        """The leader's output came (a runner thread): keep a copy, answer the waiters."""
        kept = np.array(output, copy=True)
        kept.flags.writeable = False  # shared by every request that gets it
        size = kept.nbytes + flight.key_bytes + ENTRY_OVERHEAD
        with self._lock:
            flight.done = True
            self._flights.pop(flight.key, None)
            waiters, flight.waiters = flight.waiters, []
            if size <= self.max_bytes and flight.key not in self._entries:
                self._entries[flight.key] = (kept, size)
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, (_, evicted) = self._entries.popitem(last=False)
                    self._bytes -= evicted
                    self._evictions += 1
        now = time.perf_counter()
        for waiter in waiters:
            waiter.group.set_output(waiter.index, kept, now, waiter.part)

    def _leader_gone(self, flight: _Flight, _: Future[Any]) -> None:
        """The leader's request ended; if its output never came, the waiters run themselves."""
        with self._lock:
            if flight.done:
                return
            flight.done = True
            self._flights.pop(flight.key, None)
            waiters = [w for w in flight.waiters if not w.group.finished]
            flight.waiters = []
            for waiter in waiters:
                waiter.group.cached -= 1
        if waiters:
            try:
                self._submit(self.route(waiters, counted=True))
            except Exception as exc:  # the engine closed meanwhile
                for waiter in waiters:
                    waiter.group.fail(exc)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self._hits,
                self._misses,
                self._evictions,
                self._bytes,
                len(self._entries),
                self.max_bytes,
            )
