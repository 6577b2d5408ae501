"""Long inputs: chunked embedding (vs the chunks' sentence-transformers vectors averaged by hand),
chunk spans, late chunking (vs sentence-transformers' token vectors), and the settings that
cannot work, over HTTP and the Python API, on a real document of about ten times the model's
length (a Python module's documentation)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from benchmarks import corpus
from poolserve import Chunking, Engine, ModelConfig, ServerConfig
from poolserve.bulk.corpus import InputSpec
from poolserve.bulk.job import run_job
from poolserve.config.job_config import JobOptions
from tests.api.helpers import assert_openai_error, embed, serving, vectors
from tests.reference import DIM, MAX_LEN, MODEL_ID, assert_close_vectors, st_encode

pytestmark = pytest.mark.anyio

# [CLS] and [SEP] frame every chunk: 254 of a chunk's tokens are the document's own.
ROOM = MAX_LEN - 2


@pytest.fixture(scope="module")
def document() -> str:
    text = next(text for text, tokens in corpus.documents() if tokens >= 10 * MAX_LEN)
    return text


def own_ids(hf_tokenizer: Any, text: str) -> list[int]:
    ids: list[int] = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def st_forward(st_model: Any, hf_tokenizer: Any, ids: list[int]) -> dict[str, torch.Tensor]:
    """sentence-transformers' Transformer and Pooling modules over one chunk of own tokens."""
    framed = torch.tensor([[hf_tokenizer.cls_token_id, *ids, hf_tokenizer.sep_token_id]])
    features = {"input_ids": framed, "attention_mask": torch.ones_like(framed)}
    with torch.no_grad():
        features = st_model[1](st_model[0](features))
    return features


def by_hand(st_model: Any, hf_tokenizer: Any, text: str, spans: list[list[int]]) -> np.ndarray:
    """vLLM's chunked processing, by hand, over the chunks the server reports (their own
    tokens, [start, end)): each pooled unnormalized, averaged weighted by its own tokens,
    normalized (float64)."""
    ids = own_ids(hf_tokenizer, text)
    chunks = [ids[start:end] for start, end in spans]
    pooled = [
        st_forward(st_model, hf_tokenizer, chunk)["sentence_embedding"][0].double().numpy()
        for chunk in chunks
    ]
    weights = np.array([len(chunk) for chunk in chunks], dtype=np.float64)
    mean = (np.stack(pooled) * weights[:, None]).sum(axis=0) / weights.sum()
    result: np.ndarray = mean / np.linalg.norm(mean)
    return result


async def chunk_spans(client: httpx.AsyncClient, text: str, **chunking: Any) -> list[list[int]]:
    body = await embed(client, input=text, return_chunks=True, chunking=chunking)
    return [chunk["tokens"] for chunk in body["data"][0]["chunks"]]


async def test_a_long_document_in_chunks_is_the_weighted_mean_of_its_chunks(
    client: httpx.AsyncClient, st_model: Any, hf_tokenizer: Any, document: str
) -> None:
    short = "A sentence the model takes whole."
    body = await embed(client, input=[document, short], long_input="chunk", model=MODEL_ID)
    actual = vectors(body)
    spans = await chunk_spans(client, document)
    assert len(spans) >= 10
    assert_close_vectors(actual[:1], by_hand(st_model, hf_tokenizer, document, spans)[None])
    # An input that fits is embedded as without chunking.
    assert_close_vectors(actual[1:], st_encode(st_model, [short]))
    # Usage counts what ran: every chunk with its special tokens.
    tokens = len(own_ids(hf_tokenizer, document))
    short_tokens = len(own_ids(hf_tokenizer, short)) + 2
    assert body["usage"]["prompt_tokens"] == tokens + 2 * len(spans) + short_tokens

    # Overlapping chunks of a chosen size.
    body = await embed(client, input=document, chunking={"size": 200, "overlap": 50})
    spans = await chunk_spans(client, document, size=200, overlap=50)
    assert all(end - start <= 200 for start, end in spans)
    assert_close_vectors(vectors(body), by_hand(st_model, hf_tokenizer, document, spans)[None])


async def test_chunks_come_back_with_spans_that_cover_the_text(
    client: httpx.AsyncClient, st_model: Any, hf_tokenizer: Any, document: str
) -> None:
    body = await embed(client, input=document, return_chunks=True, chunking={"overlap": 16})
    item = body["data"][0]
    chunks = item["chunks"]
    ids = own_ids(hf_tokenizer, document)
    spans = [tuple(chunk["tokens"]) for chunk in chunks]
    assert spans[0][0] == 0 and spans[-1][1] == len(ids)
    for (start, end), (next_start, _) in itertools.pairwise(spans):
        # Neighbours share at most the overlap (from a word start), nothing is skipped, and a
        # cut moves back at most half a chunk to a word start.
        assert end - 16 <= next_start < end and end - start > ROOM // 2
    assert all(0 < end - start <= ROOM for start, end in spans)
    # Each chunk's characters are exactly those of its tokens (the reference tokenizer's
    # offsets), and hold whole words: alone, they tokenize to the chunk's tokens. Its vector
    # is that chunk's.
    offsets = hf_tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)[
        "offset_mapping"
    ]
    for chunk, (start, end) in zip(chunks, spans, strict=True):
        assert chunk["chars"] == [offsets[start][0], offsets[end - 1][1]]
        first, last = chunk["chars"]
        assert own_ids(hf_tokenizer, document[first:last]) == ids[start:end]
        expected = st_forward(st_model, hf_tokenizer, ids[start:end])["sentence_embedding"]
        expected = torch.nn.functional.normalize(expected, dim=-1).numpy()
        assert_close_vectors(np.array([chunk["embedding"]], dtype=np.float32), expected)
    assert chunks[0]["chars"][0] == 0 and chunks[-1]["chars"][1] == len(document.rstrip())


