"""How many bits of a text's vector its batch changes, with and without `--batch-invariant`.

1,000 real sentences (benchmarks/corpus.py) embedded one at a time, then inside random batches
of 1 to 40 sentences sent by 8 threads at once (the batches the scheduler forms from them mix
and cut them further); prints, for the default engine and a batch-invariant one, the rows and
bytes that differ and the largest difference. What the setting costs in throughput is
`benchmarks.paired . . --loads --b-args=--batch-invariant` (docs/benchmarks.md).

    python -m benchmarks.batch_invariance
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from benchmarks import corpus


def alone_and_mixed(engine: Any, texts: Sequence[str], seed: int = 0) -> tuple[Any, Any]:
    """Each text's vector embedded alone, and inside random batches of 1 to 40 texts sent by
    8 threads at once."""
    alone = np.stack([engine.embed([text])[0] for text in texts])
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    while order:
        size = rng.randint(1, 40)
        batches.append(order[:size])
        order = order[size:]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda batch: engine.embed([texts[i] for i in batch]), batches))
    mixed = np.zeros_like(alone)
    for batch, vectors in zip(batches, answers, strict=True):
        mixed[batch] = vectors
    return alone, mixed


def differing(alone: Any, mixed: Any) -> tuple[int, int]:
    """The rows, and the bytes, in which two float32 matrices differ."""
    unequal = alone.view(np.uint32) != mixed.view(np.uint32)
    return int(unequal.any(axis=1).sum()), int(unequal.sum()) * 4


def main() -> None:
    from poolserve import Engine, EngineConfig, ModelConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    texts = corpus.sentences(args.count)
    print(f"{len(texts)} sentences; {corpus.describe(len(texts))}")
    print("| engine | rows differing | bytes differing | largest difference |")
    print("|---|---:|---:|---:|")
    for invariant in (False, True):
        engine = Engine(
            model_config=ModelConfig(model=args.model, dtype=args.dtype),
            engine_config=EngineConfig(batch_invariant=invariant),
        )
        with engine:
            alone, mixed = alone_and_mixed(engine, texts)
        rows, count = differing(alone, mixed)
        largest = float(np.abs(alone - mixed).max())
        name = "--batch-invariant" if invariant else "default (packed)"
        print(f"| {name} | {rows} of {len(texts)} | {count} | {largest:.2e} |")


if __name__ == "__main__":
    main()
