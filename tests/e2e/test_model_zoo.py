"""The models people serve: every architecture of docs/models.md's table (tests/model_zoo/: tiny
checkpoints in the real layouts of the hub models they stand for), served by one real server
from one model file at default flags (plus only the settings a user must give:
`trust_remote_code`, `task`), compared over HTTP with sentence-transformers, FlagEmbedding's
formulas or the model card; and without those settings, refused in one line that names them.

The server runs float32 and eager (`running_server`'s base flags) so that it can be compared
tightly; compiling is the same forward and is tested elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.errors import ModelLoadError
from tests.e2e.conftest import free_port, server_env
from tests.e2e.harness import REPO, Server, running_server
from tests.model_zoo import (
    ZOO,
    ZOO_BY_NAME,
    ZooModel,
    bge_m3_reference,
    bge_m3_reference_scores,
    qwen3_reranker_seq_cls_pairs,
    reference_embeddings,
    reference_scores,
)

pytestmark = pytest.mark.slow

# Real prose of varied length (a technical manual's sentences, 5 to 60 tokens), and a query.
TEXTS = [
    "Install the package.",
    "The scheduler forms a batch when a runner asks for one, never before.",
    "Each runner thread owns its own OpenMP team, so loading the weights and running them happen "
    "on the same thread; a second team made every operator about twice as slow.",
    "Tokenizers split rare words such as photosynthesis or Kubernetes into several pieces.",
    "When the queue is full, new requests are refused with a status that tells the client how "
    "long to wait before it tries again, instead of hanging until a timeout closes the "
    "connection from the other side.",
    "Paris is the capital of France.",
]
QUERY = "How does the server treat requests when it is overloaded?"
COSINE = 0.9999
SCORE_ATOL = 1e-4
EMBEDDERS = [model for model in ZOO if model.kind == "embedding"]
RERANKERS = [model for model in ZOO if model.kind == "cross_encoder"]


@pytest.fixture(scope="module")
def zoo_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zoo")
    return {model.name: model.make(root / model.name) for model in ZOO}


@pytest.fixture(scope="module")
def zoo_server(
    tmp_path_factory: pytest.TempPathFactory, zoo_dirs: dict[str, Path]
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("zoo-server")
    entries = [
        {"model": str(zoo_dirs[model.name]), "served_model_name": model.name, **model.settings}
        for model in ZOO
    ]
    config = directory / "models.json"
    config.write_text(json.dumps({"models": entries}))
    with running_server(directory, ["--config", str(config)]) as server:
        yield server


def post(server: Server, route: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{server.url}{route}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def cosines(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    return np.asarray(
        (got * expected).sum(axis=1)
        / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    )


def test_every_model_is_served_as_its_kind(zoo_server: Server) -> None:
    cards = {card["id"]: card for card in httpx.get(f"{zoo_server.url}/v1/models").json()["data"]}
    assert {name: card["kind"] for name, card in cards.items()} == {
        model.name: model.kind for model in ZOO
    }
    # A 32,768-token model starts at the default batch budget, serving up to it.
    assert cards["Qwen3-Embedding-0.6B"]["max_model_len"] == 16384
    assert (
        "Qwen3-Embedding-0.6B: its length limit 32768 is more than --max-batch-tokens 16384"
        in zoo_server.output()
    )
    # MPNet has no sdpa attention in transformers: eager, said in one line.
    assert "MPNetModel has no scaled-dot-product attention" in zoo_server.output()


@pytest.mark.parametrize("model", EMBEDDERS, ids=lambda model: model.name)
def test_embeddings_equal_sentence_transformers(
    zoo_server: Server, zoo_dirs: dict[str, Path], model: ZooModel
) -> None:
    for prompt_name in dict.fromkeys((None, model.prompt_name)):
        body: dict[str, Any] = {"model": model.name, "input": TEXTS}
        if prompt_name is not None:
            body["prompt_name"] = prompt_name
        got = np.array(
            [item["embedding"] for item in post(zoo_server, "/v1/embeddings", body)["data"]]
        )
        expected = reference_embeddings(model, zoo_dirs[model.name], TEXTS, prompt_name=prompt_name)
        assert got.shape == expected.shape, (prompt_name, got.shape, expected.shape)
        assert cosines(got, expected).min() >= COSINE, prompt_name
        if got.shape[1] == expected.shape[1] and model.name != "mxbai-embed-large-v1-truncated":
            # Normalized exactly where sentence-transformers normalizes.
            np.testing.assert_allclose(
                np.linalg.norm(got, axis=1), np.linalg.norm(expected, axis=1), rtol=1e-4
            )


@pytest.mark.parametrize("model", RERANKERS, ids=lambda model: model.name)
def test_rerank_scores_equal_the_reference(
    zoo_server: Server, zoo_dirs: dict[str, Path], model: ZooModel
) -> None:
    query, documents = QUERY, TEXTS
    if model.name == "Qwen3-Reranker-0.6B-seq-cls":
        # Its card formats the pair itself, as its clients do.
        (query, _), *_ = qwen3_reranker_seq_cls_pairs(QUERY, TEXTS)
        documents = [document for _, document in qwen3_reranker_seq_cls_pairs(QUERY, TEXTS)]
    # bge-reranker-v2-gemma's card gives the raw "Yes" logit.
    raw = model.name == "bge-reranker-v2-gemma"
    body = {"model": model.name, "query": query, "documents": documents, "use_activation": not raw}
    results = post(zoo_server, "/rerank", body)["results"]
    got = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
    # (For the seq-cls model the reference formats QUERY and TEXTS as its card does.)
    expected = reference_scores(model, zoo_dirs[model.name], QUERY, TEXTS)
    np.testing.assert_allclose(got, expected, atol=SCORE_ATOL, rtol=1e-4)


def test_matryoshka_dimensions_slice_then_renormalize(
    zoo_server: Server, zoo_dirs: dict[str, Path]
) -> None:
    """mxbai-embed-large-v1 has no Normalize module: its full vectors are as
    sentence-transformers gives them, a slice is re-normalized; a model with truncate_dim
    returns that many dimensions by default."""
    model = ZOO_BY_NAME["mxbai-embed-large-v1"]
    full = reference_embeddings(model, zoo_dirs[model.name], TEXTS).astype(np.float64)
    body = {"model": model.name, "input": TEXTS, "dimensions": 8}
    got = np.array([item["embedding"] for item in post(zoo_server, "/v1/embeddings", body)["data"]])
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)

    truncated = ZOO_BY_NAME["mxbai-embed-large-v1-truncated"]
    body = {"model": truncated.name, "input": TEXTS}
    got = np.array([item["embedding"] for item in post(zoo_server, "/v1/embeddings", body)["data"]])
    expected = reference_embeddings(truncated, zoo_dirs[truncated.name], TEXTS)
    assert got.shape == expected.shape and got.shape[1] < full.shape[1]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert cosines(got, expected).min() >= COSINE


def test_bge_m3_serves_its_three_outputs_and_four_scorers(
    zoo_server: Server, zoo_dirs: dict[str, Path]
) -> None:
    directory = zoo_dirs["bge-m3"]
    reference = bge_m3_reference(directory, TEXTS)

    sparse = post(zoo_server, "/embed_sparse", {"model": "bge-m3", "inputs": TEXTS})
    for entries, expected in zip(sparse, reference, strict=True):
        got = {entry["index"]: entry["value"] for entry in entries}
        assert got.keys() == expected.lexical_weights.keys()
        np.testing.assert_allclose(
            [got[token] for token in sorted(got)],
            [expected.lexical_weights[token] for token in sorted(got)],
            rtol=1e-4,
            atol=1e-6,
        )

    pooled = post(
        zoo_server, "/pooling", {"model": "bge-m3", "input": TEXTS, "task": "token_embed"}
    )
    for item, expected in zip(pooled["data"], reference, strict=True):
        np.testing.assert_allclose(np.array(item["data"]), expected.colbert_vecs, atol=1e-5)

    scores = bge_m3_reference_scores(directory, QUERY, TEXTS)
    for scorer in ("dense", "sparse", "colbert", "m3"):
        body = {"model": "bge-m3", "query": QUERY, "documents": TEXTS, "scorer": scorer}
        results = post(zoo_server, "/rerank", body)["results"]
        got = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
        np.testing.assert_allclose(got, getattr(scores, scorer), atol=1e-5, err_msg=scorer)

    # The Python API's twin.
    with Engine(
        model_config=ModelConfig(model=str(directory), dtype="float32"),
        engine_config=EngineConfig(runners=1),
    ) as engine:
        np.testing.assert_allclose(engine.score(QUERY, TEXTS, scorer="m3"), scores.m3, atol=1e-5)

    # Another model scores one way: `scorer` is a 400 that says so.
    response = httpx.post(
        f"{zoo_server.url}/rerank",
        json={"model": "bge-small-en-v1.5", "query": QUERY, "documents": TEXTS, "scorer": "m3"},
        timeout=30,
    )
    assert response.status_code == 400 and "scores one way" in response.text, response.text


@pytest.mark.parametrize(
    "model", [model for model in ZOO if model.settings], ids=lambda model: model.name
)
def test_without_its_setting_a_model_refuses_naming_it(
    zoo_dirs: dict[str, Path], model: ZooModel
) -> None:
    (key,) = model.settings
    with pytest.raises(ModelLoadError) as raised:
        Engine(
            model_config=ModelConfig(model=str(zoo_dirs[model.name]), dtype="float32"),
            engine_config=EngineConfig(runners=1),
        ).close()
    message = str(raised.value)
    assert key in message and "\n" not in message, message


def test_a_refusal_at_start_is_one_line_without_third_party_noise(
    zoo_dirs: dict[str, Path],
) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "poolserve", "serve", str(zoo_dirs["Qwen3-Reranker-0.6B"])),
            *("--port", str(free_port())),
        ],
        cwd=REPO,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    refusal = [line for line in lines if "cannot start" in line]
    assert len(refusal) == 1 and "--task cross_encoder" in refusal[0], lines
    assert not any("LOAD REPORT" in line or "Traceback" in line for line in lines), lines


def test_a_score_template_file_serves_a_family_without_a_built_in_one(
    tmp_path: Path, zoo_dirs: dict[str, Path]
) -> None:
    """bge-reranker-v2-gemma's prompt written as a template file gives its card's scores."""
    from poolserve.models.score_template import BGE_GEMMA_RERANKER

    template = tmp_path / "gemma.json"
    template.write_text(
        json.dumps({"segments": list(BGE_GEMMA_RERANKER.segments), "yes": "Yes", "no": None})
    )
    model = ZOO_BY_NAME["bge-reranker-v2-gemma"]
    config = ModelConfig(
        model=str(zoo_dirs[model.name]),
        dtype="float32",
        task="cross_encoder",
        score_template=str(template),
    )
    with Engine(model_config=config, engine_config=EngineConfig(runners=1)) as engine:
        got = engine.score(QUERY, TEXTS, use_activation=False)
        np.testing.assert_allclose(
            got, reference_scores(model, zoo_dirs[model.name], QUERY, TEXTS), atol=SCORE_ATOL
        )


def test_an_llm_reranker_cuts_the_document_to_fit_only_when_asked(
    zoo_dirs: dict[str, Path],
) -> None:
    from poolserve.errors import InputTooLongError

    config = ModelConfig(
        model=str(zoo_dirs["Qwen3-Reranker-0.6B"]),
        dtype="float32",
        task="cross_encoder",
        max_model_len=160,
    )
    long_document = " ".join(TEXTS * 4)
    with Engine(model_config=config, engine_config=EngineConfig(runners=1)) as engine:
        with pytest.raises(InputTooLongError, match="truncate_prompt_tokens"):
            engine.score(QUERY, [long_document])
        (cut,) = engine.score(QUERY, [long_document], truncate_prompt_tokens=-1)
        (short,) = engine.score(QUERY, [TEXTS[0]])
        assert 0.0 < cut < 1.0 and cut != short


def test_attention_is_chosen_per_architecture_or_by_flag(zoo_dirs: dict[str, Path]) -> None:
    mpnet = str(zoo_dirs["all-mpnet-base-v2"])
    with pytest.raises(ModelLoadError, match="attention") as raised:
        Engine(
            model_config=ModelConfig(model=mpnet, attention="sdpa"),
            engine_config=EngineConfig(runners=1),
        ).close()
    assert "\n" not in str(raised.value)
    bge = ZOO_BY_NAME["bge-small-en-v1.5"]
    config = ModelConfig(model=str(zoo_dirs[bge.name]), dtype="float32", attention="eager")
    with Engine(model_config=config, engine_config=EngineConfig(runners=1)) as engine:
        expected = reference_embeddings(bge, zoo_dirs[bge.name], TEXTS)
        assert cosines(engine.embed(TEXTS), expected).min() >= COSINE
