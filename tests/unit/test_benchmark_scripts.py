"""The benchmark scripts import cleanly: they are run by hand, rarely, and a refactor that moves
what they import must fail here rather than in the next person's benchmark session."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted(
    path.stem
    for path in (Path(__file__).parents[2] / "benchmarks").glob("*.py")
    if path.stem != "__init__"
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_imports(script: str) -> None:
    module = importlib.import_module(f"benchmarks.{script}")
    assert module.__doc__, f"benchmarks/{script}.py says what it measures in its docstring"
