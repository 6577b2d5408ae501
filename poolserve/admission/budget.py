"""The memory admitted requests may hold (the memory bound, docs/production.md), and the
default `--max-queued-tokens` sized from the machine's memory by it.

Admitted requests hold at most `T × (128 + 5·D) + 32 KiB × R` bytes: T tokens admitted
(`--max-queued-tokens`), R requests (`--max-concurrent-requests`), D the floats of one input's
output (`20·D` where the output is per token). With no `--max-queued-tokens` given, T is what
`MEMORY_SHARE` of the machine's memory (its cgroup's limit where lower) holds by that formula,
for the served model that costs the most per token; never less than the request limits need to
fit together, never more than `MOST_QUEUED_TOKENS`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from poolserve.config import ServerConfig

# Admitted requests may hold this share of the machine's memory by default.
MEMORY_SHARE = 1 / 8
BYTES_PER_REQUEST = 32 * 1024
# More admitted work than this is minutes of any CPU's work: a longer queue only delays.
MOST_QUEUED_TOKENS = 2**21
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_LIMITS = (
    CGROUP_ROOT / "memory.max",  # cgroup v2, the container's
    CGROUP_ROOT / "memory/memory.limit_in_bytes",  # v1
)


def bytes_per_token(output_floats: int, per_token: bool) -> int:
    """What one admitted token may hold: its share of body, texts, ids and response (128
    bytes), and its output's floats (at most one input per 4 tokens, 4 bytes a float, with
    the response's text form)."""
    return 128 + (20 if per_token else 5) * output_floats


def admitted_bytes(max_queued_tokens: int, max_requests: int, per_token_bytes: int) -> int:
    """The memory bound on what admitted requests hold, in bytes."""
    return max_queued_tokens * per_token_bytes + BYTES_PER_REQUEST * max_requests


def machine_memory() -> int:
    """The bytes of memory this process may use: the machine's, or the lowest limit of its
    cgroups (the container's, and its own: a systemd unit's `MemoryMax=`)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        own = cgroup_limit_files(Path("/proc/self/cgroup").read_text())
    except OSError:
        own = []
    for path in (*CGROUP_LIMITS, *own):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def sized_bound_message(tokens: int, max_requests: int, outputs: Iterable[tuple[int, bool]]) -> str:
    """The start-up log line of a bound sized from memory."""
    per_token = max(bytes_per_token(floats, per_token) for floats, per_token in outputs)
    held = admitted_bytes(tokens, max_requests, per_token)
    return (
        f"admission: up to {tokens} tokens in admitted requests (--max-queued-tokens, sized "
        f"from memory: they hold at most {held / 2**30:.1f} GiB of this machine's "
        f"{machine_memory() / 2**30:.1f} GiB by the memory bound of the docs' Production and "
        "limits page)"
    )


def cgroup_limit_files(proc_self_cgroup: str) -> list[Path]:
    """The memory limit files of a process's cgroup and its parents, from its
    `/proc/self/cgroup` (v2: `0::/system.slice/poolserve.service`, a systemd unit's
    `MemoryMax=`; v1: `4:memory:/docker/...`)."""
    found: list[Path] = []
    for line in proc_self_cgroup.splitlines():
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        group = Path(path.lstrip("/"))
        if controllers == "":
            root, name = CGROUP_ROOT, "memory.max"
        elif "memory" in controllers.split(","):
            root, name = CGROUP_ROOT / "memory", "memory.limit_in_bytes"
        else:
            continue
        found += [root / parent / name for parent in (group, *group.parents)]
    return found


def default_queued_tokens(
    outputs: Iterable[tuple[int, bool]], *, max_requests: int, least: int, memory: int
) -> int:
    """`--max-queued-tokens` when none is given: what MEMORY_SHARE of `memory` holds for the
    costliest of the models' `outputs` (floats, per token), at least `least`."""
    per_token = max(bytes_per_token(floats, per_token) for floats, per_token in outputs)
    room = memory * MEMORY_SHARE - BYTES_PER_REQUEST * max_requests
    return max(least, min(MOST_QUEUED_TOKENS, int(room // per_token)))


def sized_for(
    config: ServerConfig,
    outputs: Sequence[tuple[int, bool]],
    max_model_len: int,
    *,
    memory_share: float = 1.0,
) -> ServerConfig:
    """`config` with `max_queued_tokens` sized from the machine's memory (this server's
    `memory_share` of it, where several share the machine) for models of these `outputs`
    where none was given."""
    if config.max_queued_tokens is not None:
        return config
    tokens = default_queued_tokens(
        outputs,
        max_requests=config.max_concurrent_requests,
        least=config.least_queued_tokens(max_model_len),
        memory=int(machine_memory() * memory_share),
    )
    return replace(config, max_queued_tokens=tokens)
