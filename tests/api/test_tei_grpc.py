"""The gRPC front end (`--grpc-port`) in process: clients generated from text-embeddings-
inference's tei.proto against the app's own gRPC server, every RPC and stream answered as the
HTTP routes answer the same inputs (vectors, scores, tokens), bad input and missing keys as
status codes, health and reflection as grpcurl and Kubernetes probes read them."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import grpc
import httpx
import numpy as np
import pytest
from asgi_lifespan import LifespanManager
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from poolserve import EngineConfig, ModelConfig, ModelSet, ServedModel, ServerConfig
from poolserve.app import create_app
from tests.e2e.conftest import free_port
from tests.e2e.grpc_peers import generated_client

KEY = "grpc-key"
AUTH = (("authorization", f"Bearer {KEY}"),)
HEADERS = {"authorization": f"Bearer {KEY}"}
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Serving embedding models means batching requests from many clients.",
    "Rare words such as photosynthesis break into several pieces.",
]
QUERY = "Which animal jumps over the dog?"

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tei(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    return generated_client(tmp_path_factory.mktemp("tei-client"))


@pytest.fixture(scope="module")
def models(
    model_path: Path, classifier_dir: Path, cross_encoder_dir: Path, splade_dir: Path
) -> Iterator[ModelSet]:
    """Every kind a tei.v1 service needs: Embed (the bundled model, first), Predict (a
    classifier), PredictPair and Rerank (a cross-encoder), EmbedSparse (SPLADE)."""
    served = [
        (model_path, "minilm"),
        (classifier_dir, "classifier"),
        (cross_encoder_dir, "reranker"),
        (splade_dir, "splade"),
    ]
    with ModelSet.load(
        [
            ServedModel(
                ModelConfig(model=str(path), dtype="float32"), EngineConfig(runners=1), (name,)
            )
            for path, name in served
        ],
        cpu_workers=2,
    ) as loaded:
        yield loaded


@dataclass
class Both:
    """One app's HTTP client and gRPC channel, and the generated client."""

    http: httpx.AsyncClient
    channel: grpc.aio.Channel
    address: str
    app: Any
    pb: ModuleType
    stubs: ModuleType

    def stub(self, service: str) -> Any:
        return getattr(self.stubs, f"{service}Stub")(self.channel)

    async def post(self, path: str, body: Any) -> Any:
        response = await self.http.post(path, json=body, headers=HEADERS)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
async def both(models: ModelSet, tei: tuple[ModuleType, ModuleType]) -> AsyncIterator[Both]:
    port = free_port()
    app = create_app(models, ServerConfig(grpc_port=port, api_keys=(KEY,)))
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://poolserve.test"
        ) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        yield Both(http, channel, f"127.0.0.1:{port}", app, *tei)


async def test_embed_rpcs_answer_as_the_http_routes(both: Both) -> None:
    pb, embed = both.pb, both.stub("Embed")
    for text in TEXTS:
        answer = await embed.Embed(pb.EmbedRequest(inputs=text), metadata=AUTH)
        [http] = await both.post("/embed", {"inputs": text})
        np.testing.assert_allclose(answer.embeddings, http, rtol=1e-5, atol=1e-6)
        assert answer.metadata.compute_tokens == len(await tokens(both, text))
        assert answer.metadata.compute_chars == len(text)
        assert answer.metadata.total_time_ns >= answer.metadata.inference_time_ns > 0

        cut = await embed.Embed(
            pb.EmbedRequest(inputs=text, normalize=False, dimensions=64), metadata=AUTH
        )
        [http] = await both.post("/embed", {"inputs": text, "normalize": False, "dimensions": 64})
        np.testing.assert_allclose(cut.embeddings, http, rtol=1e-5, atol=1e-6)

        tokens_of = await embed.EmbedAll(pb.EmbedAllRequest(inputs=text), metadata=AUTH)
        [http] = await both.post("/embed_all", {"inputs": text})
        got = [list(token.embeddings) for token in tokens_of.token_embeddings]
        np.testing.assert_allclose(got, http, rtol=1e-5, atol=1e-6)

        sparse = await embed.EmbedSparse(pb.EmbedSparseRequest(inputs=text), metadata=AUTH)
        [http] = await both.post("/embed_sparse", {"inputs": text})
        assert [value.index for value in sparse.sparse_embeddings] == [e["index"] for e in http]
        np.testing.assert_allclose(
            [value.value for value in sparse.sparse_embeddings],
            [e["value"] for e in http],
            rtol=1e-5,
        )


