"""`--dtype auto` on the CPU: the precision measured on the machine, the fastest within the
tolerance of float32 kept, the choice cached and honoured at the next start."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.backends.torch_model import precision
from poolserve.backends.torch_model.device import cpu_precisions
from poolserve.config import ModelConfig as Config
from poolserve.engine.collate import collate
from poolserve.models.describe import prepare_model

REFERENCE = [np.array([1.0, 0.0]), np.array([0.0, 2.0])]
padded = partial(collate, pad_token_id=0)


def timed(outputs: dict[str, tuple[float, float]]) -> Any:
    """A `_run` whose outputs are REFERENCE off by the given relative error, in the given
    seconds, by the module's precision (what `load` returned: its dtype's name)."""

    def run(module: str, batches: Any, device: str, threads: int) -> Any:
        error, seconds = outputs[module]
        return [vector * (1 + error) for vector in REFERENCE], seconds

    return run


@pytest.mark.parametrize(
    ("measured", "chosen"),
    [
        ({"float32": (0, 0.5), "bfloat16": (0.01, 0.3)}, "bfloat16"),  # faster, close enough
        ({"float32": (0, 0.5), "bfloat16": (0.01, 0.7)}, "float32"),  # slower
        ({"float32": (0, 0.5), "bfloat16": (0.2, 0.1)}, "float32"),  # fast but too far off
    ],
)
def test_the_fastest_precision_within_the_tolerance_is_kept(
    monkeypatch: pytest.MonkeyPatch, measured: dict[str, tuple[float, float]], chosen: str
) -> None:
    monkeypatch.setattr(precision, "cpu_precisions", lambda: ("float32", "bfloat16"))
    monkeypatch.setattr(precision, "_run", timed(measured))
    module, report = precision.measure(lambda dtype: dtype, [], "cpu", 1)  # type: ignore[arg-type,return-value]
    assert (module, report.dtype, report.source) == (chosen, chosen, "measured")
    assert report.seconds == {dtype: seconds for dtype, (_, seconds) in measured.items()}
    assert report.errors["bfloat16"] == pytest.approx(measured["bfloat16"][0])


def test_the_choice_is_cached_and_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cross_encoder_dir: Path
) -> None:
    spec = prepare_model(Config(model=str(cross_encoder_dir)))
    measured: list[str] = []

    def measure(load: Any, batches: Any, device: str, threads: int) -> Any:
        measured.append(device)
        return load("bfloat16"), precision.PrecisionReport(
            "bfloat16",
            {"float32": 0.5, "bfloat16": 0.3},
            {"float32": 0.0, "bfloat16": 0.01},
            "measured",
        )

    monkeypatch.setattr(precision, "measure", measure)
    loads: list[str] = []
    for source in ("measured", "cached"):
        _, report = precision.from_cache_or_measure(tmp_path, spec, loads.append, padded, threads=1)
        assert (report.dtype, report.source) == ("bfloat16", source)
    assert len(measured) == 1 and loads == ["bfloat16", "bfloat16"]
    # Another thread count is another machine's choice: measured again.
    precision.from_cache_or_measure(tmp_path, spec, loads.append, padded, threads=2)
    assert len(measured) == 2


def test_the_probe_is_real_text_in_batches_of_the_main_head(cross_encoder_dir: Path) -> None:
    spec = prepare_model(Config(model=str(cross_encoder_dir)))
    batches = precision.probe_batches(spec, padded)
    assert sum(len(batch.items) for batch in batches) == 64
    assert {batch.head for batch in batches} == {spec.heads[0]}
    lengths = [item.cost for batch in batches for item in batch.items]
    assert lengths == sorted(lengths) and min(lengths) < 10 < 40 < max(lengths)


def test_an_engine_of_dtype_auto_serves_the_measured_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cross_encoder_dir: Path
) -> None:
    """On a CPU with one fast precision nothing is measured (float32); with more, the first
    engine measures, the next one reads the choice, and both serve it."""
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    sources = []
    for _ in range(2):
        with Engine(
            model_config=ModelConfig(model=str(cross_encoder_dir)),
            engine_config=EngineConfig(cpu_workers=1, runners=1),
        ) as engine:
            report = engine.core.precision
            if len(cpu_precisions()) == 1:
                assert report is None and engine.core.model.dtype == "float32"
                return
            assert report is not None and engine.core.model.dtype == report.dtype
            sources.append(report.source)
            scores = engine.score("a query", ["a document", "another one"])
            assert scores.shape == (2,) and np.isfinite(scores).all()
    assert sources == ["measured", "cached"]
