"""Engine statistics: counters the scheduler and the runner threads update, and snapshots of them.

Several runner threads write these at once, and `/metrics` or `/stats` read them from the CPU
pool, so every update and every snapshot holds one lock: a reader never iterates a histogram
while a runner adds a key to it. Readers use `snapshot()`, a frozen copy. A few plain-int
properties (`items`, `batches`, ...) stay for readers that want one number: reading an int is
atomic under the GIL.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class RunnerCounters:
    """One runner's share of the work (written under the stats lock)."""

    batches: int = 0
    items: int = 0
    # The inputs' own tokens, and the tokens their batches held with padding.
    tokens: int = 0
    padded_tokens: int = 0
    # The work the rate admission compares admitted work with: the padded tokens of batches
    # that hold nothing beyond their tokens (text), and the bytes held by those that do
    # (images' pixels and outputs, `work.Payload.held_bytes`).
    token_work: int = 0
    held_bytes: int = 0
    failed_batches: int = 0
    # Seconds this runner spent in forward passes (the rest of its time it waited for work).
    busy_seconds: float = 0.0
    # The CPU seconds its own thread spent in them (not the threads a batch borrows): less
    # than busy_seconds by the time it waited for a core, or for the GIL.
    cpu_seconds: float = 0.0
    alive: bool = True


@dataclass(frozen=True)
class RunnerSnapshot:
    index: int
    batches: int
    items: int
    tokens: int
    padded_tokens: int
    failed_batches: int
    busy_seconds: float
    alive: bool
    token_work: int = 0
    held_bytes: int = 0
    cpu_seconds: float = 0.0
    # The express runner (engine/scheduler.py's `next_express_batch`).
    express: bool = False


@dataclass(frozen=True)
class StatsSnapshot:
    batches: int
    items: int
    tokens: int
    padded_tokens: int
    failed_batches: int
    busy_seconds: float
    items_skipped: int
    batch_sizes: dict[int, int]
    batch_tokens: dict[int, int]
    runners: tuple[RunnerSnapshot, ...]
    # Batches that started while another runner's batch was running, and the most batches that
    # ever ran at once: the engine's own evidence that runners work in parallel.
    overlapped_batches: int
    max_concurrent_batches: int
    cpu_seconds: float = 0.0

    @property
    def max_batch_size(self) -> int:
        return max(self.batch_sizes, default=0)

    @property
    def tokens_per_second(self) -> float:
        """The padded tokens of text batches the engine as a whole runs: each runner's measured
        rate, summed over the runners still alive (0 before the first batch)."""
        return token_rate(
            (r.token_work, r.busy_seconds, r.alive) for r in self.runners if not r.express
        )

    @property
    def held_bytes_per_second(self) -> float:
        """The same for the bytes image batches hold."""
        return token_rate(
            (r.held_bytes, r.busy_seconds, r.alive) for r in self.runners if not r.express
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "batches": self.batches,
            "items": self.items,
            "tokens": self.tokens,
            "padded_tokens": self.padded_tokens,
            "failed_batches": self.failed_batches,
            "busy_seconds": self.busy_seconds,
            "cpu_seconds": self.cpu_seconds,
            "items_skipped": self.items_skipped,
            "max_batch_size": self.max_batch_size,
            "batch_sizes": dict(sorted(self.batch_sizes.items())),
            "overlapped_batches": self.overlapped_batches,
            "max_concurrent_batches": self.max_concurrent_batches,
            "runners": [
                {
                    "index": r.index,
                    "alive": r.alive,
                    "batches": r.batches,
                    "items": r.items,
                    "failed_batches": r.failed_batches,
                    "busy_seconds": r.busy_seconds,
                    "cpu_seconds": r.cpu_seconds,
                    "express": r.express,
                }
                for r in self.runners
            ],
        }


def token_rate(runners: Iterable[tuple[int, float, bool]]) -> float:
    """Work a second from each runner's (work done, busy seconds, alive): the alive
    runners' rates summed, or, with none alive that ran, the rate of all of them."""
    counts = list(runners)
    rate = sum(tokens / busy for tokens, busy, alive in counts if alive and busy)
    busy_in_all = sum(busy for _, busy, _ in counts)
    if rate == 0.0 and busy_in_all:
        rate = sum(tokens for tokens, _, _ in counts) / busy_in_all
    return rate


