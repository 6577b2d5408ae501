"""Real text a backend measures and checks itself on at start-up, shipped with the package so
that every start uses the same text offline:

- `probe_texts()`: 64 prose sentences of 5 to 56 tokens from Python's own documentation, in a
  natural length spread (the precision chosen on the machine is timed on them);
- `calibration_texts()`: 512 prose sentences of 5 to 60 tokens (23 on average) from the
  documentation of numpy, pydantic, FastAPI, Starlette, huggingface_hub, transformers and other
  libraries (not the standard library the benchmarks' corpus comes from), shuffled: an int8
  model's activation ranges are measured on three quarters of them (`calibration_split`) and
  its quality gate checked on the quarter it never saw.
"""

from __future__ import annotations

import functools
from importlib.resources import files


def _lines(name: str) -> tuple[str, ...]:
    text = (files("poolserve.backends") / name).read_text(encoding="utf-8")
    return tuple(line for line in text.splitlines() if line.strip())


@functools.cache
def probe_texts() -> tuple[str, ...]:
    return _lines("probe.txt")


@functools.cache
def calibration_texts() -> tuple[str, ...]:
    return _lines("calibration.txt")


def calibration_split() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The calibration sentences (three in four) and the held-out ones the gate checks."""
    texts = calibration_texts()
    held_out = tuple(text for index, text in enumerate(texts) if index % 4 == 0)
    return tuple(text for index, text in enumerate(texts) if index % 4), held_out
