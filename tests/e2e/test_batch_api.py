"""OpenAI's Batch API, driven by the official openai SDK against real servers: upload, create,
poll, download, list, delete; vectors against sentence-transformers; a line the route refuses in
the error file; bad input files failing validation by line; the bounds of an upload; cancel; and
a server killed with SIGKILL mid-batch, then drained with SIGTERM, then started again, answering
every request exactly once."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from poolserve.server.batch_api.batch_schemas import BatchList, BatchObject, FileList
from tests.e2e.conftest import free_port, server_env
from tests.e2e.harness import Server, running_server
from tests.reference import FP32_COSINE, MODEL_ID, Corpus, assert_close_vectors

pytestmark = pytest.mark.slow  # real server processes

KEY = "batch-key"
ENDED = ("completed", "failed", "cancelled", "expired")
# A small file bound, and a folder bound a few files fill.
FILE_BYTES = 150_000
FOLDER_BYTES = 1_500_000


def request_line(custom_id: str, body: dict[str, Any], url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def uploaded(client: openai.OpenAI, lines: list[str]) -> Any:
    data = ("\n".join(lines) + "\n").encode()
    return client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")


def until_ended(server: Server, batch_id: str, timeout: float = 120) -> Any:
    """The batch once its server has logged its end (the line it writes as the batch ends)."""
    server.wait_for_output(
        tuple(f"batch {batch_id} {status}" for status in (*ENDED, "failed validation")), timeout
    )
    batch = sdk(server).batches.retrieve(batch_id)
    assert batch.status in ENDED, batch
    return batch


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("batch-server")
    flags = ["--api-key", KEY, "--batch-dir", str(directory / "batches")]
    flags += ["--max-batch-file-bytes", str(FILE_BYTES), "--max-batch-dir-bytes", str(FOLDER_BYTES)]
    with running_server(directory, flags) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return sdk(server)


def test_an_embeddings_batch_answers_each_line_as_the_route_does(
    client: openai.OpenAI, server: Server, corpus: Corpus
) -> None:
    texts = corpus.within[:120]
    lines = [request_line(f"doc-{i}", {"input": text}) for i, text in enumerate(texts)]
    lines.append(request_line("empty", {"input": ""}))  # the route's 400
    lines.append(request_line("short", {"input": texts[:2], "dimensions": 64, "model": MODEL_ID}))
    source = uploaded(client, lines)
    assert (source.purpose, source.filename, source.status) == (
        "batch",
        "requests.jsonl",
        "processed",
    )
    created = client.batches.create(
        input_file_id=source.id,
        endpoint="/v1/embeddings",
        completion_window="24h",
        metadata={"corpus": "nightly"},
    )
    assert created.status == "validating" and created.metadata == {"corpus": "nightly"}
    batch = until_ended(server, created.id)
    assert batch.status == "completed", batch
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (122, 121, 1)
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at

    output = lines_of(client, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"doc-{i}" for i in range(120)] + ["short"]
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in output)
    assert len({line["id"] for line in output}) == len(output)
    # A body without encoding_format is answered in floats, as the route answers it.
    vectors = np.array(
        [line["response"]["body"]["data"][0]["embedding"] for line in output[:120]], np.float32
    )
    assert_close_vectors(vectors, corpus.ref_within[:120], FP32_COSINE, texts)
    # The same body sent alone gets the same answer, but for its id and time.
    short = output[-1]["response"]["body"]
    alone = client.embeddings.create(input=texts[:2], dimensions=64, model=MODEL_ID)
    assert short["model"] == alone.model and short["usage"] == alone.usage.model_dump()
    assert [len(item["embedding"]) for item in short["data"]] == [64, 64]

    (refused,) = lines_of(client, batch.error_file_id)
    assert refused["custom_id"] == "empty"
    assert refused["response"]["status_code"] == 400
    assert "input 0 is empty" in refused["response"]["body"]["error"]["message"]

    # The answers are the shapes /docs documents (unknown fields forbidden).
    key = {"authorization": f"Bearer {KEY}"}
    BatchObject.model_validate(httpx.get(f"{server.url}/v1/batches/{batch.id}", headers=key).json())
    BatchList.model_validate(httpx.get(f"{server.url}/v1/batches", headers=key).json())
    FileList.model_validate(httpx.get(f"{server.url}/v1/files", headers=key).json())
    listed = {each.id for each in client.files.list()}
    assert {source.id, batch.output_file_id, batch.error_file_id} <= listed
    assert created.id in {each.id for each in client.batches.list(limit=5)}
    output_file = client.files.retrieve(batch.output_file_id)
    assert output_file.purpose == "batch_output" and output_file.bytes > 0
    assert client.files.delete(batch.output_file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(batch.output_file_id)
    metrics = server.metrics({"authorization": f"Bearer {KEY}"})
    assert 'poolserve_batches_finished_total{status="completed"}' in metrics
    assert 'poolserve_batch_requests_total{status="failed"}' in metrics


def test_a_rerank_batch_is_answered_like_the_route(client: openai.OpenAI, server: Server) -> None:
    body = {
        "query": "What is the capital of France?",
        "documents": ["Paris is the capital of France.", "The river keeps running."],
    }
    batch = client.batches.create(
        input_file_id=uploaded(client, [request_line("q", body, "/v1/rerank")]).id,
        endpoint="/v1/rerank",
        completion_window="24h",
    )
    batch = until_ended(server, batch.id)
    (line,) = lines_of(client, batch.output_file_id)
    alone = httpx.post(
        f"{server.url}/v1/rerank", json=body, headers={"authorization": f"Bearer {KEY}"}
    ).json()
    answered = line["response"]["body"]
    assert [r["index"] for r in answered["results"]] == [r["index"] for r in alone["results"]]
    np.testing.assert_allclose(
        [r["relevance_score"] for r in answered["results"]],
        [r["relevance_score"] for r in alone["results"]],
        atol=1e-6,
    )


def test_a_file_that_is_not_a_batch_fails_validation_naming_its_lines(
    client: openai.OpenAI, server: Server
) -> None:
    lines = [
        request_line("a", {"input": "fine"}),
        "{not json",
        json.dumps({"method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}),
        request_line("a", {"input": "again"}),
        request_line("b", {"input": "x"}, url="/v1/rerank"),
    ]
    batch = client.batches.create(
        input_file_id=uploaded(client, lines).id,
        endpoint="/v1/embeddings",
        completion_window="24h",
    )
    batch = until_ended(server, batch.id)
    assert batch.status == "failed" and batch.output_file_id is None
    assert batch.errors is not None
    found = {(error.line, error.code) for error in batch.errors.data}
    assert found == {
        (2, "invalid_json_line"),
        (3, "missing_required_parameter"),
        (4, "duplicate_custom_id"),
        (5, "mismatched_url"),
    }


def test_a_batch_that_cannot_run_is_refused_at_once(client: openai.OpenAI) -> None:
    source = uploaded(client, [request_line("a", {"input": "x"})])
    with pytest.raises(openai.BadRequestError, match="not one a batch can send to"):
        client.batches.create(
            input_file_id=source.id, endpoint="/v1/chat/completions", completion_window="24h"
        )  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="completion_window must be"):
        client.batches.create(
            input_file_id=source.id, endpoint="/v1/embeddings", completion_window="1h"
        )  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError, match="no file"):
        client.batches.create(
            input_file_id="file-nothere", endpoint="/v1/embeddings", completion_window="24h"
        )
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nothere")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("a.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")


def test_uploads_past_the_bounds_are_refused_before_they_are_kept(
    client: openai.OpenAI, server: Server
) -> None:
    before = {each.id for each in client.files.list()}
    with pytest.raises(openai.APIStatusError, match="--max-batch-file-bytes") as too_big:
        client.files.create(
            file=("big.jsonl", io.BytesIO(b"x" * (FILE_BYTES + 1))), purpose="batch"
        )
    assert too_big.value.status_code == 413
    with pytest.raises(openai.APIStatusError, match="more than 50,000 lines") as too_long:
        client.files.create(file=("long.jsonl", io.BytesIO(b"\n" * 50_001)), purpose="batch")
    assert too_long.value.status_code == 413
    # Fill the folder: the upload that would pass its bound gets 507 with the figures.
    kept = []
    with pytest.raises(openai.APIStatusError, match="--max-batch-dir-bytes") as full:
        for _ in range(FOLDER_BYTES // (FILE_BYTES - 1000) + 1):
            kept.append(
                client.files.create(
                    file=("f.jsonl", io.BytesIO(b"y" * (FILE_BYTES - 1000))), purpose="batch"
                )
            )
    assert full.value.status_code == 507
    assert f"{FOLDER_BYTES:,}" in str(full.value)
    for each in kept:
        client.files.delete(each.id)
    assert {each.id for each in client.files.list()} == before
    leftovers = [
        p for p in Path(server_batch_dir(server)).rglob("*") if p.name.startswith(".upload")
    ]
    assert not leftovers
    # Behind the API key, like every route.
    assert httpx.get(f"{server.url}/v1/files").status_code == 401
    assert httpx.post(f"{server.url}/v1/batches", json={}).status_code == 401


def test_a_second_server_on_the_same_folder_is_refused_in_one_line(server: Server) -> None:
    """Two servers resuming one folder's batches would answer their lines twice."""
    command = [sys.executable, "-m", "poolserve", "serve", "--port", str(free_port())]
    command += ["--batch-dir", server_batch_dir(server), "--compile", "off"]
    done = subprocess.run(command, env=server_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    refusals = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(refusals) == 1 and "give each server a --batch-dir of its own" in refusals[0]
    assert sdk(server).files.list() is not None  # the first one serves on


def server_batch_dir(server: Server) -> str:
    command = server.process.args
    assert isinstance(command, list)
    return str(command[command.index("--batch-dir") + 1])


def killed_after_a_checkpoint(directory: Path, flags: list[str], lines: list[str]) -> str:
    """A batch of `lines` on a slow server (a few seconds a run), killed with SIGKILL once its
    first checkpoint is written; its id."""
    with running_server(directory, flags, faults={"delay": 0.03}) as server:
        client = sdk(server)
        batch = client.batches.create(
            input_file_id=uploaded(client, lines).id,
            endpoint="/v1/embeddings",
            completion_window="24h",
        )
        server.wait_for_output(f"of {len(lines)} requests answered", timeout=120)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(30)
    return batch.id


def test_a_batch_killed_drained_and_resumed_answers_every_request_once(
    tmp_path: Path, corpus: Corpus
) -> None:
    """SIGKILL after the first checkpoint, SIGTERM after the next, then to the end; and a
    cancelled batch keeps the lines it answered."""
    flags = ["--api-key", KEY, "--batch-dir", str(tmp_path / "batches")]
    texts = (corpus.within * 10)[:1600]
    lines = [request_line(f"r{i}", {"input": text}) for i, text in enumerate(texts)]
    batch_id = killed_after_a_checkpoint(tmp_path, flags, lines)
    with running_server(tmp_path, flags, faults={"delay": 0.03}) as second:
        second.wait_for_output("resumed,", timeout=60)
        answered = sdk(second).batches.retrieve(batch_id).request_counts.completed
        assert 0 < answered < 1600
        assert second.stop() in (0, -signal.SIGTERM)
    assert "Traceback" not in second.output()
    with running_server(tmp_path, flags) as third:
        client = sdk(third)
        done = until_ended(third, batch_id)
        assert done.status == "completed"
        custom_ids = [line["custom_id"] for line in lines_of(client, done.output_file_id)]
        assert custom_ids == [f"r{i}" for i in range(1600)]  # each once, in input order
        assert (done.request_counts.completed, done.request_counts.failed) == (1600, 0)

        cancelled = client.batches.create(
            input_file_id=uploaded(client, lines).id,
            endpoint="/v1/embeddings",
            completion_window="24h",
        )
        assert client.batches.cancel(cancelled.id).status in ("cancelling", "cancelled")
        cancelled = until_ended(third, cancelled.id)
        assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
        kept = [line["custom_id"] for line in lines_of(client, cancelled.output_file_id)]
        assert len(kept) == len(set(kept)) == cancelled.request_counts.completed < 1600


def test_a_batch_past_its_window_expires_and_is_deleted_after_the_retention(
    tmp_path: Path, corpus: Corpus
) -> None:
    """A batch whose window ends while its server is down ends `expired` at the next start: the
    requests it answered in the output, the rest in the error file as `batch_expired`, each
    once. Then, past `--batch-retention-hours`, the batch and its files are deleted."""
    folder = tmp_path / "batches"
    flags = ["--api-key", KEY, "--batch-dir", str(folder)]
    texts = (corpus.within * 10)[:1600]
    lines = [request_line(f"r{i}", {"input": text}) for i, text in enumerate(texts)]
    batch_id = killed_after_a_checkpoint(tmp_path, flags, lines)
    record_path = folder / "batches" / batch_id / "batch.json"
    record = json.loads(record_path.read_text())
    record["expires_at"] = int(time.time()) - 1  # its 24 hours went by while it was down
    record_path.write_text(json.dumps(record))
    with running_server(tmp_path, [*flags, "--batch-retention-hours", "0.002"]) as second:
        client = sdk(second)
        expired = until_ended(second, batch_id)
        assert expired.status == "expired" and expired.expired_at is not None
        answered = lines_of(client, expired.output_file_id)
        refused = lines_of(client, expired.error_file_id)
        assert 0 < len(answered) < 1600
        assert {line["error"]["code"] for line in refused} == {"batch_expired"}
        ids = sorted(line["custom_id"] for line in answered + refused)
        assert ids == sorted(f"r{i}" for i in range(1600))
        counts = expired.request_counts
        assert (counts.completed, counts.failed) == (len(answered), len(refused))
        # 7.2 s after it ended, the sweep deletes it and its files (the input's time runs from
        # the batch's end too: it goes last).
        second.wait_for_output(f"batch {batch_id} deleted", timeout=60)
        second.wait_for_output(f"file {expired.input_file_id} deleted", timeout=60)
        assert list(client.batches.list()) == [] and list(client.files.list()) == []
        assert not (folder / "batches" / batch_id).exists()
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(expired.output_file_id)
