"""Long documents and re-indexing, through the Python API (no HTTP), on real text.

- **documents**: whole documents of 2,000-20,000 tokens (`corpus.long_documents()`: each module's
  documentation of the standard library, and runs of them joined), embedded with
  `long_input="chunk"`: documents/s and tokens/s, next to the raw-model limit on the same
  chunks (the model called directly on their token ids in length-sorted batches of 64: the
  best a plain batch loop does, with none of the server's work).
- **re-index**: an index of prose chunks embedded once, then again with a fifth of its chunks
  changed, with `--cache-bytes` and without: seconds per re-index and their ratio.

Prints a table; `python -m benchmarks.long_documents`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks import corpus
from poolserve import Engine, EngineConfig
from poolserve.backends.torch_model.executor import to_torch
from poolserve.backends.torch_model.loader import load_module
from poolserve.engine.collate import collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer


def rounds_of(fn: Callable[[], object], rounds: int) -> list[float]:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return seconds


def raw_limit(engine: Engine, documents: list[str]) -> float:
    """Seconds for the model alone on the documents' chunks (as the engine planned them)."""
    spec = engine.service.core.model
    module = load_module(spec)
    tokenizer = TextTokenizer(spec.tokenizer_json)
    before, after = tokenizer.special_frame()
    chunks: list[list[int]] = []
    for text, (_, spans) in zip(documents, engine.embed_chunks(documents).chunks, strict=True):
        own = tokenizer.encodings([text], add_special_tokens=False)[0].ids
        chunks += [[*before, *own[a:b], *after] for a, b in (span.tokens for span in spans)]
    chunks.sort(key=len)

    def run() -> None:
        for start in range(0, len(chunks), 64):
            rows = chunks[start : start + 64]
            group = RequestGroup(len(rows))
            batch = collate([text_item(group, i, r) for i, r in enumerate(rows)], pad_token_id=0)
            tensors = to_torch(batch, torch.device("cpu"))
            with torch.inference_mode():
                module("embed", tensors.input_ids, tensors.attention_mask, None)

    return statistics.median(rounds_of(run, 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    documents = corpus.long_documents()
    texts = [text for text, _ in documents]
    tokens = sum(n for _, n in documents)
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(
        f"# {len(documents)} documents of {min(n for _, n in documents)}-"
        f"{max(n for _, n in documents)} tokens ({tokens} in all)"
    )
    with Engine() as engine:
        engine.embed(texts[:2], long_input="chunk")  # warm up
        seconds = statistics.median(
            rounds_of(lambda: engine.embed(texts, long_input="chunk"), args.rounds)
        )
        raw = raw_limit(engine, texts)
    print("| row | documents/s | tokens/s | raw-model limit (s) | efficiency |")
    print("|---|---|---|---|---|")
    print(
        f"| long documents, chunked | {len(texts) / seconds:.2f} | {tokens / seconds:.0f} | "
        f"{raw:.2f} vs {seconds:.2f} | {raw / seconds:.2f} |"
    )

    chunks = corpus.sentences(2000)
    timings: dict[str, list[float]] = {"cache": [], "no cache": []}
    for cache_bytes, label in ((64 * 2**20, "cache"), (0, "no cache")):
        with Engine(engine_config=EngineConfig(cache_bytes=cache_bytes)) as engine:
            engine.embed(chunks[-64:])  # warm up
            for round_ in range(args.rounds):
                index = chunks[round_ * 500 : round_ * 500 + 500]
                changed = chunks[1500 + round_ * 100 : 1600 + round_ * 100]
                engine.embed(index)
                reindex = [*index[:400], *changed]
                timings[label] += rounds_of(lambda: engine.embed(reindex), 1)  # noqa: B023
    with_cache = statistics.median(timings["cache"])
    without = statistics.median(timings["no cache"])
    print(
        f"| re-index of 500 chunks, 80 % unchanged | cache {with_cache:.2f} s | no cache "
        f"{without:.2f} s | | {without / with_cache:.2f}x |"
    )


if __name__ == "__main__":
    main()