async def test_late_chunking_pools_spans_from_one_pass_over_the_document(
    client: httpx.AsyncClient, st_model: Any, hf_tokenizer: Any, document: str
) -> None:
    # A document the model takes whole: each span's vector is the mean of its tokens' vectors
    # from one forward pass.
    text = document[:600]
    ids = own_ids(hf_tokenizer, text)
    assert len(ids) <= ROOM
    tokens = st_forward(st_model, hf_tokenizer, ids)["token_embeddings"][0, 1:-1].double()
    spans = [[0, 120], [120, 400], [400, len(text)]]
    body = await embed(client, input=text, chunking={"method": "late", "spans": spans})
    item = body["data"][0]
    assert len(item["chunks"]) == 3
    for chunk, span in zip(item["chunks"], spans, strict=True):
        assert chunk["chars"] == span
        start, end = chunk["tokens"]
        expected = torch.nn.functional.normalize(tokens[start:end].mean(dim=0), dim=-1)
        assert_close_vectors(np.array([chunk["embedding"]]), expected.numpy()[None])
    expected = torch.nn.functional.normalize(tokens.mean(dim=0), dim=-1)
    assert_close_vectors(np.array([item["embedding"]]), expected.numpy()[None])
    # The same as the mean of `/pooling`'s token vectors over each span.
    body = {"input": text, "task": "token_embed", "normalize": False}
    response = await client.post("/pooling", json=body)
    assert response.status_code == 200, response.text
    pooled = np.array(response.json()["data"][0]["data"], dtype=np.float64)[1:-1]
    spans_of_tokens = [chunk["tokens"] for chunk in item["chunks"]]
    expected = np.stack([pooled[a:b].mean(axis=0) for a, b in spans_of_tokens])
    assert_close_vectors(np.array([c["embedding"] for c in item["chunks"]]), expected)

    # A document ten times the model's length: windows that overlap by a quarter, each token's
    # vector from the window where it sits farthest from an edge.
    ids = own_ids(hf_tokenizer, document)
    overlap = ROOM // 4
    windows = [(0, ROOM)]
    while windows[-1][1] < len(ids):
        start = windows[-1][1] - overlap
        windows.append((start, min(start + ROOM, len(ids))))
    rows = [
        st_forward(st_model, hf_tokenizer, ids[a:b])["token_embeddings"][0, 1:-1].double()
        for a, b in windows
    ]
    vectors_by_token = torch.empty(len(ids), DIM, dtype=torch.float64)
    for index, ((a, b), window) in enumerate(zip(windows, rows, strict=True)):
        low = a if index == 0 else (a + windows[index - 1][1]) // 2
        high = b if index == len(windows) - 1 else (windows[index + 1][0] + b) // 2
        vectors_by_token[low:high] = window[low - a : high - a]
    body = await embed(client, input=document, chunking={"method": "late", "size": 300})
    chunks = body["data"][0]["chunks"]
    assert [c["tokens"] for c in chunks][-1][1] == len(ids)
    expected = np.stack(
        [
            torch.nn.functional.normalize(vectors_by_token[a:b].mean(dim=0), dim=-1).numpy()
            for a, b in (c["tokens"] for c in chunks)
        ]
    )
    assert_close_vectors(np.array([c["embedding"] for c in chunks]), expected)


async def test_long_input_settings_that_cannot_work_are_400s(
    client: httpx.AsyncClient, document: str
) -> None:
    cases = [
        ({"long_input": "error"}, "input 0", "truncate_prompt_tokens"),
        ({"long_input": "chunk", "truncate_prompt_tokens": 10}, "pass one", None),
        ({"chunking": {"overlap": 300}}, "overlap", None),
        ({"chunking": {"size": 300}}, "at most that", None),
        ({"chunking": {"method": "late"}}, "chunking.spans", None),
        ({"chunking": {"method": "late", "spans": [[5, 5]]}}, "holds no token", None),
        ({"return_chunks": True, "long_input": "truncate"}, "does not chunk", None),
        ({"chunking": {"spans": [[0, 9]]}}, '"method": "late"', None),
        ({"chunking": {"method": "late", "size": 9, "spans": [[0, 9]]}}, "pass one", None),
    ]
    for options, says, also in cases:
        response = await client.post("/v1/embeddings", json={"input": document, **options})
        message = assert_openai_error(response, 400)["message"]
        assert says in message and (also is None or also in message), (options, message)
    # The server's bound on one input holds chunked or not (the Python API's engine: 32,768).
    huge = " ".join([document] * 20)
    response = await client.post("/v1/embeddings", json={"input": huge, "long_input": "chunk"})
    assert "--max-input-tokens" in assert_openai_error(response, 400)["message"]
    # Truncation still cuts, on request.
    body = await embed(client, input=document, long_input="truncate")
    assert body["usage"]["prompt_tokens"] == MAX_LEN