async def tokens(both: Both, text: str) -> list[dict[str, Any]]:
    [answer] = await both.post("/tokenize", {"inputs": text})
    return list(answer)


async def test_predict_and_rerank_rpcs_answer_as_the_http_routes(both: Both) -> None:
    pb = both.pb
    predict, rerank = both.stub("Predict"), both.stub("Rerank")
    for raw in (False, True):
        answer = await predict.Predict(
            pb.PredictRequest(inputs=TEXTS[0], raw_scores=raw), metadata=AUTH
        )
        http = await both.post("/predict", {"inputs": TEXTS[0], "raw_scores": raw})
        assert [p.label for p in answer.predictions] == [p["label"] for p in http]
        np.testing.assert_allclose(
            [p.score for p in answer.predictions], [p["score"] for p in http], rtol=1e-5
        )

    ranks = await rerank.Rerank(
        pb.RerankRequest(query=QUERY, texts=TEXTS, return_text=True), metadata=AUTH
    )
    http = await both.post("/rerank", {"model": "reranker", "query": QUERY, "documents": TEXTS})
    assert [rank.index for rank in ranks.ranks] == [r["index"] for r in http["results"]]
    assert [rank.text for rank in ranks.ranks] == [TEXTS[r["index"]] for r in http["results"]]
    np.testing.assert_allclose(
        [rank.score for rank in ranks.ranks],
        [r["relevance_score"] for r in http["results"]],
        rtol=1e-5,
    )
    pair = await predict.PredictPair(pb.PredictPairRequest(inputs=[QUERY, TEXTS[0]]), metadata=AUTH)
    [score] = [r["relevance_score"] for r in http["results"] if r["index"] == 0]
    assert len(pair.predictions) == 1
    assert pair.predictions[0].score == pytest.approx(score, rel=1e-5)


async def test_tokenize_decode_and_info_answer_as_the_http_routes(both: Both) -> None:
    pb, tokenize = both.pb, both.stub("Tokenize")
    for text in TEXTS:
        answer = await tokenize.Tokenize(
            pb.EncodeRequest(inputs=text, add_special_tokens=True), metadata=AUTH
        )
        http = await tokens(both, text)
        got = [
            {
                "id": token.id,
                "text": token.text,
                "special": token.special,
                "start": token.start if token.HasField("start") else None,
                "stop": token.stop if token.HasField("stop") else None,
            }
            for token in answer.tokens
        ]
        assert got == http
        ids = [token["id"] for token in http]
        decoded = await tokenize.Decode(pb.DecodeRequest(ids=ids), metadata=AUTH)
        assert decoded.text == (await both.post("/detokenize", {"tokens": ids}))["prompt"]
        bare = await tokenize.Decode(
            pb.DecodeRequest(ids=ids, skip_special_tokens=True), metadata=AUTH
        )
        assert decoded.text.startswith("[CLS]") and "[CLS]" not in bare.text
        assert bare.text == decoded.text.removeprefix("[CLS] ").removesuffix(" [SEP]")

    info = await both.stub("Info").Info(pb.InfoRequest(), metadata=AUTH)
    http = (await both.http.get("/info", headers=HEADERS)).json()
    assert info.model_id == http["model_id"] == "minilm"
    assert info.model_type == pb.MODEL_TYPE_EMBEDDING
    assert info.max_input_length == http["max_input_length"]
    assert info.max_client_batch_size == http["max_client_batch_size"]


