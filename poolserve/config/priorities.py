"""What a priority is: vLLM's `priority`, an integer from `HIGHEST_PRIORITY` (runs first) to
`LOWEST_PRIORITY` (runs last), `DEFAULT_PRIORITY` when a request names none; above the default
is background work. Settings (a bulk job's `--priority`), the wire schemas and the engine all
read the range here; what the lanes do with it is engine/lanes.py."""

from __future__ import annotations

HIGHEST_PRIORITY = -10
LOWEST_PRIORITY = 10
DEFAULT_PRIORITY = 0
# The lanes a request can be in, highest first.
LANES = range(HIGHEST_PRIORITY, LOWEST_PRIORITY + 1)
PRIORITY_RANGE = (
    f"an integer from {HIGHEST_PRIORITY} (runs first) to {LOWEST_PRIORITY} (runs last); "
    f"{DEFAULT_PRIORITY} by default"
)


def is_background(priority: int) -> bool:
    """Below the default lane: bound by the background share of admission, run in slices."""
    return priority > DEFAULT_PRIORITY
