"""A server launcher that injects faults into the model's forward pass: test harness only.

`python -m tests.e2e.faults serve ...` runs `poolserve.cli.main` after wrapping the forward the
runner thread gets once the model is loaded and warmed up (so warm-up is neither slowed nor
poisoned). What to inject comes as JSON in the HARNESS_FAULTS environment variable:

- `delay`: seconds every batch sleeps before its forward pass (a slow model);
- `slow_id`, `slow_delay`: batches holding token id `slow_id` sleep `slow_delay` seconds instead
  (a request that blocks the runner for a known time, while the others stay fast);
- `poison_id`, `poison`: batches holding token id `poison_id` raise; `poison` is `"error"`
  (RuntimeError: a failing batch) or `"fatal"` (a BaseException that is not an Exception: the
  runner thread dies).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

ENV = "HARNESS_FAULTS"


class Fatal(BaseException):
    """Escapes the runner's per-batch `except Exception`, so the runner thread dies."""


def wrap_forward(
    forward: Callable[[Any], Sequence[Any]], faults: dict[str, Any]
) -> Callable[..., Any]:
    delay = float(faults.get("delay", 0.0))
    slow_id = faults.get("slow_id")
    slow_delay = float(faults.get("slow_delay", 0.0))
    poison_id = faults.get("poison_id")
    poison = faults.get("poison", "error")

    def faulty(batch: Any) -> Sequence[Any]:
        ids = [item.input_ids for item in batch.items]
        if poison_id is not None and any(poison_id in item for item in ids):
            if poison == "fatal":
                raise Fatal("injected: the runner thread dies")
            raise RuntimeError("injected: this batch holds the poison token")
        if slow_id is not None and any(slow_id in item for item in ids):
            time.sleep(slow_delay)
        elif delay:
            time.sleep(delay)
        return forward(batch)

    return faulty


def install(faults: dict[str, Any]) -> None:
    from poolserve.engine.core import EngineCore

    load_forward = EngineCore._load_forward

    def patched(self: EngineCore) -> Callable[..., Any]:
        return wrap_forward(load_forward(self), faults)

    EngineCore._load_forward = patched  # type: ignore[method-assign]


def main(argv: Sequence[str]) -> int:
    import poolserve  # noqa: F401 - first: sets the threading environment before torch
    from poolserve.cli import main as cli_main

    install(json.loads(os.environ.get(ENV) or "{}"))
    return cli_main(list(argv))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
