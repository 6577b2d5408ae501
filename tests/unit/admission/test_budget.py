"""The memory admitted requests may hold (the memory bound of docs/production.md), and the default
--max-queued-tokens sized from the machine's memory by it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from poolserve.admission.budget import (
    MOST_QUEUED_TOKENS,
    admitted_bytes,
    bytes_per_token,
    cgroup_limit_files,
    default_queued_tokens,
    machine_memory,
    sized_for,
)
from poolserve.config import ServerConfig


def test_the_default_limits_fit_together_for_models_up_to_8192_tokens() -> None:
    """The rule: one request may cost at most half of what all admitted requests may (so one
    legal request never locks the others out), at least one full-length input, and at least
    `max_client_batch_size` inputs of the least cost. The bound sized from memory fits it."""
    defaults = ServerConfig()
    assert defaults.max_queued_tokens is None  # sized from memory once the models are known
    for max_model_len in (128, 256, 512, 8192):
        sized = sized_for(defaults, [(384, False)], max_model_len)
        assert sized.request_tokens == sized.queued_tokens // 2
        sized.check_limits(max_model_len)
    with pytest.raises(ValueError, match="less than the model's length limit 256"):
        replace(defaults, max_request_tokens=200, max_client_batch_size=50).check_limits(256)
    # A request limit given alone: the bound sized for it holds two such requests.
    alone = sized_for(replace(defaults, max_request_tokens=1_000_000), [(384, False)], 512)
    assert alone.queued_tokens >= 2_000_000
    alone.check_limits(512)


def test_the_default_bound_is_what_an_eighth_of_memory_holds_by_the_readme_formula() -> None:
    """T × (128 + 5·D) + 32 KiB × R over the machine's memory: each model's D, the costliest
    deciding; never less than the request limits need, never more than MOST_QUEUED_TOKENS."""
    gib = 2**30
    embedding = default_queued_tokens(
        [(384, False)], max_requests=1024, least=16384, memory=8 * gib
    )
    assert embedding == (gib - 1024 * 32 * 1024) // (128 + 5 * 384)
    assert admitted_bytes(embedding, 1024, bytes_per_token(384, False)) <= gib
    # ColBERT's per-token outputs and SPLADE's vocabulary cost more per token: a smaller bound.
    both = [(384, False), (128, True)]
    assert default_queued_tokens(both, max_requests=1024, least=16384, memory=8 * gib) == (
        (gib - 1024 * 32 * 1024) // (128 + 20 * 128)
    )
    sparse = default_queued_tokens([(30522, False)], max_requests=1024, least=16384, memory=8 * gib)
    assert sparse == 16384  # what 1 GiB holds is less than the limits need: the least wins
    huge = default_queued_tokens([(384, False)], max_requests=1024, least=16384, memory=2**50)
    assert huge == MOST_QUEUED_TOKENS
    assert machine_memory() > 0


def test_the_memory_limit_is_read_from_the_processs_own_cgroups_too() -> None:
    v2 = cgroup_limit_files("0::/system.slice/poolserve.service\n")
    assert v2 == [
        Path("/sys/fs/cgroup/system.slice/poolserve.service/memory.max"),
        Path("/sys/fs/cgroup/system.slice/memory.max"),
        Path("/sys/fs/cgroup/memory.max"),
    ]
    v1 = cgroup_limit_files("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    assert v1 == [
        Path("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/docker/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory.max"),
    ]


def test_servers_sharing_a_machine_size_their_bounds_from_their_share() -> None:
    """A Ray replica of a quarter of the node's cores sizes its default bound from a quarter
    of its memory: replicas together stay within an eighth of it."""
    defaults = ServerConfig()
    whole = sized_for(defaults, [(384, False)], 256).queued_tokens
    quarter = sized_for(defaults, [(384, False)], 256, memory_share=0.25).queued_tokens
    assert quarter < whole / 3
