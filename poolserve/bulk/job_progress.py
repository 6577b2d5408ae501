"""A bulk job's progress: records done (embedded, or found bad) as the engine's calls return, on
a tqdm bar on a terminal, else in a log line every `LOG_EVERY` seconds while the job runs."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger(__name__)


class Progress:
    """Records done (embedded, or found bad), as the engine's calls return: a tqdm bar (rate,
    ETA) on a terminal, else a log line every `LOG_EVERY` seconds while the job runs."""

    LOG_EVERY = 10.0

    def __init__(self, total: int | None, done: int) -> None:
        self._bar: Any = None
        self._lock = threading.Lock()
        self._done = done
        self._total = total
        self._started = time.perf_counter()
        self._first = done
        self._closed = threading.Event()
        self._reporter: threading.Thread | None = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, unit=" records", dynamic_ncols=True)
        else:
            self._reporter = threading.Thread(
                target=self._report, name="poolserve-embed-progress", daemon=True
            )
            self._reporter.start()

    def advance(self, count: int) -> None:
        """Count `count` more records done (from any thread)."""
        with self._lock:
            self._done += count
            if self._bar is not None and not self._closed.is_set():
                self._bar.update(count)

    def on_done(self, count: int) -> Callable[[Future[Any]], None]:
        """A callback for a call of `count` records: counts them when it returns."""
        return lambda _: self.advance(count)

    def _report(self) -> None:
        # A timed wait on the event: it wakes at once when the job ends.
        while not self._closed.wait(self.LOG_EVERY):
            with self._lock:
                done = self._done
            elapsed = time.perf_counter() - self._started
            rate = (done - self._first) / elapsed
            eta = ""
            if self._total and rate:
                eta = f", about {max(self._total - done, 0) / rate:.0f} s left"
            of = f" of {self._total}" if self._total else ""
            logger.info("%d%s records, %.0f records/s%s", done, of, rate, eta)

    def close(self) -> None:
        self._closed.set()
        if self._reporter is not None:
            self._reporter.join()
        if self._bar is not None:
            self._bar.close()
