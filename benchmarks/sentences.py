"""Short, varied English sentences for load benchmarks (about 8 to 20 tokens each)."""

from __future__ import annotations

SUBJECTS = [
    "The quick brown fox",
    "A small team of engineers",
    "Our embedding server",
    "The old lighthouse keeper",
    "Every morning the baker",
    "A curious student",
    "The city council",
    "My neighbour's dog",
]
VERBS = ["jumps over", "writes about", "carefully measures", "quietly watches", "talks to"]
OBJECTS = [
    "the lazy dog.",
    "a long list of unusual requests.",
    "the rising tide near the harbour.",
    "fresh bread and warm coffee.",
    "the latency of every single request.",
    "a question nobody could answer.",
]


def sentences(count: int = 240) -> list[str]:
    """`count` distinct-looking sentences, deterministic."""
    out = []
    for i in range(count):
        subject = SUBJECTS[i % len(SUBJECTS)]
        verb = VERBS[(i // len(SUBJECTS)) % len(VERBS)]
        obj = OBJECTS[(i // 3) % len(OBJECTS)]
        out.append(f"{subject} {verb} {obj}")
    return out