async def test_streams_answer_each_message_in_order(both: Both) -> None:
    pb = both.pb
    embed, predict, tokenize = both.stub("Embed"), both.stub("Predict"), both.stub("Tokenize")
    texts = [f"{text} ({index})" for index in range(4) for text in TEXTS]
    streamed = [
        answer
        async for answer in embed.EmbedStream(
            iter([pb.EmbedRequest(inputs=text) for text in texts]), metadata=AUTH
        )
    ]
    assert len(streamed) == len(texts)
    for text, answer in zip(texts, streamed, strict=True):
        [http] = await both.post("/embed", {"inputs": text})
        np.testing.assert_allclose(answer.embeddings, http, rtol=1e-5, atol=1e-6)

    cases = [
        (embed.EmbedSparseStream, embed.EmbedSparse, pb.EmbedSparseRequest(inputs=TEXTS[1])),
        (embed.EmbedAllStream, embed.EmbedAll, pb.EmbedAllRequest(inputs=TEXTS[2])),
        (predict.PredictStream, predict.Predict, pb.PredictRequest(inputs=TEXTS[0])),
        (
            predict.PredictPairStream,
            predict.PredictPair,
            pb.PredictPairRequest(inputs=[QUERY, TEXTS[0]]),
        ),
        (tokenize.TokenizeStream, tokenize.Tokenize, pb.EncodeRequest(inputs=TEXTS[1])),
        (tokenize.DecodeStream, tokenize.Decode, pb.DecodeRequest(ids=[101, 7592, 102])),
    ]
    for stream, unary, message in cases:
        alone = await unary(message, metadata=AUTH)
        answers = [answer async for answer in stream(iter([message, message]), metadata=AUTH)]
        assert len(answers) == 2
        for answer in answers:
            assert_messages_close(answer, alone)


def assert_messages_close(got: Any, expected: Any) -> None:
    """Equal messages but for their timings, floats within float32 noise (a batch's
    neighbours may differ)."""
    got, expected = MessageToDict(got), MessageToDict(expected)
    got.pop("metadata", None)
    expected.pop("metadata", None)

    def close(a: Any, b: Any) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(close(a[key], b[key]) for key in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
        return bool(a == b)

    assert close(got, expected), (got, expected)


async def test_rerank_stream_ranks_every_message_as_one_request(both: Both) -> None:
    pb, rerank, predict = both.pb, both.stub("Rerank"), both.stub("Predict")
    whole = await rerank.Rerank(pb.RerankRequest(query=QUERY, texts=TEXTS), metadata=AUTH)
    streamed = await rerank.RerankStream(
        iter([pb.RerankStreamRequest(query=QUERY, text=text) for text in TEXTS]), metadata=AUTH
    )
    assert [(r.index, round(r.score, 5)) for r in streamed.ranks] == [
        (r.index, round(r.score, 5)) for r in whole.ranks
    ]
    # Each message with its own query: each text scored with it.
    queries = [QUERY, "Where do sailors look?", "What breaks words?"]
    mixed = await rerank.RerankStream(
        iter(
            [pb.RerankStreamRequest(query=q, text=t) for q, t in zip(queries, TEXTS, strict=True)]
        ),
        metadata=AUTH,
    )
    for rank in mixed.ranks:
        pair = await predict.PredictPair(
            pb.PredictPairRequest(inputs=[queries[rank.index], TEXTS[rank.index]]), metadata=AUTH
        )
        assert rank.score == pytest.approx(pair.predictions[0].score, rel=1e-5)
    assert [r.score for r in mixed.ranks] == sorted((r.score for r in mixed.ranks), reverse=True)


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), raised.value.details() or ""


