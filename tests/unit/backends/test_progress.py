"""Progress lines: one when the work starts, more while it runs, none after it ends."""

from __future__ import annotations

import logging
import threading

from poolserve.backends.progress import progress


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.reported = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if "so far" in record.getMessage():
            self.reported.set()


def test_work_that_runs_on_is_reported_until_it_ends() -> None:
    logger = logging.getLogger("tests.progress")
    logger.setLevel(logging.INFO)
    lines = _Lines()
    logger.addHandler(lines)
    try:
        with progress(logger, "exporting m", every=0.01):
            assert lines.reported.wait(10)  # the block runs until a progress line came
        count = len(lines.lines)
        assert lines.lines[0] == "exporting m ..."
        assert all(line.startswith("exporting m: ") for line in lines.lines[1:])
        with progress(logger, "quick", every=60):
            pass
        assert lines.lines[count:] == ["quick ..."]  # the reporter stopped with its block
    finally:
        logger.removeHandler(lines)
