"""Real text a backend measures and checks itself on at start-up (the precision chosen on the
machine): 64 prose sentences of 5 to 56 tokens from Python's own documentation, in a natural
length spread, shipped with the package so that every start measures the same text offline."""

from __future__ import annotations

import functools
from importlib.resources import files


@functools.cache
def probe_texts() -> tuple[str, ...]:
    text = (files("poolserve.backends") / "probe.txt").read_text(encoding="utf-8")
    return tuple(line for line in text.splitlines() if line.strip())
