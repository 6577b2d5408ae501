"""Progress lines for start-up work that takes a while (loading weights, exporting, quantizing,
compiling, measuring): one line when it starts, one every `EVERY` seconds while it runs, saying
what, for which model and thread count, and for how long so far, so that a first start is never
silent."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

EVERY = 10.0


@contextmanager
def progress(
    logger: logging.Logger, what: str, every: float = EVERY, *, announce: bool = True
) -> Iterator[None]:
    """Log `what` now (unless not to `announce` it: work that is usually quick, whose own line
    says when it ends) and every `every` seconds until the block ends."""
    started = time.perf_counter()
    done = threading.Event()
    if announce:
        logger.info("%s ...", what)

    def report() -> None:
        # A timed wait on the event: it wakes at once when the work ends.
        while not done.wait(every):
            logger.info("%s: %.0f s so far", what, time.perf_counter() - started)

    reporter = threading.Thread(target=report, name="poolserve-progress", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()
