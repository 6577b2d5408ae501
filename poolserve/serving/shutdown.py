"""The grace period a shutdown gives admitted requests, and the server that keeps to it.

Told to stop (SIGTERM/SIGINT), the server stops accepting and admitted requests get
`--shutdown-timeout` seconds to finish. When the grace period ends, each request still running
answers 503 itself (its handler waits on `GracePeriod.over`), so uvicorn finds every task done
and nothing is cancelled mid-response. The engine is then closed with what is left of the time,
abandoning a runner stuck in a forward pass. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from types import FrameType
from typing import NoReturn

import uvicorn

# Seconds past the grace period for the last answers to go out and the engine to close.
CLOSING_SECONDS = 2


class GracePeriod:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._over: asyncio.Future[None] | None = None
        self._begun: asyncio.Future[None] | None = None
        self._ends_at: float | None = None

    def over(self) -> asyncio.Future[None]:
        """Completes when the grace period has ended (a future of the running loop, shared by
        every request, never cancelled by them)."""
        if self._over is None:
            self._over = asyncio.get_running_loop().create_future()
        return self._over

    @property
    def started(self) -> bool:
        """Whether the server has been told to stop."""
        return self._ends_at is not None

    def begun(self) -> asyncio.Future[None]:
        """Completes when the server is told to stop (the gRPC front end drains then)."""
        if self._begun is None:
            self._begun = asyncio.get_running_loop().create_future()
        return self._begun

    def start(self) -> None:
        """On the event loop, when the server is told to stop."""
        if self._ends_at is not None:
            return
        self._ends_at = time.monotonic() + self.seconds
        asyncio.get_running_loop().call_later(self.seconds, self._end)
        begun = self.begun()
        if not begun.done():
            begun.set_result(None)

    def _end(self) -> None:
        over = self.over()
        if not over.done():
            over.set_result(None)

    def seconds_left(self) -> float:
        """Of the whole shutdown (grace period and closing), from now."""
        ends_at = self._ends_at if self._ends_at is not None else time.monotonic() + self.seconds
        return max(0.0, ends_at + CLOSING_SECONDS - time.monotonic())


def exit_now(sig: int, why: str) -> NoReturn:
    """End the process at once (from a signal handler): one line on stderr, exit 128 + sig."""
    os.write(2, f"poolserve: {why}: exiting now\n".encode())
    os._exit(128 + sig)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, starting the grace period on the first signal and exiting on the
    second."""

    def __init__(self, config: uvicorn.Config, grace: GracePeriod) -> None:
        super().__init__(config)
        self.grace = grace

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            exit_now(sig, f"second {signal.Signals(sig).name}")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet
            pass
        else:
            loop.call_soon_threadsafe(self.grace.start)
        super().handle_exit(sig, frame)
