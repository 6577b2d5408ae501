"""A server launcher that injects faults into the model's forward pass: test harness only.

`python -m tests.e2e.faults serve ...` runs `poolserve.commands.main` with a model backend that
wraps the real one: each runner's forward is wrapped once the real backend has loaded and warmed it
up (so warm-up is neither slowed nor poisoned). What to inject comes as JSON in the HARNESS_FAULTS
environment variable:

- `delay`: seconds every batch sleeps before its forward pass (a slow model);
- `slow_id`, `slow_delay`: batches holding token id `slow_id` sleep `slow_delay` seconds instead
  (a request that blocks the runner for a known time, while the others stay fast);
- `poison_id`, `poison`: batches holding token id `poison_id` raise; `poison` is `"error"`
  (RuntimeError: a failing batch) or `"fatal"` (a BaseException that is not an Exception: the
  runner thread dies);
- `garbage_id`: batches holding token id `garbage_id` return strings instead of vectors (a
  broken model: building the response fails with an error no handler expects);
- `load_delay`: seconds loading the model takes longer (a slow start, to interrupt).

`FaultyBackend` is also used in-process by the API tests.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tests.wrapped_backend import WrappedBackend, wrapping

ENV = "HARNESS_FAULTS"


class Fatal(BaseException):
    """Escapes the runner's per-batch `except Exception`, so the runner thread dies."""


def wrap_forward(
    forward: Callable[[Any, int], Sequence[Any]], faults: dict[str, Any]
) -> Callable[[Any, int], Sequence[Any]]:
    delay = float(faults.get("delay", 0.0))
    slow_id = faults.get("slow_id")
    slow_delay = float(faults.get("slow_delay", 0.0))
    poison_id = faults.get("poison_id")
    poison = faults.get("poison", "error")
    garbage_id = faults.get("garbage_id")

    def faulty(batch: Any, threads: int) -> Sequence[Any]:
        ids = [item.payload.input_ids for item in batch.items]
        if poison_id is not None and any(poison_id in item for item in ids):
            if poison == "fatal":
                raise Fatal("injected: the runner thread dies")
            raise RuntimeError("injected: this batch holds the poison token")
        if garbage_id is not None and any(garbage_id in item for item in ids):
            return [np.array(["not a number"]) for _ in ids]
        if slow_id is not None and any(slow_id in item for item in ids):
            time.sleep(slow_delay)
        elif delay:
            time.sleep(delay)
        return forward(batch, threads)

    return faulty


class FaultyBackend(WrappedBackend):
    """A backend whose runners' forwards carry the faults (the engine's backend seam)."""

    def __init__(self, inner: Any, faults: dict[str, Any]) -> None:
        super().__init__(inner)
        self.faults = faults

    def load(self) -> None:
        time.sleep(float(self.faults.get("load_delay", 0.0)))
        self.inner.load()

    def executor(self) -> Callable[[Any, int], Sequence[Any]]:
        return wrap_forward(self.inner.executor(), self.faults)


def faulty_backend(faults: dict[str, Any]) -> Callable[..., FaultyBackend]:
    """A `BackendFactory`: the real torch backend, wrapped."""
    factory: Callable[..., FaultyBackend] = wrapping(FaultyBackend, faults)
    return factory


def main(argv: Sequence[str]) -> int:
    import poolserve  # noqa: F401 - first: sets the threading environment before torch
    from poolserve.commands import main as cli_main

    faults = json.loads(os.environ.get(ENV) or "{}")
    return cli_main(list(argv), backend=faulty_backend(faults))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
