"""OpenAI's Batch API against `poolserve embed` on the same lines, and beside interactive traffic.

The lines: real sentences (benchmarks/corpus.py), one a request, as an OpenAI batch file of
`/v1/embeddings` requests (`{"input": TEXT}`: answered in floats, as the route answers it). Phases:

- `poolserve embed` on the same sentences (a JSONL corpus): its rate, from its own summary;
- the batch alone on a server (upload, create, poll until completed, with the openai SDK);
- interactive clients alone (one sentence a request, default priority): queries at `--open-rate`
  a second (Poisson, open loop), then `--interactive` closed-loop clients; their p99 idle;
- the same clients while a batch runs: their p99 against idle (issue 48's bound: 3×), and what
  the batch answered meanwhile (lines/s, from its request counts).

Each round runs the phases in turn; the table holds medians over `--rounds`.

    python -m benchmarks.batch_api --lines 4000 --seconds 15 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
import orjson

from benchmarks import corpus
from benchmarks.loadgen import LoadResult, build_request, run_load, run_open_load
from benchmarks.server_process import running_server

HOST = "127.0.0.1"


def embed_rate(texts: list[str], folder: Path, model_args: list[str]) -> float:
    """`poolserve embed MODEL_ARGS` on `texts`: records a second, as its summary says."""
    source = folder / "corpus.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    output = folder / f"out-{time.monotonic_ns()}.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "poolserve", "embed", str(source), "-o", str(output), *model_args],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"embedded (\d+) records .* in ([\d.]+) s", done.stdout)
    assert found, done.stdout + done.stderr
    return int(found[1]) / float(found[2])


def batch_file(texts: list[str]) -> bytes:
    return "".join(
        json.dumps(
            {"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings", "body": {"input": t}}
        )
        + "\n"
        for i, t in enumerate(texts)
    ).encode()


def started_batch(client: openai.OpenAI, data: bytes) -> str:
    source = client.files.create(file=("lines.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(
        input_file_id=source.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    return batch.id


def answered(client: openai.OpenAI, batch_id: str) -> int:
    counts = client.batches.retrieve(batch_id).request_counts
    return counts.completed + counts.failed if counts else 0


def batch_alone(client: openai.OpenAI, data: bytes, lines: int) -> float:
    """Lines a second, from create to completed (polled every 50 ms)."""
    began = time.perf_counter()
    batch_id = started_batch(client, data)
    while client.batches.retrieve(batch_id).status != "completed":
        time.sleep(0.05)
    return lines / (time.perf_counter() - began)


def beside_batch(
    client: openai.OpenAI, data: bytes, port: int, load: object, seconds: float
) -> tuple[LoadResult, float]:
    """The interactive load while a batch runs, and the batch's lines/s meanwhile; the batch
    is cancelled after."""
    batch_id = started_batch(client, data)
    while client.batches.retrieve(batch_id).status != "in_progress":
        time.sleep(0.05)
    first = answered(client, batch_id)
    began = time.perf_counter()
    result = asyncio.run(load(port, seconds))  # type: ignore[operator]
    rate = (answered(client, batch_id) - first) / (time.perf_counter() - began)
    try:
        client.batches.cancel(batch_id)
    except openai.ConflictError:  # it ended first: the rate above says so
        return result, rate
    while client.batches.retrieve(batch_id).status != "cancelled":
        time.sleep(0.05)
    return result, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=4000, help="lines of the measured batch")
    parser.add_argument("--seconds", type=float, default=15.0, help="an interactive phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--open-rate", type=float, default=20.0)
    parser.add_argument("--interactive", type=int, default=4)
    parser.add_argument(
        "--server-args",
        default="",
        help="model and engine flags for `poolserve serve` and `poolserve embed` (--dtype ...)",
    )
    args = parser.parse_args()
    server_args = args.server_args.split()
    pool = corpus.sentences()
    texts = [pool[i % len(pool)] for i in range(args.lines)]
    data = batch_file(texts)
    # Enough lines that the batch outlasts an interactive phase (the most one batch may hold).
    long_data = batch_file([pool[i % len(pool)] for i in range(50_000)])
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as folder:
        server_flags = [*server_args, "--batch-dir", str(Path(folder) / "batches")]
        with running_server(server_flags) as port:
            client = openai.OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key="x")
            one = [
                build_request(HOST, port, "/v1/embeddings", orjson.dumps({"input": t}))
                for t in pool
            ]

            async def queries(port: int, seconds: float) -> LoadResult:
                return await run_open_load(HOST, port, one, rate=args.open_rate, seconds=seconds)

            async def clients(port: int, seconds: float) -> LoadResult:
                return await run_load(
                    HOST, port, one, concurrency=args.interactive, seconds=seconds
                )

            for _ in range(args.rounds):
                add("embed", embed_rate(texts, Path(folder), server_args))
                add("batch", batch_alone(client, data, args.lines))
                for name, load in (("queries", queries), ("clients", clients)):
                    idle = asyncio.run(load(port, args.seconds))
                    add(f"{name} idle p99", idle.percentile_ms(99))
                    add(f"{name} idle p50", idle.percentile_ms(50))
                    result, rate = beside_batch(client, long_data, port, load, args.seconds)
                    add(f"{name} beside p99", result.percentile_ms(99))
                    add(f"{name} beside p50", result.percentile_ms(50))
                    add(f"{name} 429", result.statuses.get(429, 0))
                    add(f"{name} batch rate", rate)

    med = {name: statistics.median(values) for name, values in figures.items()}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; server flags: "
        f"{' '.join(server_args) or '(defaults)'}; medians of {args.rounds} rounds"
    )
    print(f"corpus: {corpus.describe()}; batch of {args.lines} one-sentence lines")
    print()
    print("| | sentences/s | ÷ poolserve embed |")
    print("|---|---:|---:|")
    print(f"| poolserve embed | {med['embed']:.0f} | 1.00 |")
    ratio = med["batch"] / med["embed"]
    print(f"| batch alone (create → completed) | {med['batch']:.0f} | {ratio:.2f} |")
    print()
    print(
        "| interactive | idle p50 / p99 ms | beside a batch p50 / p99 ms | p99 ÷ idle | 429 "
        "| batch lines/s meanwhile |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in (
        ("queries", f"{args.open_rate:g} queries/s (open loop)"),
        ("clients", f"{args.interactive} closed-loop clients"),
    ):
        print(
            f"| {label} | {med[f'{name} idle p50']:.1f} / {med[f'{name} idle p99']:.1f} "
            f"| {med[f'{name} beside p50']:.1f} / {med[f'{name} beside p99']:.1f} "
            f"| {med[f'{name} beside p99'] / med[f'{name} idle p99']:.2f}× "
            f"| {sum(figures[f'{name} 429']):.0f} | {med[f'{name} batch rate']:.0f} |"
        )


if __name__ == "__main__":
    main()
