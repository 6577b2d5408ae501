"""Prompts: a model's own (config_sentence_transformers.json), the default one, `prompt_name`,
`prompt`, `--prompt`, over HTTP and in Python, against sentence-transformers' `encode` with the
same prompt; the bundled model (no prompts) is unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolserve import Engine, ModelConfig
from tests.api.helpers import assert_openai_error, embed, load_engine, serving, vectors
from tests.reference import FP32_COSINE, assert_close_vectors
from tests.tiny_models import PROMPTS, make_prompted_embedding

pytestmark = pytest.mark.anyio

TEXTS = ["how do I bake bread", "Mix flour, water and yeast, then bake.", "x"]


@pytest.fixture(scope="module")
def prompted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_prompted_embedding(tmp_path_factory.mktemp("prompted") / "model")


@pytest.fixture(scope="module")
def st_prompted(prompted_dir: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(prompted_dir), device="cpu")


@pytest.fixture(scope="module")
def prompted(prompted_dir: Path) -> Iterator[Engine]:
    with load_engine(prompted_dir) as engine:
        yield engine


@pytest.fixture
async def client(prompted: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(prompted) as http:
        yield http


@pytest.mark.parametrize(
    ("body", "st_options"),
    [
        ({}, {}),  # the default prompt, "passage: ", as sentence-transformers applies it
        ({"prompt_name": "query"}, {"prompt_name": "query"}),
        ({"prompt_name": "none"}, {"prompt_name": "none"}),
        (
            {"prompt": "Represent this for retrieval: "},
            {"prompt": "Represent this for retrieval: "},
        ),
    ],
)
async def test_prompts_embed_as_sentence_transformers_does(
    client: httpx.AsyncClient,
    prompted: Engine,
    st_prompted: Any,
    body: dict[str, str],
    st_options: dict[str, str],
) -> None:
    expected = st_prompted.encode(TEXTS, **st_options)
    got = vectors(await embed(client, input=TEXTS, **body))
    assert_close_vectors(got, expected, FP32_COSINE, TEXTS)
    in_python = prompted.embed(TEXTS, **body)  # type: ignore[arg-type]
    assert_close_vectors(in_python, expected, FP32_COSINE, TEXTS)


async def test_teis_embed_takes_prompt_name(client: httpx.AsyncClient, st_prompted: Any) -> None:
    got = await client.post("/embed", json={"inputs": TEXTS, "prompt_name": "query"})
    assert got.status_code == 200, got.text
    assert_close_vectors(got.json(), st_prompted.encode(TEXTS, prompt_name="query"))
    unknown = await client.post("/embed", json={"inputs": TEXTS, "prompt_name": "passage"})
    assert unknown.json()["error_type"] == "Validation"
    assert "this model's prompts: document, none, query" in unknown.json()["error"]


async def test_the_prompt_changes_the_vectors_and_counts_in_usage(
    client: httpx.AsyncClient, hf_tokenizer: Any
) -> None:
    query = await embed(client, input=TEXTS, prompt_name="query")
    plain = await embed(client, input=TEXTS, prompt_name="none")
    cosines = (vectors(query) * vectors(plain)).sum(axis=1)
    assert (cosines < 0.999).all()  # the prompt is embedded, not dropped
    tokens = sum(len(hf_tokenizer(PROMPTS["query"] + text)["input_ids"]) for text in TEXTS)
    assert query["usage"]["prompt_tokens"] == tokens
    assert plain["usage"]["prompt_tokens"] < tokens
    # A query prompt and a document prompt put texts in one space by design.
    assert query["embedding_space"] == plain["embedding_space"]


async def test_unknown_or_doubled_prompts_are_400(client: httpx.AsyncClient) -> None:
    unknown = await client.post("/v1/embeddings", json={"input": "a", "prompt_name": "passage"})
    error = assert_openai_error(unknown, 400)
    assert error["message"] == (
        "unknown prompt_name 'passage'; this model's prompts: document, none, query"
    )
    assert error["param"] == "prompt_name"
    both = await client.post(
        "/v1/embeddings", json={"input": "a", "prompt_name": "query", "prompt": "q: "}
    )
    assert "not both" in assert_openai_error(both, 400)["message"]


async def test_models_lists_the_prompts(client: httpx.AsyncClient, prompted: Engine) -> None:
    card = (await client.get("/v1/models")).json()["data"][0]
    assert card["prompts"] == PROMPTS
    assert card["default_prompt_name"] == "document"
    assert prompted.prompts == PROMPTS
    assert prompted.default_prompt_name == "document"


def test_the_python_api_refuses_unknown_names(prompted: Engine) -> None:
    with pytest.raises(ValueError, match="this model's prompts: document, none, query"):
        prompted.embed("a", prompt_name="passage")


def test_prompts_given_at_start_up_replace_and_add(prompted_dir: Path, st_prompted: Any) -> None:
    config = ModelConfig(
        model=str(prompted_dir),
        dtype="float32",
        prompts=(("query", "search_query: "), ("title", "Title: ")),
    )
    with Engine(model_config=config) as engine:
        assert engine.prompts == {**PROMPTS, "query": "search_query: ", "title": "Title: "}
        got = engine.embed(TEXTS, prompt_name="query")
        title = engine.embed(TEXTS, prompt_name="title")
    assert_close_vectors(got, st_prompted.encode(TEXTS, prompt="search_query: "))
    assert_close_vectors(title, st_prompted.encode(TEXTS, prompt="Title: "))


async def test_a_model_without_prompts_is_unchanged(engine: Engine, st_model: Any) -> None:
    async with serving(engine) as http:
        plain = vectors(await embed(http, input=TEXTS))
        named = await http.post("/v1/embeddings", json={"input": "a", "prompt_name": "query"})
        given = vectors(await embed(http, input=TEXTS, prompt="query: "))
        card = (await http.get("/v1/models")).json()["data"][0]
    assert_close_vectors(plain, st_model.encode(TEXTS))
    assert "this model has no prompts" in assert_openai_error(named, 400)["message"]
    assert_close_vectors(given, st_model.encode(TEXTS, prompt="query: "))
    assert (card["prompts"], card["default_prompt_name"]) == ({}, None)


@pytest.mark.parametrize("mode", ["mean", "lasttoken"])
def test_a_prompt_left_out_of_pooling_as_sentence_transformers_does(
    tmp_path: Path, mode: str
) -> None:
    """include_prompt: false: the prompt is attended to, but its tokens are not pooled."""
    from sentence_transformers import SentenceTransformer

    directory = make_prompted_embedding(tmp_path / "model", include_prompt=False, mode=mode)
    reference = SentenceTransformer(str(directory), device="cpu")
    with load_engine(directory) as engine:
        for options in ({}, {"prompt_name": "query"}, {"prompt": "Represent this: "}):
            got = engine.embed(TEXTS, **options)  # type: ignore[arg-type]
            assert_close_vectors(got, reference.encode(TEXTS, **options), FP32_COSINE, TEXTS)
        pooled_with_prompt = reference[1].include_prompt
    assert pooled_with_prompt is False


async def test_token_id_inputs_are_taken_as_they_are(
    client: httpx.AsyncClient, st_prompted: Any
) -> None:
    """The client that sends token ids owns what the model sees: no default prompt."""
    ids = st_prompted.tokenizer(TEXTS[1])["input_ids"]
    got = vectors(await embed(client, input=[ids]))
    assert_close_vectors(got, st_prompted.encode([TEXTS[1]], prompt_name="none"))


def test_prompts_for_a_model_that_embeds_nothing_are_refused(cross_encoder_dir: Path) -> None:
    config = ModelConfig(model=str(cross_encoder_dir), prompts=(("query", "q: "),))
    with pytest.raises(
        ValueError, match="prompt applies to embedding models; this is a cross_encoder"
    ):
        Engine(model_config=config)
