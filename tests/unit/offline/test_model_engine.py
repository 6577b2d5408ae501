"""The offline Python API (`poolserve.Engine.embed`) against sentence-transformers.

fp32 vectors must match the reference at cosine >= 0.99999 for every input of the corpus, bf16
ones at >= 0.999; options (dimensions, normalize, truncation) follow the reference too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.errors import InputTooLongError, InvalidRequestError
from tests.reference import (
    BF16_COSINE,
    DIM,
    FP32_COSINE,
    MAX_LEN,
    Corpus,
    assert_close_vectors,
    cosines,
    norms,
    st_encode,
    text_with_tokens,
)


@pytest.fixture(scope="module")
def bf16_engine() -> Iterator[Engine]:
    config = ModelConfig(dtype="bfloat16")
    with Engine(model_config=config, engine_config=EngineConfig(cpu_workers=1)) as engine:
        yield engine


def test_fp32_matches_sentence_transformers_on_every_input(engine: Any, corpus: Corpus) -> None:
    actual = engine.embed(corpus.within)
    assert actual.shape == (len(corpus.within), DIM)
    assert actual.dtype == np.float32
    assert_close_vectors(actual, corpus.ref_within, FP32_COSINE, corpus.within)
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)


def test_fp32_over_the_limit_with_truncation(engine: Any, corpus: Corpus) -> None:
    actual = engine.embed(corpus.over, truncate_prompt_tokens=-1)
    assert_close_vectors(actual, corpus.ref_over, FP32_COSINE, corpus.over)


def test_bf16_matches_sentence_transformers_on_every_input(
    bf16_engine: Engine, engine: Any, corpus: Corpus
) -> None:
    actual = bf16_engine.embed(corpus.within)
    assert_close_vectors(actual, corpus.ref_within, BF16_COSINE, corpus.within)
    over = bf16_engine.embed(corpus.over, truncate_prompt_tokens=-1)
    assert_close_vectors(over, corpus.ref_over, BF16_COSINE, corpus.over)
    # It really ran in bf16: its vectors are not bit-for-bit the fp32 ones.
    fp32 = engine.embed(corpus.within[:50])
    assert float(np.min(cosines(actual[:50], fp32))) < 1 - 1e-7


def test_a_single_string_is_one_input(engine: Any, st_model: Any) -> None:
    actual = engine.embed("just one sentence")
    assert actual.shape == (1, DIM)
    assert_close_vectors(actual, st_encode(st_model, ["just one sentence"]))


def test_dimensions_are_sliced_then_renormalized(
    engine: Any, corpus: Corpus, st_model: Any
) -> None:
    texts = corpus.within[:40]
    actual = engine.embed(texts, dimensions=128)
    expected = corpus.ref_within[:40, :128]
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    assert actual.shape == (40, 128)
    assert_close_vectors(actual, expected, FP32_COSINE, texts)
    np.testing.assert_allclose(norms(actual), 1.0, atol=1e-5)


def test_unnormalized_vectors_match_the_raw_reference(engine: Any, st_model: Any) -> None:
    texts = ["raw pooled output", "🙂 emoji", "a much longer sentence " * 10]
    actual = engine.embed(texts, normalize=False)
    expected = st_encode(st_model, texts, normalize=False)
    assert np.all(np.abs(norms(actual) - 1.0) > 0.1)
    assert_close_vectors(actual, expected, FP32_COSINE, texts)
    np.testing.assert_allclose(norms(actual), norms(expected), rtol=1e-4)


@pytest.mark.parametrize("n", [2, 10, 255])
def test_truncation_to_n_tokens_matches_reference_cut_at_n(
    engine: Any, st_model: Any, hf_tokenizer: Any, n: int
) -> None:
    text = text_with_tokens(hf_tokenizer, 400, seed=n)
    actual = engine.embed([text], truncate_prompt_tokens=n)
    assert_close_vectors(actual, st_encode(st_model, [text], max_length=n))


def test_errors(engine: Any, hf_tokenizer: Any) -> None:
    with pytest.raises(InvalidRequestError, match="empty"):
        engine.embed([])
    too_long = text_with_tokens(hf_tokenizer, 300, seed=3)
    with pytest.raises(InputTooLongError) as caught:
        engine.embed(["fine", too_long])
    assert "input 1 has 300 tokens" in caught.value.message
    assert str(MAX_LEN) in caught.value.message
    with pytest.raises(InvalidRequestError, match="truncate_prompt_tokens"):
        engine.embed(["x"], truncate_prompt_tokens=MAX_LEN + 1)
    with pytest.raises(InvalidRequestError, match="dimensions"):
        engine.embed(["x"], dimensions=DIM + 1)


def test_concurrent_callers_get_their_own_results(engine: Any, corpus: Corpus) -> None:
    """The engine is thread-safe: callers on many threads share batches, not results."""
    slices = [corpus.within[i::6] for i in range(6)]
    results: dict[int, np.ndarray] = {}

    def call(index: int) -> None:
        results[index] = engine.embed(slices[index])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index in range(6):
        assert_close_vectors(results[index], corpus.ref_within[index::6], FP32_COSINE)


def test_an_engine_that_fails_after_start_up_leaves_no_thread_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import poolserve.service.model_service

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("building the tasks failed")

    before = {thread.ident for thread in threading.enumerate()}
    monkeypatch.setattr(poolserve.service.model_service, "build_tasks", broken)
    with pytest.raises(RuntimeError, match="building the tasks failed"):
        Engine(model_config=ModelConfig(dtype="float32"))
    left = [
        thread.name
        for thread in threading.enumerate()
        if thread.ident not in before and thread.name.startswith("poolserve")
    ]
    assert left == [], left


def test_an_interrupt_while_tokenizing_fails_the_request_instead_of_hanging(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something that is not an Exception (here a KeyboardInterrupt) raised while a chunk is
    prepared fails its request with a clear error; the engine goes on serving."""
    from poolserve.errors import EngineUnavailableError

    task = engine.embed_task

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(task, "preprocess", interrupted)
    with pytest.raises(EngineUnavailableError, match="stopped while preparing"):
        engine.embed(["one", "two"])
    monkeypatch.undo()
    assert engine.embed(["still serving"]).shape == (1, DIM)


