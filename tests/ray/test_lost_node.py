"""`poolserve embed --ray` on a two-node Ray cluster (two raylets on this host, loopback) rides
out the loss of a node mid-job: its actor's calls go to the other node's, and every record is
written once, in input order, with the local engine's vectors (issue 63)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.dataset as ds
import pytest
from ray.cluster_utils import Cluster

from tests.e2e.conftest import server_env
from tests.ray.test_ray_commands import document
from tests.reference import FP32_COSINE, assert_close_vectors

pytestmark = [pytest.mark.slow, pytest.mark.ray]

DOCUMENTS = 3000
# Far more than the job takes with one node left (about 40 s here, the model's load included).
JOB_SECONDS = 300


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[Cluster, Any]]:
    """A head node and a worker node of one CPU each (this test process does not join: it
    holds the session's own Ray instance). The nodes take this host's own address: a driver
    joining `127.0.0.1:port` is sent to it by Ray (`resolve_ip_for_localhost`), so nodes
    bound to loopback alone cannot be joined by the command. Nothing leaves the host."""
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    worker = cluster.add_node(num_cpus=1)
    try:
        yield cluster, worker
    finally:
        cluster.shutdown()


def test_embed_on_ray_survives_a_lost_node(
    tmp_path: Path, two_nodes: tuple[Cluster, Any], engine: Any
) -> None:
    cluster, worker = two_nodes
    corpus, output = tmp_path / "corpus.jsonl", tmp_path / "vectors.parquet"
    with corpus.open("wb") as file:
        for index in range(DOCUMENTS):
            file.write(orjson.dumps({"text": document(index), "key": f"doc-{index}"}) + b"\n")
    command = [
        *(sys.executable, "-m", "poolserve", "embed", str(corpus), "--output", str(output)),
        *("--id-field", "key", "--dtype", "float32", "--compile", "off", "--backend", "torch"),
        *("--part-rows", "100", "--log-level", "debug"),
        *("--ray", "--replicas", "2", "--ray-address", cluster.address),
    ]
    process = subprocess.Popen(
        command, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    # A job that hangs is killed, so that its output ends and the test fails with its log.
    watchdog = threading.Timer(JOB_SECONDS, process.kill)
    watchdog.start()
    seen: list[str] = []
    ready = parts = 0
    for raw in process.stdout:  # the worker node killed mid-job, once both actors work
        seen.append(raw.decode(errors="replace"))
        ready += "an engine actor is ready" in seen[-1]
        parts += "wrote part " in seen[-1]
        if ready == 2 and parts >= 3:
            cluster.remove_node(worker, allow_graceful=False)
            break
    seen.extend(raw.decode(errors="replace") for raw in process.stdout)
    process.wait()
    watchdog.cancel()
    log = "".join(seen)
    assert process.returncode == 0, log[-4000:]
    assert "an engine actor was lost" in log, log[-4000:]

    table = ds.dataset(output).to_table()
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(DOCUMENTS)]
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy()
    texts = [document(i) for i in range(DOCUMENTS)]
    assert_close_vectors(vectors.reshape(DOCUMENTS, -1), engine.embed(texts), FP32_COSINE)


def test_actors_the_cluster_cannot_place_are_a_one_line_refusal_in_bounded_time(
    ray_address: str,
) -> None:
    from poolserve import EngineConfig, ModelConfig
    from poolserve.ray.bulk_actors import RayEmbedder
    from poolserve.ray.engine_actor import EngineActorsLostError

    with pytest.raises(EngineActorsLostError) as refused:
        RayEmbedder(
            ModelConfig(dtype="float32"),
            EngineConfig(),
            replicas=2,
            replica_cpus=64,  # more than any node has
            wait_seconds=2,
        )
    message = str(refused.value)
    assert "none of the 2 engine actors of 64 CPU(s) was ready within 2 s" in message
    assert "\n" not in message and "--replicas" in message