def test_the_python_api_chunks_as_http_does(
    engine: Any, st_model: Any, hf_tokenizer: Any, document: str
) -> None:
    vectors_ = engine.embed([document], long_input="chunk", chunking=Chunking(overlap=32))
    planned = engine.embed_chunks([document], chunking=Chunking(overlap=32)).chunks[0][1]
    spans = [list(span.tokens) for span in planned]
    assert_close_vectors(vectors_, by_hand(st_model, hf_tokenizer, document, spans)[None])
    result = engine.embed_chunks([document, "short"], dimensions=64)
    assert result.vectors.shape == (2, 64)
    chunk_vectors, spans = result.chunks[0]
    assert chunk_vectors.shape == (len(spans), 64) and len(spans) > 9
    np.testing.assert_allclose(np.linalg.norm(chunk_vectors, axis=1), 1.0, rtol=1e-5)
    assert result.chunks[1][1][0].tokens == (0, 1) and result.chunks[1][1][0].chars == (0, 5)


async def test_chunks_are_cut_at_word_starts(
    client: httpx.AsyncClient, hf_tokenizer: Any, document: str
) -> None:
    # Small chunks of real prose: without the move to word starts, many cuts would fall inside
    # a word of several word pieces.
    text = document[:3000]
    ids = own_ids(hf_tokenizer, text)
    body = await embed(client, input=text, return_chunks=True, chunking={"size": 8})
    chunks = body["data"][0]["chunks"]
    assert len(chunks) > len(ids) // 8
    for chunk in chunks:
        (start, end), (first, last) = chunk["tokens"], chunk["chars"]
        assert own_ids(hf_tokenizer, text[first:last]) == ids[start:end], chunk["tokens"]
    assert [c["tokens"][1] for c in chunks[:-1]] == [c["tokens"][0] for c in chunks[1:]]


@pytest.fixture(scope="module")
def chunking_engine() -> Iterator[Engine]:
    """An engine served with --long-input chunk."""
    config = ModelConfig(dtype="float32", long_input="chunk")
    with Engine(model_config=config) as engine:
        yield engine


async def test_the_server_default_chunks_where_a_request_does_not_say(
    chunking_engine: Engine, engine: Any, document: str
) -> None:
    ran = chunking_engine.service.core.stats.snapshot()
    config = ServerConfig(max_queued_tokens=8192, max_request_tokens=4096, max_client_batch_size=64)
    async with serving(chunking_engine, config) as client:
        openai = vectors(await embed(client, input=document))
        response = await client.post("/embed", json={"inputs": document})  # TEI's route
        assert response.status_code == 200, response.text
        assert_close_vectors(np.array(response.json(), dtype=np.float32), openai)
        # Each API's own field still decides: TEI's truncate, OpenAI's long_input.
        response = await client.post("/embed", json={"inputs": document, "truncate": False})
        assert "truncate" in response.json()["error"]
        assert_openai_error(
            await client.post("/v1/embeddings", json={"input": document, "long_input": "error"}),
            400,
        )
        # Admission counts the chunks: the document's cost is more than one request may have.
        response = await client.post("/v1/embeddings", json={"input": [document, document]})
        assert "split it" in assert_openai_error(response, 413)["message"]
    # The chunks ran in the same batches, not one forward pass each.
    after = chunking_engine.service.core.stats.snapshot()
    chunks = len(engine.embed_chunks([document]).chunks[0][1])
    assert after.items - ran.items == 2 * chunks  # /v1/embeddings and /embed, once each
    assert after.batches - ran.batches <= chunks  # several chunks a pass, on both runners
    # The Python API follows the engine's default too.
    assert_close_vectors(chunking_engine.embed([document]), openai)


def test_a_bulk_job_chunks_with_its_engine(
    chunking_engine: Engine, document: str, tmp_path: Path
) -> None:
    """`poolserve embed --long-input chunk`: a long row is embedded in chunks, not a bad row."""
    path = tmp_path / "in.jsonl"
    rows = [{"id": "doc", "text": document}, {"id": "short", "text": "A short line."}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "out.parquet"
    report = run_job(chunking_engine, InputSpec(str(path), "jsonl"), output, JobOptions())
    assert (report.embedded, report.bad) == (2, 0)
    vectors_ = np.array(pq.read_table(output).column("embedding").to_pylist(), dtype=np.float32)
    assert_close_vectors(vectors_, chunking_engine.embed([document, "A short line."]))
