"""A Ray instance of this machine alone, on loopback, started and stopped by the Ray tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import ray

# Room for a 2-replica Serve app and two 2-actor pools at once; Ray counts these, the cores
# are shared.
LOGICAL_CPUS = 6


@pytest.fixture(scope="session")
def ray_address() -> Iterator[str]:
    """The address of the test's Ray instance (joined in process; commands take it as
    --ray-address)."""
    ray.init(
        address="local",
        num_cpus=LOGICAL_CPUS,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
