"""What a caller asks beside its body: `x-priority`, `x-request-timeout` and
`x-expect-embedding-space` (HTTP headers, gRPC metadata), as sent. The door reads the first two
(the lane a request waits in, and how long it may wait); the serving step all three."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from poolserve.config.priorities import DEFAULT_PRIORITY
from poolserve.engine.lanes import header_priority
from poolserve.errors import PoolserveError


@dataclass(frozen=True)
class Asked:
    """The three, as sent (None: not asked)."""

    priority: str | None = None
    timeout: str | None = None
    expect_space: str | None = None

    @classmethod
    def of(cls, get: Callable[[str], str | None]) -> Asked:
        """From a header or metadata lookup (`get(name)`: its value, or None)."""
        return cls(get("x-priority"), get("x-request-timeout"), get("x-expect-embedding-space"))

    def door_lane(self) -> int:
        """The lane to wait in at the door (a bad `x-priority` counts as the default there;
        the request is refused with a 400 once admitted)."""
        try:
            return header_priority(self.priority) or DEFAULT_PRIORITY
        except PoolserveError:
            return DEFAULT_PRIORITY

    def door_wait(self) -> float | None:
        """The `x-request-timeout` asked for, if it is a number of seconds: it bounds the wait
        at the door too (a bad one is refused once admitted)."""
        try:
            seconds = float(self.timeout) if self.timeout is not None else None
        except ValueError:
            return None
        return seconds if seconds is not None and seconds > 0 else None
