"""Unit tests start from a clean environment: no POOLSERVE_* variable of the developer's shell
decides a setting (the tests that read variables set their own). `load_engine` loads small
engines that a test closes at its end."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from poolserve import Engine, EngineConfig, ModelConfig


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("POOLSERVE_"):
            monkeypatch.delenv(name)


SMALL_ENGINE = EngineConfig(cpu_workers=1, max_batch_tokens=4096)


@pytest.fixture
def load_engine() -> Iterator[Any]:
    """Build engines for one test and close them all at its end."""
    engines: list[Engine] = []

    def load(directory: Path | None, **options: Any) -> Engine:
        model = None if directory is None else str(directory)
        config = ModelConfig(model=model, dtype="float32", **options)
        engines.append(Engine(model_config=config, engine_config=SMALL_ENGINE))
        return engines[-1]

    yield load
    for engine in engines:
        engine.close()
