"""Engine statistics: counters the scheduler and runner threads update and anyone may read.

Each counter has one writer thread; readers see plain ints (atomic under the GIL), so no lock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class EngineStats:
    batches: int = 0
    items: int = 0
    padded_tokens: int = 0
    failed_batches: int = 0
    # Seconds the runner spent in forward passes (the rest of its time it waited for work).
    busy_seconds: float = 0.0
    # Items dropped before reaching the model because their request was cancelled or failed.
    items_skipped: int = 0
    batch_sizes: Counter[int] = field(default_factory=Counter)
    # Padded tokens per batch.
    batch_tokens: Counter[int] = field(default_factory=Counter)

    @property
    def max_batch_size(self) -> int:
        return max(self.batch_sizes, default=0)

    def snapshot(self) -> dict[str, object]:
        return {
            "batches": self.batches,
            "items": self.items,
            "padded_tokens": self.padded_tokens,
            "failed_batches": self.failed_batches,
            "busy_seconds": self.busy_seconds,
            "items_skipped": self.items_skipped,
            "max_batch_size": self.max_batch_size,
            "batch_sizes": dict(sorted(self.batch_sizes.items())),
        }
