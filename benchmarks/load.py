"""Load benchmark: single-sentence /v1/embeddings requests at several concurrencies.

Measures, in the same run, the raw model limit (the same model and dtype called directly, in its
own process with torch's defaults: tokenize + forward + pool at its best batch size) and a bare
forward pass of one sentence; then the server's throughput and latency at each concurrency,
with a closed-loop client on raw sockets (benchmarks/loadgen.py). Prints one markdown table.

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

import orjson

from benchmarks.loadgen import LoadResult, build_request, run_load
from benchmarks.sentences import sentences
from benchmarks.server_process import running_server


def raw_model_limits(model: str | None, dtype: str) -> dict[str, object]:
    command = [sys.executable, "-m", "benchmarks.raw_model", "--dtype", dtype]
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
    args = parser.parse_args()

    raw = raw_model_limits(args.model, args.dtype)
    rates = {int(size): float(rate) for size, rate in raw["rates"].items()}  # type: ignore[attr-defined]
    best_size = max(rates, key=lambda size: rates[size])
    raw_limit = rates[best_size]
    forward_ms = float(raw["forward_one_s"]) * 1000  # type: ignore[arg-type]

    server_args = ["--dtype", args.dtype, *args.server_args.split()]
    if args.model:
        server_args.insert(0, args.model)
    results: list[LoadResult] = []
    with running_server(server_args) as port:
        texts = sentences(256)
        requests = [
            build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": text}))
            for text in texts
        ]
        for concurrency in args.concurrency:
            load = run_load(
                "127.0.0.1", port, requests, concurrency=concurrency, seconds=args.seconds
            )
            results.append(asyncio.run(load))

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; torch {raw['torch']}; "
        f"dtype {args.dtype}; server flags: {' '.join(server_args)}"
    )
    print(
        "raw model (tokenize + forward + pool, torch defaults), sentences/s by batch size: "
        + ", ".join(f"{size}: {rate:.0f}" for size, rate in rates.items())
    )
    print(
        f"raw limit: {raw_limit:.0f} sentences/s at batch {best_size}; "
        f"bare forward of one sentence: p50 {forward_ms:.2f} ms"
    )
    print()
    print("| concurrency | req/s | p50 ms | p99 ms | errors | ÷ raw limit | p50 − bare forward |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for result in results:
        p50 = result.percentile_ms(50)
        print(
            f"| {result.concurrency} | {result.throughput:.0f} | {p50:.2f} | "
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
