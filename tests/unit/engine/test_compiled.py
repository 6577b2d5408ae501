"""`--compile`: the compiled forward matches eager on varied lengths and batch sizes and never
recompiles while serving (not even for a batch on borrowed cores); where compiling cannot work,
`on` refuses to start and `auto` serves eagerly; an architecture that fails to compile is served
eagerly with one log line."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch

from poolserve.config import ModelConfig
from poolserve.engine.backend import TorchBackend
from poolserve.engine.collate import collate
from poolserve.engine.executor import use_threads
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import ModelLoadError
from poolserve.models.loader import ModelSpec, prepare_model
from tests.reference import FP32_COSINE, assert_close_vectors

# Lengths from 2 tokens ([CLS] [SEP]) to the model's 256, in batches of 1 to 32.
SHAPES = [(1, 2), (1, 9), (1, 256), (3, 17), (8, 64), (17, 5), (32, 31), (5, 256), (2, 130)]


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return prepare_model(ModelConfig(dtype="float32"))


def batch_of(size: int, length: int, seed: int) -> list[WorkItem]:
    rng = random.Random(seed)
    group = RequestGroup(size)
    items = []
    for index in range(size):
        real = length if index == 0 else rng.randint(2, length)  # padded to `length`
        middle = [rng.randint(1000, 29000) for _ in range(real - 2)]
        items.append(WorkItem(group, index, [101, *middle, 102]))
    return items


def make_backend(spec: ModelSpec, compile: Any) -> TorchBackend:
    return TorchBackend(
        spec, partial(collate, pad_token_id=0), single_thread_tokens=256, compile=compile
    )


@pytest.mark.slow
def test_compiled_forward_matches_eager_without_recompiling(spec: ModelSpec) -> None:
    use_threads(1)
    eager = make_backend(spec, "off")
    eager.load()
    compiled = make_backend(spec, "on")
    compiled.load()
    assert compiled.compiled
    eager_forward, compiled_forward = eager.executor(), compiled.executor()
    from torch._dynamo.utils import counters

    graphs_after_warm_up = counters["stats"]["unique_graphs"]
    for seed, (size, length) in enumerate(SHAPES):
        batch = collate(batch_of(size, length, seed), pad_token_id=0)
        expected = np.stack(eager_forward(batch, 1))
        actual = np.stack(compiled_forward(batch, 1))
        assert actual.shape == expected.shape == (size, spec.embedding_dim)
        assert_close_vectors(actual, expected, FP32_COSINE, [f"{size}x{length}"] * size)
    # A large batch on cores lent by an idle runner (two threads) runs eagerly: compiling it
    # for another thread count would stall serving for seconds.
    lent = collate(batch_of(4, 256, 77), pad_token_id=0)
    assert_close_vectors(
        np.stack(compiled_forward(lent, 2)), np.stack(eager_forward(lent, 1)), FP32_COSINE
    )
    assert counters["stats"]["unique_graphs"] == graphs_after_warm_up, "serving recompiled"
    # The other head (token_embed) stays eager and still works.
    batch = collate(batch_of(2, 12, 99), pad_token_id=0)
    token_batch = collate(
        [
            WorkItem(item.group, item.index, item.input_ids, head="token_embed")
            for item in batch.items
        ],
        pad_token_id=0,
    )
    rows = compiled_forward(token_batch, 1)
    assert [row.shape[0] for row in rows] == [item.length for item in batch.items]


def test_on_without_a_cpu_compiler_refuses_to_start(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ModelLoadError, match=r"compile=on: .*C\+\+ compiler"):
        make_backend(spec, "on").load()


def test_auto_without_a_cpu_compiler_serves_eagerly(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    backend = make_backend(spec, "auto")
    backend.load()
    assert not backend.compiled
    batch = collate(batch_of(2, 10, 1), pad_token_id=0)
    assert len(backend.executor()(batch, 1)) == 2


def test_a_model_that_fails_to_compile_is_served_eagerly_with_one_log_line(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing_compile(module: Any, **options: Any) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            raise torch._dynamo.exc.Unsupported("this architecture does not trace")

        return run

    monkeypatch.setattr(torch, "compile", failing_compile)
    backend = make_backend(spec, "on")
    with caplog.at_level(logging.WARNING, logger="poolserve.engine.backend"):
        backend.load()
    assert not backend.compiled
    warnings = [r for r in caplog.records if r.name == "poolserve.engine.backend"]
    assert len(warnings) == 1 and "serving it eagerly" in warnings[0].getMessage()
    batch = collate(batch_of(3, 20, 2), pad_token_id=0)
    assert len(backend.executor()(batch, 1)) == 3
