"""Static embedding models (model2vec, sentence-transformers StaticEmbedding) served at the
default settings: every on-disk layout gives the vectors of the library that wrote it, on real
prose and at the rules' edges (unknown tokens, a text that tokenizes to nothing, model2vec's cut
by characters then tokens), with no transformer on the path; the HTTP routes of each API family
answer from them; what cannot apply to a table is refused in one line."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from benchmarks.corpus import passages, sentences
from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.errors import ModelLoadError, SettingError
from tests.api.helpers import post_ok, serving
from tests.conftest import StaticCheckpoints
from tests.static_models import (
    EDGES,
    MULTILINGUAL,
    QUERY_PROMPT,
    model2vec_reference,
    st_reference,
)

MODEL2VEC = (
    "model2vec",
    "model2vec-float16-cut",
    "model2vec-int8",
    "model2vec-float64",
    "model2vec-multilingual-quantized",
    "model2vec-distilled",
)
# Over bert-base-uncased's WordPiece (the others: XLM-RoBERTa's Unigram).
BERT_VOCABULARY = ("model2vec", "model2vec-float16-cut", "model2vec-int8", "model2vec-float64")
SENTENCE_TRANSFORMERS = ("static-embedding", "static-embedding-published")
# Real prose with its natural spread of lengths, passages past 512 tokens among them.
TEXTS = [*sentences(300), *passages(12), *MULTILINGUAL, *EDGES]


class Engines(dict[str, Engine]):
    """An engine per checkpoint, opened when a test first asks for it."""

    def __init__(self, checkpoints: StaticCheckpoints) -> None:
        super().__init__()
        self._checkpoints = checkpoints

    def __missing__(self, name: str) -> Engine:
        engine = self[name] = Engine(str(self._checkpoints[name]))
        return engine


@pytest.fixture(scope="module")
def engines(static_dirs: StaticCheckpoints) -> Iterator[Engines]:
    opened = Engines(static_dirs)
    yield opened
    for engine in opened.values():
        engine.close()


def assert_same_vectors(ours: np.ndarray, reference: np.ndarray, *, ulp_of: Any = None) -> None:
    """cosine ≥ 0.999999 where the reference is not zero (and zero where it is), and each
    element within 1e-6, or (`ulp_of` a float dtype the reference was rounded to) within its
    rounding."""
    reference = np.asarray(reference, dtype=np.float32)
    assert ours.shape == reference.shape and ours.dtype == np.float32
    zero = ~reference.any(axis=1)
    np.testing.assert_array_equal(ours[zero], 0.0)
    a, b = ours[~zero].astype(np.float64), reference[~zero].astype(np.float64)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() >= 0.999999, cosine.min()
    # A float16 reference is rounded twice (its mean, then its normalized vector).
    rtol = 0.0 if ulp_of is None else 2 * float(np.finfo(ulp_of).eps)
    np.testing.assert_allclose(ours, reference, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("name", MODEL2VEC)
def test_a_model2vec_model_gives_model2vecs_vectors(
    name: str, engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    engine = engines[name]
    assert engine.core.compiled == "table"
    ours = np.asarray(engine.embed(TEXTS))
    reference = model2vec_reference(static_dirs[name], TEXTS)
    assert_same_vectors(ours, reference, ulp_of=np.float16 if "float16" in name else None)
    if name in BERT_VOCABULARY:  # U+200B, and an unknown token alone, keep no token
        assert not ours[[TEXTS.index("\u200b"), TEXTS.index("🤖")]].any()


def test_model2vecs_cut_is_by_characters_then_tokens(
    engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    """model2vec-float16-cut keeps 16 tokens: a text is first cut to 16 × the vocabulary's
    median token length in characters, which may end inside a word (a token of its own)."""
    from model2vec import StaticModel

    engine = engines["model2vec-float16-cut"]
    assert engine.service.long_input == "truncate" and engine.max_model_len == 16
    long = [text for text in TEXTS if len(engine.tokenize(text)) > 16]
    assert len(long) > 100
    reference = model2vec_reference(static_dirs["model2vec-float16-cut"], long)
    assert_same_vectors(np.asarray(engine.embed(long)), reference, ulp_of=np.float16)
    # The texts are ones where cutting by tokens alone would keep other tokens.
    model = StaticModel.from_pretrained(str(static_dirs["model2vec-float16-cut"]))
    chars = 16 * model.median_token_length
    cut_first = model.tokenize([text[:chars] for text in long])
    whole = [ids[:16] for ids in model.tokenize(long)]
    assert sum(a != b for a, b in zip(cut_first, whole, strict=True)) >= 5
    # truncate_prompt_tokens cuts the same way (model2vec's encode(max_length=N)).
    assert_same_vectors(
        np.asarray(engine.embed(long, truncate_prompt_tokens=8)),
        model.encode(long, max_length=8).astype(np.float32),
        ulp_of=np.float16,
    )


@pytest.mark.parametrize("name", SENTENCE_TRANSFORMERS)
def test_a_static_embedding_gives_sentence_transformers_vectors(
    name: str, engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    engine = engines[name]
    reference = st_reference(static_dirs[name], TEXTS)
    assert_same_vectors(np.asarray(engine.embed(TEXTS)), reference)
    if name == "static-embedding-published":
        assert engine.prompts == {"query": QUERY_PROMPT, "document": ""}
        queried = st_reference(static_dirs[name], TEXTS[:40], prompt_name="query")
        assert_same_vectors(np.asarray(engine.embed(TEXTS[:40], prompt_name="query")), queried)


def test_dimensions_keep_a_prefix_then_normalize_as_model2vec_does(
    engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    from model2vec import StaticModel

    cut = StaticModel.from_pretrained(str(static_dirs["model2vec"]), dimensionality=16)
    ours = np.asarray(engines["model2vec"].embed(TEXTS[:200], dimensions=16))
    assert_same_vectors(ours, cut.encode(TEXTS[:200]))


def test_token_vectors_are_model2vecs_sequences(
    engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    from model2vec import StaticModel

    texts = [*sentences(40), "🤖 robots 🤖 dream"]
    model = StaticModel.from_pretrained(str(static_dirs["model2vec-multilingual-quantized"]))
    ours = engines["model2vec-multilingual-quantized"].pool(
        texts, task="token_embed", normalize=False
    )
    for mine, theirs in zip(ours, model.encode_as_sequence(texts), strict=True):
        np.testing.assert_allclose(np.asarray(mine), theirs, rtol=0, atol=1e-6)


def test_each_table_and_its_rules_is_a_space_of_its_own(
    engines: Engines, static_dirs: StaticCheckpoints, tmp_path: Path
) -> None:
    """The fingerprint hashes the table's file like any weights: another table, or the same
    table served by the other library's rules, is another space; a copy of one is the same."""
    import shutil

    spaces = {name: engines[name].embedding_space() for name in ("model2vec", "model2vec-int8")}
    assert len(set(spaces.values())) == 2
    copy = tmp_path / "copy"
    shutil.copytree(static_dirs["model2vec"], copy)
    with Engine(str(copy)) as same:
        assert same.embedding_space() == spaces["model2vec"]
    # The same table under sentence-transformers' rules (no cut, the unknown token kept).
    as_st = tmp_path / "as-sentence-transformers"
    shutil.copytree(static_dirs["model2vec"], as_st)
    tensors = load_file(str(as_st / "model.safetensors"))
    save_file({"embedding.weight": tensors["embeddings"]}, as_st / "model.safetensors")
    (as_st / "config.json").unlink()
    with Engine(str(as_st)) as other:
        static = other.core.model.layout.static
        assert static is not None and static.library == "sentence-transformers"
        assert other.embedding_space() != spaces["model2vec"]


