"""A static embedding model behind a real `poolserve serve` process, driven by the official openai
SDK and a generated tei.v1 gRPC client: vectors equal model2vec's own, `dimensions`, OpenAI's
Batch API, and a process that never loads a transformer runtime; and `poolserve embed` on the
same model, a text past model2vec's cut among its records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pyarrow.dataset as ds
import pytest

from benchmarks.corpus import sentences
from poolserve import commands
from tests.conftest import StaticCheckpoints
from tests.e2e.conftest import free_port
from tests.e2e.grpc_peers import generated_client
from tests.e2e.harness import Server, running_server
from tests.e2e.test_batch_api import lines_of, request_line, until_ended, uploaded
from tests.static_models import model2vec_reference

pytestmark = pytest.mark.slow  # a real server process

TEXTS = sentences(64)


@pytest.fixture(scope="module")
def model(static_dirs: StaticCheckpoints) -> Path:
    return static_dirs["model2vec"]


@pytest.fixture(scope="module")
def grpc_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(
    model: Path, grpc_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = [str(model), "--grpc-port", str(grpc_port)]
    with running_server(tmp_path_factory.mktemp("static-server"), flags) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=60)


def test_the_openai_sdk_gets_model2vecs_vectors(client: openai.OpenAI, model: Path) -> None:
    answer = client.embeddings.create(input=TEXTS, model=model.name)  # base64 on the wire
    vectors = np.asarray([row.embedding for row in answer.data], np.float32)
    np.testing.assert_allclose(vectors, model2vec_reference(model, TEXTS), atol=1e-6)
    sliced = client.embeddings.create(input=TEXTS[:8], model=model.name, dimensions=16)
    from model2vec import StaticModel

    cut = StaticModel.from_pretrained(str(model), dimensionality=16).encode(TEXTS[:8])
    np.testing.assert_allclose([row.embedding for row in sliced.data], cut, atol=1e-6)


def test_tei_grpc_embeds_from_the_table(
    server: Server, grpc_port: int, model: Path, tmp_path: Path
) -> None:
    import grpc

    pb, stubs = generated_client(tmp_path)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        embed = stubs.EmbedStub(channel)
        answers = [embed.Embed(pb.EmbedRequest(inputs=text)) for text in TEXTS[:8]]
    vectors = [list(answer.embeddings) for answer in answers]
    np.testing.assert_allclose(vectors, model2vec_reference(model, TEXTS[:8]), atol=1e-6)


def test_the_server_loads_no_transformer_runtime(server: Server) -> None:
    maps = Path(f"/proc/{server.pid}/maps").read_text()
    assert "libtorch" not in maps and "onnxruntime" not in maps and "openvino" not in maps
    log = server.output()
    assert "a static model (model2vec rules)" in log and "trial" not in log


def test_a_batch_is_answered_like_the_route(
    client: openai.OpenAI, server: Server, model: Path
) -> None:
    lines = [request_line(f"r{i}", {"input": TEXTS[i], "model": model.name}) for i in range(20)]
    created = client.batches.create(
        input_file_id=uploaded(client, lines).id,
        endpoint="/v1/embeddings",
        completion_window="24h",
    )
    batch = until_ended(server, created.id)
    assert batch.status == "completed" and lines_of(client, batch.error_file_id) == []
    answers = {
        line["custom_id"]: line["response"] for line in lines_of(client, batch.output_file_id)
    }
    vectors = [answers[f"r{i}"]["body"]["data"][0]["embedding"] for i in range(20)]
    np.testing.assert_allclose(vectors, model2vec_reference(model, TEXTS[:20]), atol=1e-6)


def test_poolserve_embed_cuts_long_texts_as_model2vec(model: Path, tmp_path: Path) -> None:
    texts = [*TEXTS[:30], " ".join(sentences(400))]  # the last is past model2vec's 512 tokens
    source = tmp_path / "in.txt"
    source.write_text("".join(text + "\n" for text in texts))
    output = tmp_path / "out.parquet"
    assert commands.main(["embed", str(source), "-o", str(output), "--model", str(model)]) == 0
    table = ds.dataset(output).to_table()
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy()
    vectors = vectors.reshape(len(texts), -1)
    np.testing.assert_allclose(vectors, model2vec_reference(model, texts), atol=1e-6)