@dataclass
class EngineStats:
    """`runner_count` runners, and after them the express runner where there is one (its
    batches counted with theirs; the rates, which stand for what the cores run, are the
    runners' alone: the express runner shares their cores)."""

    runner_count: int = 1
    express: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _runners: list[RunnerCounters] = field(default_factory=list, repr=False)
    _items_skipped: int = 0
    _batch_sizes: Counter[int] = field(default_factory=Counter, repr=False)
    _batch_tokens: Counter[int] = field(default_factory=Counter, repr=False)
    _running: int = 0
    _overlapped: int = 0
    _max_running: int = 0
    # The wall seconds a padded token of the runners' recent batches (a moving average; read
    # without the lock): how soon a running batch ends (scheduler.py). Wall, not the runner's
    # CPU: under load a batch of a static model's short sums takes about nine times its CPU, its
    # runner waiting on the GIL, and a preparation left for it waits as long (a CPU estimate
    # kept the idle runner asleep: c=8 x 32 sentences 11 % slower in two A/B runs).
    seconds_per_token: float = 0.0

    def __post_init__(self) -> None:
        self._runners = [RunnerCounters() for _ in range(self.runner_count + self.express)]

    # -- writers ------------------------------------------------------------------------------

    def batch_started(self) -> None:
        with self._lock:
            if self._running:
                self._overlapped += 1
            self._running += 1
            self._max_running = max(self._max_running, self._running)

    def batch_ended(
        self,
        runner: int,
        *,
        items: int,
        tokens: int,
        padded_tokens: int,
        seconds: float,
        held_bytes: int = 0,
        cpu_seconds: float = 0.0,
    ) -> None:
        """A batch ran (`items` > 0) or failed (`items` == 0); either way it no longer runs.
        `held_bytes`: what its items hold beyond their tokens (images); `seconds` and
        `cpu_seconds`: its wall time and its runner thread's CPU time."""
        with self._lock:
            self._running -= 1
            counters = self._runners[runner]
            if not items:
                counters.failed_batches += 1
                return
            counters.batches += 1
            counters.items += items
            counters.tokens += tokens
            counters.padded_tokens += padded_tokens
            if held_bytes:
                counters.held_bytes += held_bytes
            else:
                counters.token_work += padded_tokens
            counters.busy_seconds += seconds
            counters.cpu_seconds += cpu_seconds
            if padded_tokens and seconds:
                per_token = seconds / padded_tokens
                last = self.seconds_per_token
                self.seconds_per_token = per_token if not last else 0.8 * last + 0.2 * per_token
            self._batch_sizes[items] += 1
            self._batch_tokens[padded_tokens] += 1

    def items_were_skipped(self, count: int) -> None:
        with self._lock:
            self._items_skipped += count

    def runner_died(self, runner: int) -> None:
        with self._lock:
            self._runners[runner].alive = False

    # -- readers ------------------------------------------------------------------------------

    def tokens_per_second(self) -> float:
        """`StatsSnapshot.tokens_per_second` without building a snapshot."""
        return self.work_rate()[0]

    def runner_token_rate(self) -> float:
        """Padded tokens a second one runner runs (0.0 until one has run a batch)."""
        with self._lock:
            rates = [
                c.token_work / c.busy_seconds
                for c in self._runners[: self.runner_count]
                if c.busy_seconds
            ]
        return sum(rates) / len(rates) if rates else 0.0

    def work_rate(self) -> tuple[float, float]:
        """`StatsSnapshot`'s tokens and held bytes per second without building a snapshot
        (admission reads them for every refusal's Retry-After)."""
        with self._lock:
            runners = self._runners[: self.runner_count]
            tokens = [(c.token_work, c.busy_seconds, c.alive) for c in runners]
            held = [(c.held_bytes, c.busy_seconds, c.alive) for c in runners]
        return token_rate(tokens), token_rate(held)

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            runners = tuple(
                RunnerSnapshot(
                    index,
                    c.batches,
                    c.items,
                    c.tokens,
                    c.padded_tokens,
                    c.failed_batches,
                    c.busy_seconds,
                    c.alive,
                    c.token_work,
                    c.held_bytes,
                    c.cpu_seconds,
                    express=index >= self.runner_count,
                )
                for index, c in enumerate(self._runners)
            )
            return StatsSnapshot(
                batches=sum(r.batches for r in runners),
                items=sum(r.items for r in runners),
                tokens=sum(r.tokens for r in runners),
                padded_tokens=sum(r.padded_tokens for r in runners),
                failed_batches=sum(r.failed_batches for r in runners),
                busy_seconds=sum(r.busy_seconds for r in runners),
                items_skipped=self._items_skipped,
                batch_sizes=dict(self._batch_sizes),
                batch_tokens=dict(self._batch_tokens),
                runners=runners,
                overlapped_batches=self._overlapped,
                max_concurrent_batches=self._max_running,
                cpu_seconds=sum(r.cpu_seconds for r in runners),
            )

    @property
    def items(self) -> int:
        return sum(c.items for c in list(self._runners))

    @property
    def batches(self) -> int:
        return sum(c.batches for c in list(self._runners))

    @property
    def failed_batches(self) -> int:
        return sum(c.failed_batches for c in list(self._runners))

    @property
    def items_skipped(self) -> int:
        return self._items_skipped
