"""Load benchmark: single-sentence /v1/embeddings requests at several concurrencies.

Measures, in the same run, the raw model limit (the same model and dtype called directly:
tokenize + forward + pool at its best batch size) and a bare forward pass of one sentence, then
the server's throughput and latency at each concurrency, and prints one table.

    .venv/bin/python benchmarks/load.py --dtype bfloat16 --concurrency 1 8 64 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import time

import orjson
import torch

from benchmarks.loadgen import build_request, run_load
from benchmarks.sentences import sentences
from benchmarks.server_process import running_server
from poolserve.config import ModelConfig
from poolserve.engine.collate import collate
from poolserve.engine.tokenizer import TextTokenizer
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.models import load_module, prepare_model


def raw_model_limits(
    model: str | None, dtype: str, texts: list[str], batch_sizes: list[int], seconds: float
) -> tuple[dict[int, float], float]:
    """Sentences/s at each batch size (tokenize + forward + pool), and one forward's p50 (s)."""
    spec = prepare_model(ModelConfig(model=model, dtype=dtype))  # type: ignore[arg-type]
    module = load_module(spec)
    tokenizer = TextTokenizer(spec.tokenizer_json)
    pad = spec.pad_token_id

    def encode(batch: list[str]) -> torch.Tensor:
        ids = tokenizer.encode_batch(batch, truncate_to=None)
        group = RequestGroup(len(ids))
        collated = collate([WorkItem(group, i, row) for i, row in enumerate(ids)], pad)
        with torch.inference_mode():
            return module(collated.input_ids, collated.attention_mask, None)

    rates: dict[int, float] = {}
    for size in batch_sizes:
        batches = [texts[i : i + size] for i in range(0, len(texts) - size + 1, size)]
        for batch in batches[:3]:
            encode(batch)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            for batch in batches:
                encode(batch)
                done += len(batch)
        rates[size] = done / (time.perf_counter() - started)

    ids = tokenizer.encode_batch([texts[0]], truncate_to=None)
    one = collate([WorkItem(RequestGroup(1), 0, ids[0])], pad)
    timings = []
    with torch.inference_mode():
        for _ in range(20):
            module(one.input_ids, one.attention_mask, None)
        for _ in range(300):
            started = time.perf_counter()
            module(one.input_ids, one.attention_mask, None)
            timings.append(time.perf_counter() - started)
    gc.collect()
    return rates, statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16, 32, 64, 128])
    parser.add_argument("--server-args", default="", help="extra flags for `poolserve serve`")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    texts = sentences(256)
    rates, forward_one = raw_model_limits(
        args.model, args.dtype, texts, args.batch_sizes, seconds=min(args.seconds, 5.0)
    )
    best_size = max(rates, key=lambda size: rates[size])
    raw_limit = rates[best_size]

    server_args = ["--dtype", args.dtype, *args.server_args.split()]
    if args.model:
        server_args.insert(0, args.model)
    rows = []
    with running_server(server_args) as port:
        bodies = [
            build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": text}))
            for text in texts
        ]
        for concurrency in args.concurrency:
            result = asyncio.run(
                run_load("127.0.0.1", port, bodies, concurrency=concurrency, seconds=args.seconds)
            )
            rows.append(
                {
                    "concurrency": concurrency,
                    "requests": len(result.latencies),
                    "errors": result.errors,
                    "throughput": result.throughput,
                    "p50_ms": result.percentile_ms(50),
                    "p99_ms": result.percentile_ms(99),
                    "ratio_to_raw": result.throughput / raw_limit,
                }
            )

    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, dtype {args.dtype}"
    )
    print(
        "raw model (tokenize + forward + pool), sentences/s by batch size: "
        + ", ".join(f"{size}: {rate:.0f}" for size, rate in rates.items())
    )
    print(
        f"raw limit: {raw_limit:.0f} sentences/s at batch {best_size}; "
        f"bare forward of one sentence: p50 {forward_one * 1000:.2f} ms"
    )
    print()
    print(
        "| concurrency | req/s | p50 ms | p99 ms | errors | throughput / raw limit "
        "| p50 - bare forward |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['concurrency']} | {row['throughput']:.0f} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['errors']} | {row['ratio_to_raw']:.2f} | "
            f"{row['p50_ms'] - forward_one * 1000:+.2f} ms |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"raw_rates": rates, "forward_one_s": forward_one, "rows": rows}, handle)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    main()