def test_nothing_of_a_transformer_is_imported(static_dirs: StaticCheckpoints) -> None:
    """A fresh process serving a static model never imports torch or transformers."""
    import subprocess

    code = (
        "import sys; from poolserve import Engine\n"
        f"with Engine({str(static_dirs['model2vec'])!r}) as e: e.embed(['a text'])\n"
        "print([m for m in ('torch', 'transformers', 'onnxruntime') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


@pytest.mark.parametrize(
    ("model_config", "engine_config", "flag"),
    [
        ({"dtype": "bfloat16"}, {}, "--dtype bfloat16"),
        ({"device": "cuda"}, {}, "--device cuda"),
        ({}, {"backend": "onnxruntime"}, "--backend onnxruntime"),
        ({}, {"quantize": "int8"}, "--quantize int8"),
        ({}, {"compile": "on"}, "--compile on"),
        ({}, {"torch_threads": 2}, "--torch-threads 2"),
        ({}, {"quantize_gate": "fallback"}, "--quantize-gate fallback"),
        ({"attention": "eager"}, {}, "--attention eager"),
        ({"task": "classifier"}, {}, "--task"),
    ],
)
def test_what_cannot_apply_to_a_table_is_refused_in_one_line(
    model_config: dict[str, Any],
    engine_config: dict[str, Any],
    flag: str,
    static_dirs: StaticCheckpoints,
) -> None:
    with pytest.raises(SettingError) as refused:
        Engine(
            model_config=ModelConfig(model=str(static_dirs["model2vec"]), **model_config),
            engine_config=EngineConfig(**engine_config),
        )
    assert flag in refused.value.cli_message and "\n" not in str(refused.value)


def test_a_static_model_runs_no_express_runner(static_dirs: StaticCheckpoints) -> None:
    """Its batches end within milliseconds: there is no long batch to run a query past, and
    the runners keep the OS priority the express runner would lower (engine/runner_layout.py).
    A transformer at the same settings has one (tests/unit/engine/test_engine_core.py)."""
    engine = Engine(
        model_config=ModelConfig(model=str(static_dirs["model2vec"])),
        engine_config=EngineConfig(express_runner=True, runners=2),
    )
    try:
        runners = engine.core.stats.snapshot().runners
        assert len(runners) == 2 and not any(runner.express for runner in runners)
        assert engine.embed(sentences(3)).shape[0] == 3
    finally:
        engine.close()


def test_a_static_models_runners_answer_the_requests_they_prepare(
    static_dirs: StaticCheckpoints, engine: Engine
) -> None:
    """A table's lookup costs less than handing the answer to the CPU pool: its runners answer
    the small requests they prepare (engine/pipeline.py); a transformer's keep their cores for
    forward passes."""
    static = Engine(model_config=ModelConfig(model=str(static_dirs["model2vec"])))
    try:
        assert static.core.runners_answer and not engine.core.runners_answer
    finally:
        static.close()


def test_a_table_that_does_not_cover_its_tokenizer_is_refused(
    static_dirs: StaticCheckpoints, tmp_path: Path
) -> None:
    import shutil

    broken = tmp_path / "short-table"
    shutil.copytree(static_dirs["static-embedding"], broken)
    tensors = load_file(str(broken / "model.safetensors"))
    save_file(
        {"embedding.weight": tensors["embedding.weight"][:1000]}, broken / "model.safetensors"
    )
    with pytest.raises(ModelLoadError, match="has 1000 rows, but its tokenizer gives token ids"):
        Engine(str(broken))
    # A file cut short (an interrupted download) is refused in one line, not mapped.
    table = broken / "model.safetensors"
    table.write_bytes(table.read_bytes()[:-4096])
    with pytest.raises(ModelLoadError, match="is not a whole safetensors file") as refused:
        Engine(str(broken))
    assert "\n" not in str(refused.value)
    # A module the static runtime does not run after the table is refused, not skipped.
    dense = tmp_path / "with-dense"
    shutil.copytree(static_dirs["static-embedding"], dense)
    modules = json.loads((dense / "modules.json").read_text())
    kind = "sentence_transformers.models.Dense"
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": kind})
    (dense / "modules.json").write_text(json.dumps(modules))
    (dense / "2_Dense").mkdir()
    features = {"in_features": 48, "out_features": 16, "bias": True}
    (dense / "2_Dense" / "config.json").write_text(json.dumps(features))
    with pytest.raises(ModelLoadError, match="followed by Dense"):
        Engine(str(dense))


# -- the HTTP routes ------------------------------------------------------------------------


@pytest.fixture
async def client(engines: Engines) -> Any:
    async with serving(engines["model2vec"]) as http:
        yield http


@pytest.mark.anyio
async def test_each_api_familys_routes_answer_from_the_table(
    client: Any, static_dirs: StaticCheckpoints
) -> None:
    texts = sentences(12)
    reference = model2vec_reference(static_dirs["model2vec"], texts)
    openai = await post_ok(client, "/v1/embeddings", {"input": texts, "encoding_format": "base64"})
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(row["embedding"]), "<f4") for row in openai["data"]]
    )
    assert_same_vectors(decoded, reference)
    assert openai["usage"]["prompt_tokens"] == sum(
        len(ids) for ids in model2vec_tokens(static_dirs["model2vec"], texts)
    )
    tei = await post_ok(client, "/embed", {"inputs": texts})
    assert_same_vectors(np.asarray(tei, np.float32), reference)
    cohere = await post_ok(
        client,
        "/v2/embed",
        {"texts": texts, "input_type": "search_document", "embedding_types": ["float", "int8"]},
    )
    assert_same_vectors(np.asarray(cohere["embeddings"]["float"], np.float32), reference)
    assert len(cohere["embeddings"]["int8"][0]) == reference.shape[1]
    # Scores by cosine: the query's own text ranks first.
    ranked = await post_ok(client, "/rerank", {"query": texts[3], "texts": texts})
    assert ranked[0]["index"] == 3
    expected = reference @ reference[3]
    np.testing.assert_allclose(
        [entry["score"] for entry in sorted(ranked, key=lambda e: e["index"])], expected, atol=1e-5
    )
    scored = await post_ok(client, "/score", {"text_1": texts[0], "text_2": texts[1]})
    np.testing.assert_allclose(scored["data"][0]["score"], reference[0] @ reference[1], atol=1e-5)
    # No special tokens: the tokens are the text's own.
    tokens = await post_ok(client, "/tokenize", {"prompt": "hello world"})
    assert tokens["tokens"] == model2vec_tokens(static_dirs["model2vec"], ["hello world"])[0]
    info = (await client.get("/info")).json()
    assert info["auto_truncate"] is True and info["max_input_length"] == 512


