"""`--compile auto` compiles only where it pays: a compiled forward measured slower than eager,
or off from eager's outputs, is dropped and served eagerly, its figures are kept, and a restart
neither measures again nor compiles; one that pays is kept; `--compile on` keeps it whatever it
measures. The compiled forward here stands in for a library (the measurement is what is tested:
tests/unit/backends/torch/test_aot.py compiles for real), over a tiny cross-encoder."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from poolserve.backends.torch import compile_gain
from poolserve.backends.torch import torch_backend as backend_module
from poolserve.backends.torch.torch_backend import TorchBackend
from poolserve.backends.torch_model.executor import CompiledForward, TorchBatch, run_eagerly
from poolserve.config import CompileMode, ModelConfig
from poolserve.engine.collate import collate
from poolserve.engine.model_backend import CompileReport
from poolserve.models.describe import prepare_model

Run = Callable[[Any, TorchBatch], torch.Tensor]


def five_times(module: Any, batch: TorchBatch) -> torch.Tensor:
    """Eager's answer at five times eager's cost: a compiled forward that does not pay (by a
    margin no timing noise closes: at twice, a noisy machine once measured it paying)."""
    for _ in range(4):
        run_eagerly(module, batch)
    return run_eagerly(module, batch)


def off_by_half(module: Any, batch: TorchBatch) -> torch.Tensor:
    """A compiled forward that is wrong (a compiler bug)."""
    return run_eagerly(module, batch) * 1.5


@pytest.fixture
def start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cross_encoder_dir: Path
) -> Callable[..., TorchBackend]:
    """Start a backend whose compiled forward is `run` (None: compiling is not expected) at one
    and two thread counts, in a cache of its own, as `poolserve compile` starts it (a
    server's start only loads what the cache holds: test_aot.py)."""
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path / "cache"))
    spec = prepare_model(ModelConfig(model=str(cross_encoder_dir), dtype="float32"))

    def started(mode: CompileMode, run: Run | None) -> TorchBackend:
        backend = TorchBackend(
            spec,
            partial(collate, pad_token_id=0),
            single_thread_tokens=0,
            threads=1,
            runners=2,
            compile=mode,
        )
        backend.ahead_of_time = True

        def compile_ahead_of_time(module: Any, head: Any, counts: Any) -> CompiledForward:
            assert run is not None, "compiled at a restart"
            backend.report = CompileReport("built")
            runs = dict.fromkeys(counts, partial(run, module))
            return CompiledForward(runs, head, packed=head in backend.packed_heads)

        monkeypatch.setattr(backend, "_compile_ahead_of_time", compile_ahead_of_time)
        backend.load()
        return backend

    return started


def test_a_compiled_forward_that_does_not_pay_is_served_eagerly_and_remembered(
    start: Callable[..., TorchBackend], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "poolserve"):
        first = start("auto", five_times)
    assert not first.compiled and first.report.source == "eager"
    assert set(first.report.gains) == {1, 2}
    assert all(0.05 < gain < 0.6 for gain in first.report.gains.values())
    assert "(measured now; 1 thread(s): 0." in caplog.text
    assert "serving it eagerly" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, "poolserve"):
        restarted = start("auto", None)
    assert not restarted.compiled and restarted.report.gains == first.report.gains
    assert "as measured at an earlier start" in caplog.text
    # `on` compiles whatever the figures say.
    forced = start("on", five_times)
    assert forced.compiled and forced.compiled_threads == (1, 2)


def test_a_compiled_forward_that_pays_is_kept_and_remembered(
    start: Callable[..., TorchBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Eager itself stands in for a compiled forward that pays (no real compile is faster
    # on demand); its gain, about 1, pays once the bar is lowered below it.
    monkeypatch.setattr(compile_gain, "MIN_GAIN", 0.5)
    kept = start("auto", run_eagerly)
    assert kept.compiled and kept.compiled_threads == (1, 2) and kept.report.source == "built"
    assert set(kept.report.gains) == {1, 2}
    kept.close()
    restarted = start("auto", run_eagerly)
    assert restarted.compiled and restarted.report.gains == kept.report.gains


def test_a_compiled_forward_off_from_eager_is_dropped_with_a_warning(
    start: Callable[..., TorchBackend],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(compile_gain, "MIN_GAIN", 0.0)
    with caplog.at_level(logging.WARNING, backend_module.__name__):
        wrong = start("auto", off_by_half)
    assert not wrong.compiled
    assert "differ from eager's by 0.5" in caplog.text
