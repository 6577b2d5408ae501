"""`--batch-invariant`: a text's vector is the same bits whatever batch it ran in. Real prose,
embedded one text at a time and then inside random mixed batches sent from several threads at
once: not one byte differs, on the bundled model and on two architectures of the model zoo (a
decoder that the default engine packs, and T5, which it runs padded); without the setting, they
do differ. A model whose attention it cannot replace is refused in one line."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import corpus
from benchmarks.batch_invariance import alone_and_mixed, differing
from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.backends.torch_model.invariant_kernels import BLOCK_ROWS, blocked_linear
from poolserve.errors import SettingError
from tests.model_zoo import ZOO_BY_NAME


def differing_rows(alone: Any, mixed: Any) -> int:
    return differing(alone, mixed)[0]


def invariant_engine(model: str | None = None, **settings: Any) -> Engine:
    return Engine(
        model_config=ModelConfig(model=model, dtype="float32", **settings),
        engine_config=EngineConfig(batch_invariant=True),
    )


@pytest.mark.slow  # a thousand forwards of one sentence each: about 25 s
def test_a_thousand_real_sentences_alone_and_in_mixed_batches_are_the_same_bits(
    engine: Any,
) -> None:
    texts = corpus.sentences(1000)
    with invariant_engine() as invariant:
        alone, mixed = alone_and_mixed(invariant, texts)
    assert differing_rows(alone, mixed) == 0
    # Without the setting (packed, its products blocked by the batch): the last bits move,
    # within float noise of the same vectors.
    default_alone, default_mixed = alone_and_mixed(engine, texts[:200])
    assert differing_rows(default_alone, default_mixed) > 0
    np.testing.assert_allclose(alone[:200], default_mixed, atol=2e-6)


@pytest.mark.parametrize("name", ["Qwen3-Embedding-0.6B", "gtr-t5-base"])
def test_zoo_architectures_are_batch_invariant(name: str, tmp_path: Path) -> None:
    model = ZOO_BY_NAME[name]
    directory = model.make(tmp_path / name)
    texts = corpus.sentences(120)
    with invariant_engine(str(directory)) as invariant:
        alone, mixed = alone_and_mixed(invariant, texts, seed=1)
    assert differing_rows(alone, mixed) == 0
    # The same vectors as the default engine's, up to float noise (T5's position bias rides in
    # its attention mask: dropped, the vectors moved by 0.02).
    with Engine(model_config=ModelConfig(model=str(directory), dtype="float32")) as default:
        np.testing.assert_allclose(alone, default.embed(texts), atol=2e-6)


def test_queries_answered_beside_background_work_are_the_same_bits() -> None:
    """Queries sent while background requests keep both runners busy run on the express runner
    (engine/scheduler.py), a third thread beside them: the same invariant forward, so each
    query's vector, and each background text's, is the same bits as on an idle engine."""
    texts = corpus.sentences(200)
    queries, background = texts[:30], texts[30:]
    engine = Engine(
        model_config=ModelConfig(dtype="float32"),
        engine_config=EngineConfig(batch_invariant=True, runners=2, express_runner=True),
    )
    with engine:
        queries_idle = np.stack([engine.embed([text])[0] for text in queries])
        background_idle = engine.embed(background)
        stop = threading.Event()
        answers: list[np.ndarray] = []

        def indexing() -> None:
            # Four 34-sentence requests in flight at the lowest priority, until told to stop.
            chunks = [background[start : start + 34] for start in range(0, len(background), 34)]
            while not stop.is_set():
                futures = [engine.embed_later(chunk, priority=10) for chunk in chunks]
                answers.append(np.concatenate([future.result() for future in futures]))

        def express_items() -> int:
            runners = engine.core.stats.snapshot().runners
            return sum(runner.items for runner in runners if runner.express)

        indexer = threading.Thread(target=indexing)
        indexer.start()
        try:
            beside: list[np.ndarray] = []
            # Until a few queries have run on the express runner (each round is 30 queries).
            for _ in range(20):
                beside += [engine.embed([text])[0] for text in queries]
                if express_items() >= 5:
                    break
        finally:
            stop.set()
            indexer.join()
        assert express_items() >= 5
    for vectors in np.split(np.stack(beside), len(beside) // len(queries)):
        assert differing_rows(queries_idle, vectors) == 0
    assert answers and all(differing_rows(background_idle, each) == 0 for each in answers)


def test_a_model_whose_attention_it_cannot_replace_is_refused(tmp_path: Path) -> None:
    directory = ZOO_BY_NAME["all-mpnet-base-v2"].make(tmp_path / "mpnet")
    with pytest.raises(SettingError, match=r"needs scaled-dot-product attention.*eager"):
        invariant_engine(str(directory))
    with pytest.raises(SettingError, match="cannot be batch-invariant"):
        Engine(engine_config=EngineConfig(batch_invariant=True, quantize="int8"))


def test_a_row_of_a_blocked_product_is_the_same_bits_wherever_it_is() -> None:
    import torch

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 48, generator=generator)
    bias = torch.randn(96, generator=generator)
    rows = torch.randn(3 * BLOCK_ROWS + 5, 48, generator=generator)
    alone = blocked_linear(rows[:1], weight, bias)
    for count in (2, 17, BLOCK_ROWS, 3 * BLOCK_ROWS + 5):
        batch = torch.cat([rows[1:count], rows[:1]])  # the row last, among others
        assert torch.equal(blocked_linear(batch, weight, bias)[-1], alone[0])
    plain = torch.nn.functional.linear(rows, weight, bias)
    torch.testing.assert_close(blocked_linear(rows, weight, bias), plain)


@pytest.mark.parametrize("shape", ["[b,1,1,S] additive", "[b,1,L,S] bool", "a bias"])
def test_attention_per_sequence_equals_each_sequence_alone(shape: str) -> None:
    import torch
    import torch.nn.functional as F

    from poolserve.backends.torch_model.invariant_kernels import per_sequence_attention

    generator = torch.Generator().manual_seed(0)
    lengths = [5, 9, 3]
    query, key, value = (torch.randn(3, 2, 9, 8, generator=generator) for _ in range(3))
    kept = torch.arange(9).view(1, 9) < torch.tensor(lengths).view(3, 1)  # [b, S]
    bias = torch.randn(1, 2, 9, 9, generator=generator)
    if shape == "[b,1,1,S] additive":
        mask = torch.zeros(3, 1, 1, 9).masked_fill(~kept.view(3, 1, 1, 9), -1e30)
    elif shape == "[b,1,L,S] bool":
        mask = kept.view(3, 1, 1, 9).expand(3, 1, 9, 9)
    else:
        mask = bias + torch.zeros(3, 1, 1, 9).masked_fill(~kept.view(3, 1, 1, 9), -1e30)
    out = per_sequence_attention(query, key, value, attn_mask=mask)
    for row, length in enumerate(lengths):
        own = slice(0, length)
        alone = F.scaled_dot_product_attention(
            query[row : row + 1, :, own],
            key[row : row + 1, :, own],
            value[row : row + 1, :, own],
            attn_mask=bias[:, :, own, own] if shape == "a bias" else None,
        )
        torch.testing.assert_close(out[row : row + 1, :, own], alone)
