"""Load benchmark: single-sentence /v1/embeddings requests at several concurrencies.

Measures, in the same run, the raw model limit (the same model and dtype called directly, in its
own process with torch's defaults: tokenize + forward + pool at its best batch size, sorted by
length as sentence-transformers does) and a bare forward pass of one sentence; then the
server's throughput and latency at each concurrency, with a closed-loop client on raw sockets
(benchmarks/loadgen.py), each next to the padding efficiency (tokens ÷ padded tokens, from the
server's /stats) of the batches that served it. Prints one markdown table.

The sentences are real prose (benchmarks/corpus.py) unless `--corpus templated`
(benchmarks/sentences.py, the corpus of the results before issue 18).

    .venv/bin/python -m benchmarks.load --dtype bfloat16 --concurrency 1 8 64 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import urllib.request

import orjson

from benchmarks import corpus, sentences
from benchmarks.loadgen import LoadResult, build_request, run_load
from benchmarks.server_process import running_server

CORPORA = ("real", "templated")


def texts_of(name: str, count: int = 2000) -> list[str]:
    """The benchmark's sentences: real prose, or the templated ones of earlier results."""
    return corpus.sentences(count) if name == "real" else sentences.sentences(min(count, 256))


def padding_counters(port: int) -> tuple[int, int]:
    """The server's tokens and padded tokens so far (GET /stats)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as response:
        stats = json.loads(response.read())
    return int(stats["tokens"]), int(stats["padded_tokens"])


def padding_efficiency(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Tokens ÷ padded tokens of the batches run between two `padding_counters` readings."""
    padded = after[1] - before[1]
    return (after[0] - before[0]) / padded if padded else float("nan")


def raw_model_limits(model: str | None, dtype: str, corpus_name: str = "real") -> dict[str, object]:
    command = [sys.executable, "-m", "benchmarks.raw_model", "--dtype", dtype]
    command += ["--corpus", corpus_name]
    if model:
        command += ["--model", model]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_WAIT_POLICY", None)  # the raw model runs with torch's defaults
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--server-args", default="", help="extra flags for `poolserve serve`")
    parser.add_argument("--corpus", choices=CORPORA, default="real")
    args = parser.parse_args()

    raw = raw_model_limits(args.model, args.dtype, args.corpus)
    rates = {int(size): float(rate) for size, rate in raw["rates"].items()}  # type: ignore[attr-defined]
    best_size = max(rates, key=lambda size: rates[size])
    raw_limit = rates[best_size]
    forward_ms = float(raw["forward_one_s"]) * 1000  # type: ignore[arg-type]

    server_args = ["--dtype", args.dtype, *args.server_args.split()]
    if args.model:
        server_args.insert(0, args.model)
    results: list[tuple[LoadResult, float]] = []
    with running_server(server_args) as port:
        texts = texts_of(args.corpus)
        requests = [
            build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": text}))
            for text in texts
        ]
        for concurrency in args.concurrency:
            load = run_load(
                "127.0.0.1", port, requests, concurrency=concurrency, seconds=args.seconds
            )
            before = padding_counters(port)
            result = asyncio.run(load)
            results.append((result, padding_efficiency(before, padding_counters(port))))

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; torch {raw['torch']}; "
        f"dtype {args.dtype}; server flags: {' '.join(server_args)}"
    )
    print(f"corpus: {corpus.describe() if args.corpus == 'real' else 'templated (sentences.py)'}")
    print(
        "raw model (tokenize + forward + pool, torch defaults), sentences/s by batch size: "
        + ", ".join(f"{size}: {rate:.0f}" for size, rate in rates.items())
    )
    print(
        f"raw limit: {raw_limit:.0f} sentences/s at batch {best_size}; "
        f"bare forward of one sentence: p50 {forward_ms:.2f} ms"
    )
    print()
    print(
        "| concurrency | req/s | padding efficiency | p50 ms | p99 ms | errors | ÷ raw limit "
        "| p50 − bare forward |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for result, efficiency in results:
        p50 = result.percentile_ms(50)
        print(
            f"| {result.concurrency} | {result.throughput:.0f} | {efficiency:.2f} | {p50:.2f} | "
            f"{result.percentile_ms(99):.2f} | {result.errors} | "
            f"{result.throughput / raw_limit:.2f} | {p50 - forward_ms:+.2f} ms |"
        )


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    main()