def model2vec_tokens(directory: Path, texts: list[str]) -> list[list[int]]:
    from model2vec import StaticModel

    tokens: list[list[int]] = StaticModel.from_pretrained(str(directory)).tokenize(texts)
    return tokens


def test_two_static_models_on_one_tokenizer_keep_their_own_rules(
    static_dirs: StaticCheckpoints,
) -> None:
    """model2vec's cut by characters and sentence-transformers' no cut, over one tokenizer in
    one process: the CPU pool's thread (long requests are tokenized there) holds a tokenizer
    for each model's rules, whichever model started first."""
    from poolserve import ModelSet, ServedModel

    st, cut = static_dirs["static-embedding"], static_dirs["model2vec-float16-cut"]
    served = [ServedModel(ModelConfig(model=str(each)), EngineConfig(), None) for each in (st, cut)]
    with ModelSet.load(served, cpu_workers=1) as loaded:
        reference = model2vec_reference(cut, TEXTS)
        assert_same_vectors(np.asarray(loaded[cut.name].embed(TEXTS)), reference, ulp_of=np.float16)
        assert_same_vectors(np.asarray(loaded[st.name].embed(TEXTS)), st_reference(st, TEXTS))


def test_a_model2vec_model_cuts_what_it_scores_as_it_embeds(
    engines: Engines, static_dirs: StaticCheckpoints
) -> None:
    """/score and /rerank by cosine cut a model2vec model's texts as its embeddings are cut,
    rather than refusing them."""
    engine = engines["model2vec"]
    query, document = TEXTS[0], " ".join(passages(12))
    assert len(engine.tokenize(document)) > engine.max_model_len
    vectors = model2vec_reference(static_dirs["model2vec"], [query, document])
    expected = float(vectors[0] @ vectors[1])
    np.testing.assert_allclose(engine.score(query, [document]), [expected], atol=1e-6)
    np.testing.assert_allclose(
        [score for _, score in engine.rerank(query, [document])], [expected], atol=1e-6
    )


