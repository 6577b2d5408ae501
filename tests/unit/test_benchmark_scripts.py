"""The benchmark scripts import cleanly: they are run by hand, rarely, and a refactor that moves
what they import must fail here rather than in the next person's benchmark session."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
# Run by a peer's own virtual environment (what they import is not installed here).
PEER_SCRIPTS = {"openvino_worker"}
SCRIPTS = sorted(
    path.stem
    for path in BENCHMARKS.glob("*.py")
    if path.stem != "__init__" and path.stem not in PEER_SCRIPTS
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_imports(script: str) -> None:
    module = importlib.import_module(f"benchmarks.{script}")
    assert module.__doc__, f"benchmarks/{script}.py says what it measures in its docstring"


@pytest.mark.parametrize("script", sorted(PEER_SCRIPTS))
def test_a_peer_script_parses_and_says_what_it_does(script: str) -> None:
    tree = ast.parse((BENCHMARKS / f"{script}.py").read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"benchmarks/{script}.py says what it does in its docstring"
