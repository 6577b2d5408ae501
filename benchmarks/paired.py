"""A/B of two source trees, both servers up at once and measured in turn (rounds alternating which
goes first), so that the machine's drift, which moves separate runs by more than most changes
do, falls on both alike.

By paired latencies (the default): one request at a time to each in turn; prints the p50 of the
wall time and of the server's `x-inference-time` for each tree, for one sentence or
(`--passages`) eight passages of 100-256 tokens per request.

Under the peer benchmark's loads (`--loads`, benchmarks/peers.py: c=64 one sentence, c=8 of 32
sentences, c=8 of 8 passages, c=1, rerank of 100 documents, all real prose): each round runs
every load against each tree in turn; prints each tree's median and the median of the rounds'
A ÷ B ratios (a server idle while the other is measured costs no CPU: its runners wait).

    .venv/bin/python -m benchmarks.paired /path/to/tree-a /path/to/tree-b --rounds 12
    .venv/bin/python -m benchmarks.paired /path/to/tree-a /path/to/tree-b --loads --rounds 3
    .venv/bin/python -m benchmarks.paired . . --loads --server-args "" --b-args "--quantize int8"
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from benchmarks import corpus
from benchmarks.loadgen import LoadResult
from benchmarks.server_process import free_port, running_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", type=Path, nargs=2, help="two checkouts of poolserve (A, B)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--per-round", type=int, default=60, help="requests to each per round")
    parser.add_argument("--passages", action="store_true", help="8 passages per request")
    parser.add_argument("--server-args", default="--dtype bfloat16")
    parser.add_argument(
        "--b-args", default="", help="flags for B only, after --server-args (A/B of a setting)"
    )
    parser.add_argument("--loads", action="store_true", help="throughput under the peer loads")
    parser.add_argument("--seconds", type=float, default=10.0, help="each load, with --loads")
    args = parser.parse_args()
    if args.loads:
        compare_loads(args.trees, args.rounds, args.seconds, args.server_args, args.b_args)
        return
    texts = corpus.passages(200) if args.passages else corpus.sentences(2000)

    def body(i: int) -> dict[str, object]:
        if args.passages:
            return {"input": [texts[(i + j) % len(texts)] for j in range(8)]}
        return {"input": texts[i * 7 % len(texts)]}

    names = ("A", "B")
    walls: dict[str, list[float]] = {name: [] for name in names}
    inference: dict[str, list[float]] = {name: [] for name in names}
    ports = [free_port(), free_port()]
    with (
        _server(args.trees[0], ports[0], args.server_args),
        _server(args.trees[1], ports[1], f"{args.server_args} {args.b_args}"),
        httpx.Client(timeout=120) as client,
    ):
        for round_index in range(args.rounds + 1):  # the first round warms up, uncounted
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                port = ports[names.index(name)]
                for i in range(args.per_round):
                    started = time.perf_counter()
                    response = client.post(
                        f"http://127.0.0.1:{port}/v1/embeddings",
                        json=body(round_index * args.per_round + i),
                    )
                    wall = (time.perf_counter() - started) * 1000
                    response.raise_for_status()
                    if round_index:
                        walls[name].append(wall)
                        inference[name].append(float(response.headers["x-inference-time"]))
    what = "eight passages" if args.passages else "one sentence"
    print(f"{what} per request, {args.rounds} rounds of {args.per_round} each, in turn")
    print("| tree | wall p50 ms | inference p50 ms |")
    print("|---|---:|---:|")
    for name, tree in zip(names, args.trees, strict=True):
        wall_p50, inference_p50 = statistics.median(walls[name]), statistics.median(inference[name])
        print(f"| {name} ({tree}) | {wall_p50:.2f} | {inference_p50:.3f} |")
    ratio = statistics.median(walls["A"]) / statistics.median(walls["B"])
    print(f"A ÷ B wall p50: {ratio:.3f}")


# What each peer load reports (benchmarks/peers.py's keys): throughput, or c=1's p50 latency.
LOADS = {
    "c64": "c=64, 1 sentence: req/s",
    "c8x32": "c=8, 32 sentences: req/s",
    "c8x8p": "c=8, 8 passages: req/s",
    "c1": "c=1, 1 sentence: p50 ms",
    "rerank": "rerank of 100, c=8: req/s",
}


def compare_loads(
    trees: list[Path], rounds: int, seconds: float, server_args: str, b_args: str = ""
) -> None:
    from benchmarks.peers import NAME, measure

    names = ("A", "B")
    values: dict[str, dict[str, list[float]]] = {n: {k: [] for k in LOADS} for n in names}
    ports = [free_port(), free_port()]
    flags = f"{server_args} --served-model-name {NAME}"
    with _server(trees[0], ports[0], flags), _server(trees[1], ports[1], f"{flags} {b_args}"):
        for round_index in range(rounds):
            for name in names if round_index % 2 == 0 else names[::-1]:
                results = measure(ports[names.index(name)], seconds, with_stats=False)
                for key in LOADS:
                    result = results[key]
                    assert isinstance(result, LoadResult)
                    value = result.percentile_ms(50) if key == "c1" else result.throughput
                    values[name][key].append(value)
    print(f"{rounds} rounds of every load ({seconds:g} s each), A and B in turn")
    print("| load | A | B | A ÷ B (median of rounds) |")
    print("|---|---:|---:|---:|")
    for key, label in LOADS.items():
        a, b = values["A"][key], values["B"][key]
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        print(
            f"| {label} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | {ratio:.3f} |"
        )


def _server(
    tree: Path, port: int, server_args: str
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """`poolserve serve` of `tree`'s code (run from the tree, so that it imports its own)."""
    command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port)]
    root = str(tree.resolve())
    return running_process(
        [*command, *server_args.split()], port, env={"PYTHONPATH": root}, cwd=root
    )


if __name__ == "__main__":
    main()
