"""`--compile`: the forward compiled ahead of time matches eager on varied lengths and batch
sizes, packed (an embedding model; a cross-encoder's pairs with token type ids, against its
own head on padded pairs) and padded (the pairs with `--packing off`), and serves without
running eagerly; a restart loads it from the cache without compiling (nor loading the eager
module before a batch needs it), a changed model file, dtype or thread count misses the cache,
a truncated entry is rebuilt, and serving never compiles. Where compiling cannot work, `on`
refuses to start and `auto` serves eagerly; a padded model that does not export falls back to
torch.compile (one runner) or eager (several), a packed one to packed eager batches, and a
failing compile is served eagerly with one log line. `cached` loads what the cache holds and
never compiles."""

from __future__ import annotations

import logging
import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from poolserve import commands
from poolserve.backends.torch import aot, compile_gain
from poolserve.backends.torch import torch_backend as backend_module
from poolserve.backends.torch.torch_backend import TorchBackend
from poolserve.backends.torch_model import executor as executor_module
from poolserve.backends.torch_model import forward_cache
from poolserve.backends.torch_model.deferred_module import DeferredModule
from poolserve.backends.torch_model.executor import use_threads
from poolserve.config import ModelConfig
from poolserve.engine.collate import Batch, collate, text_item
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import ModelLoadError
from poolserve.models.describe import ModelSpec, prepare_model
from poolserve.models.kinds import Head
from tests.reference import FP32_COSINE, assert_close_vectors
from tests.tiny_models import make_cross_encoder, minilm_path

