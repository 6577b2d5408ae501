"""Units of work: a `RequestGroup` is one request's set of inputs, a `WorkItem` one prepared input.

The engine does not look inside an item: it batches items by their head and their cost (a
text's tokens) and hands their payloads to the backend's collate (a `TokenizedText` for text),
so an input that is not text (an image) adds a payload and a processor, not a new path.

A group's items may run in batches on several runner threads at once, so its results and timing
marks are written under the group's own lock (the last writer completes it). The group's
`Completion` (a light future) carries the outcome to whoever waits (an event loop or a caller
thread), and cancelling it tells the scheduler to skip the group's items that have not run yet.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from poolserve.config.priorities import DEFAULT_PRIORITY
from poolserve.engine.completion import Completion
from poolserve.models.kinds import Head


@dataclass(eq=False)
class BatchMark:
    """One batch as the requests in it see it (traces): when it ran, how many items and tokens
    it held (padded: with what the forward pass computed beyond them)."""

    started: float
    size: int
    tokens: int
    ended: float = 0.0
    padded_tokens: int = 0


@dataclass(eq=False)
class RequestGroup:
    """One request's inputs; its future completes with all outputs, in input order."""

    size: int
    # Its lane (engine/lanes.py): lower runs first.
    priority: int = DEFAULT_PRIORITY
    # Settled with its outputs, its error, or cancelled (engine/completion.py).
    future: Completion[list[Any]] = field(default_factory=Completion)
    submitted_at: float = field(default_factory=time.perf_counter)
    # Set by the runner threads: when the first of this group's batches started, the last ended.
    first_batch_started_at: float | None = None
    last_batch_ended_at: float | None = None
    # Items handed to the scheduler so far (written under the scheduler's lock): a request is
    # tokenized and submitted chunk by chunk.
    submitted: int = 0
    # Items the result cache answers or has joined to a computation in flight (written under
    # its lock).
    cached: int = 0
    # Items it runs as: one per input, more once a long input is split (`expand`).
    items: int = 0
    # The batches its items ran in, by identity, in the order they started.
    batches: dict[int, BatchMark] = field(default_factory=dict)
    _results: list[Any] = field(default_factory=list)
    _remaining: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._results = [None] * self.size
        self._remaining = self.size
        self.items = self.size

    @property
    def finished(self) -> bool:
        """Done, failed or cancelled: its remaining items need not run."""
        return self.future.done()

    def cancel(self) -> None:
        self.future.cancel()

    def batch_started(self, batch: BatchMark) -> None:
        with self._lock:
            at = batch.started
            if self.first_batch_started_at is None or at < self.first_batch_started_at:
                self.first_batch_started_at = at
            self.batches[id(batch)] = batch

    def expand(self, index: int, parts: int) -> None:
        """Input `index` runs as `parts` items (a long text's chunks): its output becomes the
        list of theirs, in order. Called before any of them is submitted."""
        with self._lock:
            self._results[index] = [None] * parts
            self._remaining += parts - 1
            self.items += parts - 1

    def set_output(self, index: int, output: Any, ended_at: float, part: int | None = None) -> None:
        """Record one item's output (runner threads); completes the future with the last one."""
        with self._lock:
            if self.last_batch_ended_at is None or ended_at > self.last_batch_ended_at:
                self.last_batch_ended_at = ended_at
            if part is None:
                self._results[index] = output
            else:
                self._results[index][part] = output
            self._remaining -= 1
            complete = self._remaining == 0
        if complete:  # (unless its waiter cancelled it a moment ago, from its own thread)
            self.future.set_result(self._results)

    def fail(self, error: BaseException) -> None:
        self.future.set_exception(error)

    @property
    def queue_time(self) -> float:
        started = self.first_batch_started_at
        return 0.0 if started is None else started - self.submitted_at

    @property
    def inference_time(self) -> float:
        started, ended = self.first_batch_started_at, self.last_batch_ended_at
        return 0.0 if started is None or ended is None else ended - started


class Payload(Protocol):
    """What a task's preprocessing makes of one input, for the backend (`TokenizedText`), or
    of one part of an input that runs as several (`Parts`)."""

    @property
    def cost(self) -> int:
        """What it weighs in a batch's budget (`--max-batch-tokens`): for text, its tokens."""
        ...

    @property
    def head(self) -> Head:
        """What the forward pass must return for it; a batch holds one head only."""
        ...

    @property
    def held_bytes(self) -> int:
        """The bytes it holds beyond what its tokens' share covers (an image's pixels and its
        output; 0 for text): what the server's admission prices it by, with its tokens."""
        ...


@dataclass(frozen=True)
class Parts:
    """One input prepared as several payloads (a long text's chunks, each within the model's
    length): each runs as an item of its own, and the input's output is the list of theirs."""

    payloads: tuple[Payload, ...]

    @property
    def cost(self) -> int:
        return sum(payload.cost for payload in self.payloads)


class Sink(Protocol):
    """Told an item's output besides its group (the result cache's in-flight entry)."""

    def resolve(self, output: Any) -> None: ...


@dataclass(eq=False, slots=True)
class WorkItem:
    """One prepared input of a group, ready to be batched: `payload` for the backend, `cost`
    for the scheduler's budget (a batch of n items costs n × its largest item's cost). `part`:
    which of its input's `Parts` it is (None: the whole input)."""

    group: RequestGroup
    index: int
    payload: Any
    cost: int
    head: Head = "embed"
    part: int | None = None
    sink: Sink | None = None

    @classmethod
    def of(
        cls, group: RequestGroup, index: int, payload: Payload, part: int | None = None
    ) -> WorkItem:
        return cls(group, index, payload, payload.cost, payload.head, part)

    @classmethod
    def all_of(cls, group: RequestGroup, index: int, payload: Payload | Parts) -> list[WorkItem]:
        """The items of one prepared input: one, or one per part (the group told first)."""
        if not isinstance(payload, Parts):
            return [cls.of(group, index, payload)]
        group.expand(index, len(payload.payloads))
        return [cls.of(group, index, each, part) for part, each in enumerate(payload.payloads)]

    def deliver(self, output: Any, ended_at: float) -> None:
        """The item's output, to its sink (if any) and its group (runner threads)."""
        if self.sink is not None:
            self.sink.resolve(output)
        self.group.set_output(self.index, output, ended_at, self.part)


@dataclass(frozen=True)
class Assignment:
    """A batch for one runner, and how many idle runners lend it their cores until it is done
    (the runner hands them back with `Scheduler.batch_ended`)."""

    items: list[WorkItem]
    borrowed: int = 0
    # Whether it holds background items (the express runner takes work only beside those).
    background: bool = False

    @property
    def padded_tokens(self) -> int:
        return len(self.items) * max(item.cost for item in self.items)

    @property
    def tokens(self) -> int:
        return sum(item.cost for item in self.items)


def items_left(queue: deque[WorkItem]) -> int:
    """Items of the queue's request not yet handed to a runner (waiting or not yet submitted)."""
    group = queue[0].group
    return group.items - group.submitted - group.cached + len(queue)