def test_a_small_request_is_prepared_by_a_runner_and_a_large_one_in_the_pool(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request of one chunk is tokenized on the runner that will run it (no thread woken
    for it under load); a larger one chunk by chunk in the CPU pool. Both give the same
    vectors."""
    task = engine.embed_task
    preprocess = task.preprocess
    threads: list[str] = []

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return preprocess(*args)

    monkeypatch.setattr(task, "preprocess", recorded)
    chunk = engine.core.config.tokenize_chunk_size
    small = engine.embed(["a small request"])
    assert [name.rsplit("-", 1)[0] for name in threads] == ["poolserve-runner"]
    threads.clear()
    large = engine.embed(["a small request"] * (chunk + 1))
    assert len(threads) == 2 and all(name.startswith("poolserve-cpu") for name in threads)
    np.testing.assert_allclose(large[0], small[0], atol=1e-5)


def test_the_model_path_is_never_ignored() -> None:
    from poolserve.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="/nonexistent"):
        Engine("/nonexistent", model_config=ModelConfig(dtype="float32"))
    with pytest.raises(ValueError, match="two models given"):
        Engine("/one", model_config=ModelConfig(model="/other"))


def test_the_default_models_hub_id_names_the_bundled_copy() -> None:
    from poolserve.models.resolve import DEFAULT_MODEL_ID, default_model_dir, resolve_model_dir

    assert resolve_model_dir(DEFAULT_MODEL_ID) == default_model_dir()


def test_rerank_refuses_a_negative_top_n(cross_encoder_dir: Any) -> None:
    config = EngineConfig(cpu_workers=1)
    with Engine(str(cross_encoder_dir), engine_config=config) as reranker:
        documents = ["bread is baked", "the sea is wide", "dough rises"]
        with pytest.raises(InvalidRequestError, match="top_n must be 0 or more"):
            reranker.rerank("bread", documents, top_n=-1)
        assert len(reranker.rerank("bread", documents, top_n=0)) == 3
        assert [i for i, _ in reranker.rerank("bread", documents, top_n=2)] == [
            i for i, _ in reranker.rerank("bread", documents)[:2]
        ]


def test_an_engine_dropped_without_close_lets_its_threads_go_and_says_so() -> None:
    import gc

    before = {thread.ident for thread in threading.enumerate()}
    engine = Engine(model_config=ModelConfig(dtype="float32"), engine_config=EngineConfig())
    started = [
        thread
        for thread in threading.enumerate()
        if thread.ident not in before and thread.name.startswith("poolserve")
    ]
    assert started, "the engine should have started its threads"
    with pytest.warns(UserWarning, match="garbage-collected without close"):
        del engine
        gc.collect()
    for thread in started:
        thread.join(30)
        assert not thread.is_alive(), thread.name


def test_documents_may_be_text_mappings_as_over_http(cross_encoder_dir: Any) -> None:
    """`{"text": ...}` documents (what the rerank APIs send) score as their text; anything that
    is not text is a TypeError naming where it is, before any work."""
    with Engine(str(cross_encoder_dir), engine_config=EngineConfig(cpu_workers=1)) as reranker:
        plain = reranker.score("bread", ["knead the dough", "the sea"])
        mapped = reranker.score("bread", [{"text": "knead the dough"}, {"text": "the sea"}])
        np.testing.assert_array_equal(mapped, plain)
        mixed = [{"text": "the sea"}, "knead the dough"]
        assert reranker.rerank("bread", mixed) == reranker.rerank("bread", ["the sea", mixed[1]])
        with pytest.raises(TypeError, match=r"documents\[1\] must be a str or a mapping"):
            reranker.score("bread", ["fine", {"content": "x"}])
        with pytest.raises(TypeError, match="query must be a str"):
            reranker.rerank(["bread"], ["dough"])  # type: ignore[arg-type]
        with pytest.raises(InvalidRequestError, match=r"cannot embed .*its methods: classify"):
            reranker.embed("bread")


def test_texts_must_be_strings(engine: Any) -> None:
    with pytest.raises(TypeError, match=r"texts\[0\] must be a str, got dict"):
        engine.embed([{"text": "hello"}])
    with pytest.raises(TypeError, match="texts must be a str or a list of str, got int"):
        engine.embed(42)


def test_loading_prints_no_progress_bar(capfd: pytest.CaptureFixture[str]) -> None:
    """transformers draws a "Loading weights" bar on each load; a notebook re-running a cell
    would fill with them. The setting is the user's: it is left as it was."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    with Engine(model_config=ModelConfig(dtype="float32"), engine_config=EngineConfig()):
        pass
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled() == was_on


def test_closing_fails_a_call_whose_work_the_pool_had_not_started() -> None:
    """A caller whose request still waits in the CPU pool when another thread closes the
    engine gets an error, not a wait forever (the pool drops what has not started). The
    request is larger than a runner prepares itself: the pool prepares it."""
    from concurrent.futures import Future

    from poolserve.errors import EngineUnavailableError

    engine = Engine(
        model_config=ModelConfig(dtype="float32"), engine_config=EngineConfig(cpu_workers=1)
    )
    release = threading.Event()
    busy = threading.Event()

    def hold_the_pool() -> None:
        busy.set()
        release.wait()

    pool = engine.core.cpu
    pool.submit(hold_the_pool)
    assert busy.wait(30)
    queued = threading.Event()
    post = pool.post_at

    def post_and_tell(*args: Any, **kwargs: Any) -> None:
        post(*args, **kwargs)
        queued.set()

    pool.post_at = post_and_tell  # type: ignore[method-assign]
    outcome: Future[Any] = Future()

    def call() -> None:
        try:
            texts = ["queued behind the busy pool"] * (engine.core.config.tokenize_chunk_size + 1)
            outcome.set_result(engine.embed(texts))
        except BaseException as exc:
            outcome.set_exception(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert queued.wait(30)  # the call's first stage waits behind the busy pool
    closer = threading.Thread(target=engine.close, daemon=True)
    closer.start()
    try:
        with pytest.raises(EngineUnavailableError, match="closed before this request"):
            outcome.result(timeout=60)
    finally:
        release.set()
        closer.join(60)
    assert not closer.is_alive()
