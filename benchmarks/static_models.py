"""A static embedding model served by poolserve beside what users build today (issue 61).

Writes a potion-shaped model2vec checkpoint (bert-base-uncased's 30,522-token vocabulary from
the bundled MiniLM, × 256 float32 dimensions, normalized, as `StaticModel.save_pretrained`
writes it), then in turn, each round: `poolserve serve` on it at its defaults, FastAPI +
pydantic + `model2vec` per request, and a bare ASGI callable + `model2vec` per request
(benchmarks/static_peers.py, under the same uvicorn settings), and the floor of poolserve's own
design: a bare ASGI callable handing requests to one thread that batches them through
poolserve's tokenizer and table (static_peers.py's `floor_app`: what its request path would
cost with nothing but the path). Each takes two closed-loop loads
of real prose (benchmarks/corpus.py) on keep-alive connections: c=64 one-sentence requests and
c=8 requests of 32 sentences, with the server's CPU (its process tree, from /proc) per request.
`model2vec.encode` alone on batches of 32 (this process, the same cores) is the raw figure, and
poolserve's start (its launch to a 200 from /health) is timed each round.
Printed: a table per round, then the medians and the bars' ratios.

    .venv/bin/python -m benchmarks.static_models --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from benchmarks.corpus import sentences
from benchmarks.loadgen import LoadResult, build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.request_cost import tree_cpu_seconds
from benchmarks.server_process import free_port, running_process

DIM = 256
# poolserve's design with nothing but its path (benchmarks/static_peers.py's `floor_app`).
FLOOR = "the path's floor"
SERVERS = ("poolserve", "FastAPI + model2vec", "bare ASGI + model2vec", FLOOR)


def write_checkpoint(directory: Path) -> Path:
    """A potion-shaped model2vec checkpoint (random vectors: the speed is the same)."""
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    from tests.tiny_models import minilm_path

    tokenizer = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((tokenizer.get_vocab_size(), DIM)).astype(np.float32)
    StaticModel(vectors, tokenizer, normalize=True).save_pretrained(directory)
    return directory


def command(server: str, model: Path, port: int, server_args: Sequence[str]) -> list[str]:
    """The command that starts `server` on `model` at `port` (`server_args`: poolserve's)."""
    if server == "poolserve":
        serve = [sys.executable, "-m", "poolserve", "serve", str(model), "--port", str(port)]
        return [*serve, *server_args]
    app = "fastapi" if server.startswith("FastAPI") else "floor" if server == FLOOR else "bare"
    peer = [sys.executable, "-m", "benchmarks.static_peers", "--app", app]
    return [*peer, "--model", str(model), "--port", str(port)]


@dataclass(frozen=True)
class Load:
    label: str
    concurrency: int
    sentences: int


LOADS = (Load("c=64 × 1 sentence", 64, 1), Load("c=8 × 32 sentences", 8, 32))


@dataclass(frozen=True)
class Figure:
    rate: float  # requests/s
    cpu_us: float  # server CPU a request
    p50_ms: float
    p99_ms: float
    errors: int


def measure(pid: int, port: int, load: Load, texts: Sequence[str], seconds: float) -> Figure:
    inputs: list[object] = (
        [texts[i * 7 % len(texts)] for i in range(256)]
        if load.sentences == 1
        else [list(texts[i * 32 % 1968 :][:32]) for i in range(64)]
    )
    requests = [
        build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": each}))
        for each in inputs
    ]
    asyncio.run(run_load("127.0.0.1", port, requests, concurrency=load.concurrency, seconds=1.0))
    before = tree_cpu_seconds(pid)
    result: LoadResult = asyncio.run(
        run_load(
            "127.0.0.1", port, requests, concurrency=load.concurrency, seconds=seconds, warmup=0
        )
    )
    cpu = tree_cpu_seconds(pid) - before
    done = max(len(result.latencies), 1)
    return Figure(
        result.throughput,
        cpu / done * 1e6,
        result.percentile_ms(50),
        result.percentile_ms(99),
        result.errors,
    )


def raw_rate(model: Path, texts: Sequence[str], seconds: float) -> float:
    """`model2vec.encode` on batches of 32 real sentences: sentences a second."""
    from model2vec import StaticModel

    static = StaticModel.from_pretrained(str(model))
    batches = [list(texts[i : i + 32]) for i in range(0, len(texts) - 31, 32)]
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for batch in batches:
            static.encode(batch)
            done += len(batch)
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-args", default="", help="more flags for `poolserve serve`")
    args = parser.parse_args()
    texts = sentences(2000)
    figures: dict[tuple[str, str], list[Figure]] = {}
    raw: list[float] = []
    starts: list[float] = []  # poolserve's, from its launch to a 200 from /health
    with tempfile.TemporaryDirectory() as scratch:
        model = write_checkpoint(Path(scratch) / "potion-shaped")
        for round_ in range(args.rounds):
            raw.append(raw_rate(model, texts, min(args.seconds, 5.0)))
            for server in SERVERS:
                port = free_port()
                argv = command(server, model, port, args.server_args.split())
                launched = time.perf_counter()
                with running_process(argv, port) as process:
                    if server == "poolserve":
                        starts.append(time.perf_counter() - launched)
                    for load in LOADS:
                        figure = measure(process.pid, port, load, texts, args.seconds)
                        figures.setdefault((server, load.label), []).append(figure)
            print(f"round {round_ + 1}: model2vec.encode alone {raw[-1]:.0f} sentences/s")
            for (server, label), each in figures.items():
                last = each[-1]
                print(
                    f"  {server:24} {label:20} {last.rate:7.0f} req/s  {last.cpu_us:6.0f} µs "
                    f"CPU each  p50 {last.p50_ms:6.1f} ms  p99 {last.p99_ms:6.1f} ms  "
                    f"errors {last.errors}"
                )

    print(
        f"\nCPU: {cpu_model()}, {os.cpu_count()} cores; {args.rounds} rounds of {args.seconds:g} s"
    )
    print("a potion-shaped model2vec checkpoint (30,522 × 256 float32); real prose\n")
    print(
        "| server | load | requests/s | sentences/s | server CPU µs a request | p50 ms | p99 ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    medians: dict[tuple[str, str], float] = {}
    for load in LOADS:
        for server in SERVERS:
            each = figures[(server, load.label)]
            rate = statistics.median(f.rate for f in each)
            medians[(server, load.label)] = rate
            print(
                f"| {server} | {load.label} | {rate:.0f} | {rate * load.sentences:.0f} "
                f"| {statistics.median(f.cpu_us for f in each):.0f} "
                f"| {statistics.median(f.p50_ms for f in each):.1f} "
                f"| {statistics.median(f.p99_ms for f in each):.1f} |"
            )
    raw_median = statistics.median(raw)
    single, batch = LOADS[0].label, LOADS[1].label
    print(f"\nmodel2vec.encode alone, batches of 32: {raw_median:.0f} sentences/s (median)")
    print(
        "poolserve's start, launch to healthy (polled every 0.2 s): "
        + ", ".join(f"{each:.1f}" for each in starts)
        + " s (bar ≤ 2)"
    )
    print("Bars (medians):")
    print(
        f"- c=64 one sentence, ÷ FastAPI + model2vec: "
        f"{medians[('poolserve', single)] / medians[(SERVERS[1], single)]:.2f}x (bar ≥ 3)"
    )
    print(
        f"- c=64 one sentence, ÷ bare ASGI + model2vec: "
        f"{medians[('poolserve', single)] / medians[(SERVERS[2], single)]:.2f}x (bar ≥ 1.0)"
    )
    print(
        f"- c=8 × 32 sentences/s ÷ model2vec.encode alone: "
        f"{medians[('poolserve', batch)] * 32 / raw_median:.2f}x (bar ≥ 0.8)"
    )
    print("poolserve ÷ its path's floor (what its design would reach with nothing but the path):")
    for load in LOADS:
        ratio = medians[("poolserve", load.label)] / medians[(FLOOR, load.label)]
        print(f"- {load.label}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
