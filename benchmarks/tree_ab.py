"""Served throughput of poolserve from two (or more) source trees in turn: before/after figures.

Each round starts `poolserve serve MODEL` from each tree in turn (`PYTHONPATH` and the working
directory set to it: a `git worktree` of the commit before, and this one), warms it up, and runs
one closed-loop load of real prose (benchmarks/corpus.py) on keep-alive connections, with the
server's CPU a request from /proc. Taking the trees in turn within each round keeps a machine
whose speed drifts (a shared VM's does, by a fifth in minutes) from favouring either. A tree may
carry its own flags after a colon (`/work/main:--runners 1`). Printed: every run, then the
medians.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python -m benchmarks.tree_ab /tmp/before . --model DIR --rounds 4
    .venv/bin/python -m benchmarks.tree_ab /tmp/before . --model DIR --concurrency 8 --sentences 32
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import orjson

from benchmarks.corpus import sentences
from benchmarks.loadgen import build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.request_cost import tree_cpu_seconds
from benchmarks.server_process import free_port, running_process


def served(
    tree: str, flags: list[str], model: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Requests/s and the server's CPU µs a request of one run of `tree`'s server."""
    port = free_port()
    command = [sys.executable, "-m", "poolserve", "serve", model, "--port", str(port), *flags]
    texts = sentences(4000)
    per = args.sentences
    bodies = [texts[i] if per == 1 else texts[i : i + per] for i in range(0, len(texts), per)]
    with running_process(command, port, cwd=tree, env={"PYTHONPATH": tree}) as process:
        requests = [
            build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": body}))
            for body in bodies
        ]
        warm = requests[: args.concurrency]
        asyncio.run(run_load("127.0.0.1", port, warm, concurrency=args.concurrency, seconds=1))
        before = tree_cpu_seconds(process.pid)
        load = run_load(
            "127.0.0.1", port, requests, concurrency=args.concurrency, seconds=args.seconds
        )
        result = asyncio.run(load)
        cpu = tree_cpu_seconds(process.pid) - before
    if result.errors:
        raise RuntimeError(f"{tree}: {result.errors} errors ({result.statuses})")
    return result.throughput, cpu / max(1, len(result.latencies)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="source trees, each TREE or TREE:FLAGS")
    parser.add_argument("--model", required=True, help="the model served (a folder)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=1, help="sentences a request")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {tree: [] for tree in args.trees}
    for round_ in range(args.rounds):
        for each in args.trees:
            tree, _, flags = each.partition(":")
            rate, cpu = served(str(Path(tree).resolve()), flags.split(), args.model, args)
            runs[each].append((rate, cpu))
            print(f"round {round_ + 1}  {each}: {rate:.0f} requests/s, {cpu:.0f} µs CPU each")
    print(
        f"\n{cpu_model()}; c={args.concurrency} × {args.sentences} sentence(s); "
        f"{args.rounds} rounds of {args.seconds:g} s; medians"
    )
    print("\n| tree | requests/s | server CPU µs a request |\n|---|---:|---:|")
    for each, figures in runs.items():
        rate = statistics.median(rate for rate, _ in figures)
        cpu = statistics.median(cpu for _, cpu in figures)
        print(f"| {each} | {rate:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
