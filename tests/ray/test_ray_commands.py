"""`poolserve embed --ray` (joining the test's Ray instance) gives what the local job gives,
and resumes after SIGKILL; `poolserve serve --ray` starts its own Ray instance, serves and
stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow.dataset as ds
import pytest

from tests.e2e.conftest import free_port, server_env, wait_until_ready
from tests.e2e.test_bulk import kill_after_part
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

pytestmark = [pytest.mark.slow, pytest.mark.ray]

DOCUMENTS = 3000


def document(index: int) -> str:
    return " ".join(WORDS[(index * 5 + j) % len(WORDS)] for j in range(3 + index % 29))


def test_embed_on_ray_resumes_and_matches_the_engine(
    tmp_path: Path, ray_address: str, engine: Any
) -> None:
    corpus, output = tmp_path / "corpus.jsonl", tmp_path / "vectors.parquet"
    with corpus.open("wb") as file:
        for index in range(DOCUMENTS):
            file.write(orjson.dumps({"text": document(index), "key": f"doc-{index}"}) + b"\n")
        file.write(b'{"key": "no-text"}\n')
        # Too long for the model: refused on an actor, reported by the job like a local one.
        file.write(orjson.dumps({"text": " ".join(WORDS * 30), "key": "too-long"}) + b"\n")
    command = [
        *(sys.executable, "-m", "poolserve", "embed", str(corpus), "--output", str(output)),
        *("--id-field", "key", "--dtype", "float32", "--compile", "off", "--backend", "torch"),
        *("--part-rows", "250"),
        *("--ray", "--replicas", "2", "--ray-address", ray_address, "--log-level", "debug"),
    ]
    kill_after_part(command, 2)
    finished = subprocess.run(command, env=server_env(), capture_output=True, text=True)
    assert finished.returncode == 0, finished.stdout + finished.stderr[-3000:]
    assert "resumed after" in finished.stdout

    table = ds.dataset(output).to_table()
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(DOCUMENTS)]
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy()
    texts = [document(i) for i in range(DOCUMENTS)]
    assert_close_vectors(vectors.reshape(DOCUMENTS, -1), engine.embed(texts), FP32_COSINE)
    errors = (tmp_path / "vectors.parquet.errors.jsonl").read_bytes().splitlines()
    reported = [orjson.loads(line) for line in errors]
    assert [error["line"] for error in reported] == [DOCUMENTS + 1, DOCUMENTS + 2]
    assert reported[1]["reason"].endswith("(see --truncate)"), reported[1]


def test_serve_on_ray_starts_serves_and_stops(tmp_path: Path, engine: Any) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    command = [
        *(sys.executable, "-m", "poolserve", "serve", "--ray", "--replicas", "2"),
        *("--port", str(port), "--dtype", "float32", "--compile", "off", "--backend", "torch"),
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=server_env(), stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(process, url, log)
        response = httpx.post(f"{url}/v1/embeddings", json={"input": ["a ray", "b"]}, timeout=60)
        assert response.status_code == 200, response.text
        vectors = np.array([item["embedding"] for item in response.json()["data"]])
        assert_close_vectors(vectors, engine.embed(["a ray", "b"]))
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(120)
    assert returncode == 0, log.read_text()[-3000:]