# Lengths from 2 tokens ([CLS] [SEP]) to the model's 256, in batches of 1 to 32.
SHAPES = [(1, 2), (1, 9), (1, 256), (3, 17), (8, 64), (17, 5), (32, 31), (5, 256), (2, 130)]


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return prepare_model(ModelConfig(dtype="float32"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def batch_of(
    size: int, length: int, seed: int, *, pairs: bool = False, head: Head = "embed"
) -> list[WorkItem]:
    rng = random.Random(seed)
    group = RequestGroup(size)
    items = []
    for index in range(size):
        real = length if index == 0 else rng.randint(2, length)  # padded to `length`
        middle = [rng.randint(1000, 29000) for _ in range(real - 2)]
        ids = [101, *middle, 102]
        types = [0] * (len(ids) // 2) + [1] * (len(ids) - len(ids) // 2) if pairs else None
        items.append(text_item(group, index, ids, types, head=head))
    return items


def make_backend(spec: ModelSpec, compile: Any, **options: Any) -> TorchBackend:
    return TorchBackend(
        spec, partial(collate, pad_token_id=0), single_thread_tokens=256, compile=compile, **options
    )


def packed_batch(items: list[WorkItem]) -> Batch:
    batch = collate(items, True, pad_token_id=0)
    assert batch.packed is not None
    return batch


def compiled_only(monkeypatch: pytest.MonkeyPatch, backend: TorchBackend, head: Head) -> None:
    """Fail any batch of `head` that `backend` would run eagerly (its library runs no Python
    module); other backends' batches run as before."""
    eagerly = executor_module.run_eagerly

    def refuse(module: Any, batch: Batch) -> Any:
        assert module is not backend._model.module or batch.head != head, "ran eagerly"
        return eagerly(module, batch)

    monkeypatch.setattr(executor_module, "run_eagerly", refuse)


def loaded_from_the_cache(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> TorchBackend:
    """A compiled backend that starts, and serves while `monkeypatch` lasts, without
    compiling anything (a compile would fail the test)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled while it should only load or serve")

    monkeypatch.setattr(aot, "build", refuse)
    monkeypatch.setattr(torch, "compile", refuse)
    backend = make_backend(spec, "on", **options)
    backend.load()
    assert backend.report.source == "cached"
    return backend


@pytest.mark.slow
def test_compiled_ahead_of_time_matches_eager_and_a_restart_loads_it(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    use_threads(1)
    eager = make_backend(spec, "off")
    eager.load()
    eager_forward = eager.executor()
    # `cached`, and `auto` at a start (`serve`, `embed`), never compile: on an empty cache they
    # run eagerly and say so (`poolserve compile` builds it: test_compile_command.py).
    for mode in ("cached", "auto"):
        with monkeypatch.context() as patched, caplog.at_level(logging.INFO, "poolserve"):
            patched.setattr(aot, "build", lambda *args, **kwargs: pytest.fail("compiled"))
            uncached = make_backend(spec, mode)
            uncached.load()
            assert uncached.report.source == "eager" and not uncached.compiled
            assert "a start never waits for a compile" in caplog.text
            uncached.close()
        caplog.clear()
    built = make_backend(spec, "on")
    built.load()
    assert built.report.source == "built"
    built.close()
    # `cached` (as `auto`) measures it against eager and keeps it where it pays: here kept,
    # whatever this machine measures (tests/unit/backends/torch/test_compile_gain.py).
    with monkeypatch.context() as patched:
        patched.setattr(compile_gain, "MIN_GAIN", 0.0)
        cached = make_backend(spec, "cached")
        cached.load()
    assert cached.report.source == "cached" and cached.compiled and 1 in cached.report.gains
    cached.close()

    with monkeypatch.context() as patched:
        restarted = loaded_from_the_cache(spec, patched)
        assert restarted.packed_heads == {"embed", "token_embed"}
        forward = restarted.executor()
        compiled_only(patched, restarted, "embed")
        for seed, (size, length) in enumerate(SHAPES):
            items = batch_of(size, length, seed)
            expected = np.stack(eager_forward(collate(items, pad_token_id=0), 1))
            actual = np.stack(forward(packed_batch(items), 1))
            assert actual.shape == expected.shape == (size, spec.embedding_dim)
            assert_close_vectors(actual, expected, FP32_COSINE, [f"{size}x{length}"] * size)
        # A large batch on cores lent by an idle runner (two threads) runs the library
        # compiled for the most threads at or below that (here the only one, one thread).
        lent = packed_batch(batch_of(4, 256, 77))
        assert_close_vectors(
            np.stack(forward(lent, 2)), np.stack(eager_forward(lent, 1)), FP32_COSINE
        )
        # The weights came in the library: the eager module is built at the first batch the
        # library does not run (the other head, token_embed), which then answers as eager does.
        deferred = restarted._model.module
        assert isinstance(deferred, DeferredModule) and not deferred.built
        batch = collate(batch_of(2, 12, 99), pad_token_id=0)
        token_batch = collate(
            [
                text_item(item.group, item.index, item.payload.input_ids, head="token_embed")
                for item in batch.items
            ],
            pad_token_id=0,
        )
        rows = forward(token_batch, 1)
        assert deferred.built
        assert [row.shape[0] for row in rows] == [item.cost for item in batch.items]
        for row, expected_row in zip(rows, eager_forward(token_batch, 1), strict=True):
            assert_close_vectors(row, expected_row, FP32_COSINE)
        restarted.close()

    # A truncated library is never run: the entry is rebuilt, with one warning. (Truncated as
    # a new file: this process still maps the old one, which a write in place would corrupt.
    # The rebuild puts back a copy of the entry instead of compiling the same library again.)
    (library,) = cache.glob("aot/*/*.so")
    good = cache.parent / "good-entry"
    shutil.copytree(library.parent, good)
    truncated = library.with_suffix(".part")
    truncated.write_bytes(library.read_bytes()[: library.stat().st_size // 2])
    truncated.replace(library)
    rebuilt_entries: list[Path] = []

    def rebuild_from_the_copy(entry: forward_cache.CacheEntry, *args: Any) -> None:
        rebuilt_entries.append(entry.directory)
        shutil.rmtree(entry.directory)
        shutil.copytree(good, entry.directory)

    monkeypatch.setattr(aot, "build", rebuild_from_the_copy)
    with caplog.at_level(logging.WARNING, logger="poolserve.backends.torch.aot"):
        rebuilt = make_backend(spec, "on")
        rebuilt.load()
    assert rebuilt.report.source == "built" and rebuilt_entries == [library.parent]
    assert any("stale or corrupt" in record.getMessage() for record in caplog.records)
    batch = packed_batch(batch_of(3, 40, 5))
    assert_close_vectors(
        np.stack(rebuilt.executor()(batch, 1)), np.stack(eager_forward(batch, 1)), FP32_COSINE
    )
    rebuilt.close()


@pytest.mark.slow
def test_poolserve_compile_fills_the_cache_for_a_cross_encoder_with_token_types(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runners on one thread each: a library for one thread, and one for a large batch
    that borrows the other runner's core. Padded (`--packing off`): the graph with token types
    that cross-encoders whose head runs padded (ALBERT, DeBERTa, remote code) are served by."""
    model = make_cross_encoder(tmp_path / "reranker")
    flags = ["--dtype", "float32", "--runners", "2", "--torch-threads", "1", "--packing", "off"]
    assert commands.main(["compile", str(model), *flags, "--log-level", "warning"]) == 0
    assert len(list(cache.glob("aot/*/*.so"))) == 2
    reranker = prepare_model(ModelConfig(model=str(model), dtype="float32"))
    use_threads(1)
    eager = make_backend(reranker, "off", packing="off")
    eager.load()
    with monkeypatch.context() as patched:
        compiled = loaded_from_the_cache(reranker, patched, runners=2, packing="off")
        assert compiled.compiled_threads == (1, 2) and not compiled.packed_heads
        compiled_only(patched, compiled, reranker.heads[0])
        forward, eager_forward = compiled.executor(), eager.executor()
        shapes = [(1, 9, True, 1), (5, 30, True, 1), (3, 12, False, 1), (4, 120, True, 2)]
        for seed, (size, length, pairs, threads) in enumerate(shapes):
            items = batch_of(size, length, seed, pairs=pairs, head=reranker.heads[0])
            batch = collate(items, pad_token_id=0)
            np.testing.assert_allclose(
                np.stack(forward(batch, threads)), np.stack(eager_forward(batch, 1)), atol=1e-5
            )
        # Both runners run the one library at once, each on its own thread and model instance.
        batches = [
            collate(batch_of(6, 40, seed, pairs=True, head=reranker.heads[0]), pad_token_id=0)
            for seed in range(8)
        ]
        expected = [np.stack(eager_forward(batch, 1)) for batch in batches]
        start = threading.Barrier(2)

        def runner() -> list[np.ndarray]:
            own = compiled.executor()
            start.wait()
            return [np.stack(own(batch, 1)) for batch in batches * 4]

        with ThreadPoolExecutor(2) as pool:
            results = [future.result() for future in [pool.submit(runner) for _ in range(2)]]
        for result in results:
            for got, want in zip(result, expected * 4, strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5)
    compiled.close()


@pytest.mark.slow
def test_a_packed_cross_encoder_compiled_ahead_of_time_scores_as_its_padded_model(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default: pairs packed, the head applied to each pair's first token, compiled."""
    reranker = prepare_model(
        ModelConfig(model=str(make_cross_encoder(tmp_path / "reranker")), dtype="float32")
    )
    use_threads(1)
    eager = make_backend(reranker, "off", packing="off")
    eager.load()
    make_backend(reranker, "on").load()
    with monkeypatch.context() as patched:
        compiled = loaded_from_the_cache(reranker, patched)
        assert compiled.packed_heads == {"classify"}
        compiled_only(patched, compiled, "classify")
        for seed, (size, length, pairs) in enumerate([(1, 9, True), (7, 30, True), (5, 60, False)]):
            items = batch_of(size, length, seed, pairs=pairs, head="classify")
            np.testing.assert_allclose(
                np.stack(compiled.executor()(packed_batch(items), 1)),
                np.stack(eager.executor()(collate(items, pad_token_id=0), 1)),
                atol=1e-5,
            )
    compiled.close()


def test_the_cache_key_follows_the_model_files_dtype_and_threads(
    spec: ModelSpec, tmp_path: Path
) -> None:
    target = forward_cache.ForwardTarget("embed", 1, False, 256)

    def key(model: ModelSpec, of: forward_cache.ForwardTarget = target) -> str:
        return forward_cache.entry_for(tmp_path, model, of)[0].key

    copy = tmp_path / "model"
    shutil.copytree(minilm_path(), copy)
    copied = prepare_model(ModelConfig(model=str(copy), dtype="float32"))
    assert key(copied) == key(copied)
    (copy / "README.md").write_text("notes that no forward reads")
    unchanged = key(copied)
    assert unchanged == key(prepare_model(ModelConfig(model=str(copy), dtype="float32")))
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert key(copied) != unchanged
    assert key(spec) != key(replace(spec, dtype="bfloat16"))
    assert key(spec) != key(spec, replace(target, threads=2))
    assert key(spec) != key(spec, replace(target, with_token_types=True))


def test_an_entry_is_valid_only_as_its_manifest_recorded_it(tmp_path: Path) -> None:
    import hashlib
    import json

    entry = forward_cache.CacheEntry("k" * 40, tmp_path / "entry")
    entry.directory.mkdir()
    library = entry.directory / "model-0123.so"
    library.write_bytes(b"library bytes")
    assert forward_cache.valid_library(entry) is None  # no manifest
    manifest = {
        "key": entry.key,
        "library": library.name,
        "library_bytes": len(b"library bytes"),
        "library_sha256": hashlib.sha256(b"library bytes").hexdigest(),
    }
    entry.manifest.write_text(json.dumps(manifest))
    assert forward_cache.valid_library(entry) == library
    library.write_bytes(b"library")  # truncated
    assert forward_cache.valid_library(entry) is None
    library.write_bytes(b"library BYTES")  # same size, other bytes
    assert forward_cache.valid_library(entry) is None
    entry.manifest.write_text(json.dumps({**manifest, "library": "../elsewhere.so"}))
    assert forward_cache.valid_library(entry) is None
    entry.manifest.write_text("{")  # a manifest cut short
    assert forward_cache.valid_library(entry) is None


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


def _unexportable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """torch.export refuses the model; torch.compile is recorded and returns the module."""
    compiled: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise torch._dynamo.exc.UserError(
            torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION, "Constraints violated (length)!"
        )

    def record(module: Any, **options: Any) -> Any:
        compiled.append(module)
        return module

    monkeypatch.setattr(torch.export, "export", refuse)
    monkeypatch.setattr(torch, "compile", record)
    return compiled


def test_a_model_that_does_not_export_is_compiled_with_torch_compile_on_one_runner(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiled = _unexportable(monkeypatch)
    monkeypatch.setattr(compile_gain, "MIN_GAIN", 0.0)  # the stand-in compiles to eager
    # `auto` at a start waits for no compile: torch.compile (not cached) would run at each one.
    served = make_backend(spec, "auto", packing="off")
    served.load()
    assert served.report.source == "eager" and not compiled
    backend = make_backend(spec, "on", packing="off")
    with caplog.at_level(logging.INFO, logger="poolserve.backends.torch"):
        backend.load()
    assert backend.report.source == "jit" and len(compiled) == 1
    assert any("Constraints violated" in record.getMessage() for record in caplog.records)
    batch = collate(batch_of(3, 20, 2), pad_token_id=0)
    assert len(backend.executor()(batch, 1)) == 3
    assert not list(cache.glob("aot/*/*.so"))


def test_with_several_runners_a_model_that_does_not_export_is_served_eagerly(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiled = _unexportable(monkeypatch)
    backend = make_backend(spec, "on", runners=2, packing="off")
    with caplog.at_level(logging.INFO, logger="poolserve.backends.torch"):
        backend.load()
    assert backend.report.source == "eager" and not backend.compiled and not compiled
    assert any("eagerly with 2 runners" in record.getMessage() for record in caplog.records)


def test_a_packed_model_that_does_not_export_serves_packed_batches_eagerly(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compiled = _unexportable(monkeypatch)
    backend = make_backend(spec, "on")
    with caplog.at_level(logging.INFO, logger="poolserve.backends.torch"):
        backend.load()
    assert backend.report.source == "eager" and not compiled and backend.packed_heads
    assert any("packed batches eagerly" in record.getMessage() for record in caplog.records)
    assert len(backend.executor()(packed_batch(batch_of(3, 20, 2)), 1)) == 3


def test_a_model_that_fails_to_compile_is_served_eagerly_with_one_log_line(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing_build(*args: Any) -> None:
        raise RuntimeError("C++ compile error: this architecture's kernels do not build")

    monkeypatch.setattr(backend_module.aot, "build", failing_build)
    backend = make_backend(spec, "on")
    with caplog.at_level(logging.WARNING, logger="poolserve.backends.torch.torch_backend"):
        backend.load()
    assert not backend.compiled
    warnings = [r for r in caplog.records if r.name == "poolserve.backends.torch.torch_backend"]
    assert len(warnings) == 1 and "serving it eagerly" in warnings[0].getMessage()
    batch = collate(batch_of(3, 20, 2), pad_token_id=0)
    assert len(backend.executor()(batch, 1)) == 3