async def test_bad_input_is_invalid_argument_and_names_the_field(both: Both) -> None:
    pb, embed = both.pb, both.stub("Embed")
    code, message = await status_of(
        embed.Embed(pb.EmbedRequest(inputs="x", dimensions=0), metadata=AUTH)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "dimensions" in message
    code, message = await status_of(
        both.stub("Tokenize").Decode(pb.DecodeRequest(ids=[10**9]), metadata=AUTH)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "vocabulary" in message
    code, message = await status_of(
        both.stub("Predict").PredictPair(
            pb.PredictPairRequest(inputs=["a", "b", "c"]), metadata=AUTH
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "pair" in message
    raw = both.channel.unary_unary("/tei.v1.Embed/Embed")
    code, message = await status_of(raw(b"\xff\xff\xff", metadata=AUTH))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "EmbedRequest" in message
    code, message = await status_of(
        embed.Embed(pb.EmbedRequest(inputs="x"), metadata=(*AUTH, ("x-priority", "99")))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "x-priority" in message
    code, message = await status_of(
        embed.Embed(
            pb.EmbedRequest(inputs="x"), metadata=(*AUTH, ("x-expect-embedding-space", "es1-0"))
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "embedding space" in message
    # A stream ends with its first error's status.
    stream = embed.EmbedStream(
        iter([pb.EmbedRequest(inputs="fine"), pb.EmbedRequest(inputs="x", dimensions=0)]),
        metadata=AUTH,
    )
    answers = []
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for answer in stream:
            answers.append(answer)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(answers) == 1
    # The server is unharmed.
    assert len((await embed.Embed(pb.EmbedRequest(inputs="x"), metadata=AUTH)).embeddings) == 384


async def test_the_api_key_is_required_on_tei_services_only(both: Both) -> None:
    pb, embed = both.pb, both.stub("Embed")
    for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", KEY),)):
        code, message = await status_of(embed.Embed(pb.EmbedRequest(inputs="x"), metadata=metadata))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "authorization" in message
        stream = embed.EmbedStream(iter([pb.EmbedRequest(inputs="x")]), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            [answer async for answer in stream]
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(both.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_and_reflection_describe_the_services(both: Both) -> None:
    health = health_pb2_grpc.HealthStub(both.channel)
    for service in ("", "tei.v1.Info", "tei.v1.Embed", "tei.v1.Predict", "tei.v1.Rerank"):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
    # grpcio-reflection's client (what grpcurl does): blocking, so off this loop (the server's).
    services, methods = await anyio.to_thread.run_sync(reflected, both.address)
    assert {f"tei.v1.{name}" for name in ("Info", "Embed", "Predict", "Rerank", "Tokenize")} <= (
        services
    )
    assert "grpc.health.v1.Health" in services
    assert methods == {
        "Embed",
        "EmbedStream",
        "EmbedSparse",
        "EmbedSparseStream",
        "EmbedAll",
        "EmbedAllStream",
    }


def reflected(address: str) -> tuple[set[str], set[str]]:
    """The services reflection lists, and the methods of tei.v1.Embed it describes."""
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        embed = DescriptorPool(database).FindServiceByName("tei.v1.Embed")
        return set(database.get_services()), {method.name for method in embed.methods}


async def test_an_rpc_no_model_serves_is_failed_precondition(
    engine: Any, tei: tuple[ModuleType, ModuleType]
) -> None:
    """On the bundled embedding model alone: Predict and PredictPair name what is served, and
    health says tei.v1.Predict is NOT_SERVING; Rerank ranks by similarity."""
    pb, stubs = tei
    port = free_port()
    app = create_app(engine.service, ServerConfig(grpc_port=port))
    async with (
        LifespanManager(app),
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        predict = stubs.PredictStub(channel)
        for call, needs in (
            (predict.Predict(pb.PredictRequest(inputs="x")), "a classifier or cross-encoder"),
            (predict.PredictPair(pb.PredictPairRequest(inputs=["x", "y"])), "a cross-encoder"),
        ):
            code, message = await status_of(call)
            assert code == grpc.StatusCode.FAILED_PRECONDITION
            assert needs in message and "this server serves Embed" in message
        health = health_pb2_grpc.HealthStub(channel)
        for service, status in (
            ("tei.v1.Predict", health_pb2.HealthCheckResponse.NOT_SERVING),
            ("tei.v1.Rerank", health_pb2.HealthCheckResponse.SERVING),
        ):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == status, service
        ranks = await stubs.RerankStub(channel).Rerank(pb.RerankRequest(query=QUERY, texts=TEXTS))
        assert ranks.ranks[0].index == 0  # the fox sentence answers the question


async def test_a_caller_that_goes_gives_its_admission_back(both: Both) -> None:
    """A stream cancelled mid-way and calls cancelled in flight leave nothing admitted."""
    pb, embed = both.pb, both.stub("Embed")
    admission = both.app.state.serving.admission
    stream = embed.EmbedStream(
        iter([pb.EmbedRequest(inputs=f"{text} {i}") for i in range(50) for text in TEXTS]),
        metadata=AUTH,
    )
    async for _ in stream:
        break
    stream.cancel()
    calls = [embed.Embed(pb.EmbedRequest(inputs=text), metadata=AUTH) for text in TEXTS * 4]
    for call in calls:
        call.cancel()
    await both.app.state.grpc.idle(30)
    assert admission.in_flight == 0
    assert len((await embed.Embed(pb.EmbedRequest(inputs="x"), metadata=AUTH)).embeddings) == 384