def test_what_a_hub_static_model_is_waits_for_its_table(
    static_dirs: StaticCheckpoints, model_path: Path, tmp_path: Path
) -> None:
    """Described before its weights are fetched, a static model is told from its table: the
    description of one without it asks for the table first (models/describe.py)."""
    import shutil

    from poolserve.models.static_layout import table_needed

    for name in ("static-embedding-published", "model2vec"):
        described = tmp_path / name
        shutil.copytree(static_dirs[name], described)
        assert not table_needed(described)
        for table in described.rglob("model.safetensors"):
            table.unlink()
        assert table_needed(described)
    # model2vec's configs before `model_type`: no modules.json, a config naming no model.
    old = tmp_path / "model2vec-0.3"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"normalize": True, "hidden_dim": 48}))
    assert table_needed(old)
    assert not table_needed(model_path)  # a transformers model: its config names it


def test_poolserve_compile_has_nothing_to_compile_and_refuses_as_serve_does(
    static_dirs: StaticCheckpoints, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from poolserve import commands

    model = str(static_dirs["model2vec"])
    with caplog.at_level(logging.INFO):
        assert commands.main(["compile", model]) == 0
    assert any("nothing to compile" in record.getMessage() for record in caplog.records)
    caplog.clear()
    assert commands.main(["compile", model, "--backend", "onnxruntime"]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--backend onnxruntime does not apply" in errors[0], errors
