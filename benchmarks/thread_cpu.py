"""Where the server's CPU goes: CPU seconds per request of each server thread under load.

Runs `poolserve serve` under a closed-loop load of one-sentence requests (`--sentences N`: of N
each) and reads each thread's CPU time from /proc/PID/task/*/stat (Linux) before and after; the
load generator's own CPU comes from getrusage. Thread names are what the kernel reports (Python
threads are all "python"; the event loop is the lowest thread id, torch's OpenMP workers the
newest), and how often each slept (its voluntary context switches: a wait for work, a lock or
the GIL). `--floor DIR` measures the path's floor of benchmarks/static_peers.py instead. Real
prose by default (benchmarks/corpus.py); `--corpus templated` for the sentences of
earlier results.

    .venv/bin/python -m benchmarks.thread_cpu --concurrency 64 --seconds 5
    .venv/bin/python -m benchmarks.thread_cpu --floor DIR   (the path's floor on a static model)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from benchmarks.load import CORPORA, texts_of
from benchmarks.loadgen import build_request, run_load
from benchmarks.server_process import free_port, running_process, running_server_process


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    ticks = os.sysconf("SC_CLK_TCK")
    result = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        result[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return result


def voluntary_switches(pid: int) -> dict[int, int]:
    """Each thread's voluntary context switches so far: the times it slept (a wait for work, a
    lock or the GIL)."""
    result = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                result[int(task.name)] = int(line.split()[1])
    return result


@contextlib.contextmanager
def floor_process(model: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The path's floor (benchmarks/static_peers.py `--app floor`) serving `model`."""
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.static_peers", "--app", "floor"]
    with running_process([*command, "--model", model, "--port", str(port)], port) as process:
        yield port, process


def engine_stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as response:
        stats: dict[str, Any] = orjson.loads(response.read())
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=1, help="sentences a request")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--server-args", default="", help="extra flags for `poolserve serve`")
    parser.add_argument("--corpus", choices=CORPORA, default="real")
    parser.add_argument(
        "--floor",
        metavar="DIR",
        help="measure the path's floor (benchmarks/static_peers.py) serving this static model "
        "instead of poolserve",
    )
    args = parser.parse_args()

    server_args = ["--dtype", args.dtype, *args.server_args.split()]
    server = floor_process(args.floor) if args.floor else running_server_process(server_args)
    with server as (port, process):
        texts = texts_of(args.corpus)
        inputs: list[Any] = texts
        if args.sentences > 1:
            inputs = [texts[i : i + args.sentences] for i in range(0, len(texts), args.sentences)]
        requests = [
            build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": each}))
            for each in inputs
        ]
        warm = run_load("127.0.0.1", port, requests, concurrency=args.concurrency, seconds=1)
        asyncio.run(warm)
        stats_before = {} if args.floor else engine_stats(port)
        before, own_before = thread_cpu_seconds(process.pid), resource.getrusage(0)
        slept_before = voluntary_switches(process.pid)
        load = run_load(
            "127.0.0.1",
            port,
            requests,
            concurrency=args.concurrency,
            seconds=args.seconds,
            warmup=0,
        )
        result = asyncio.run(load)
        after, own_after = thread_cpu_seconds(process.pid), resource.getrusage(0)
        slept = voluntary_switches(process.pid)
        stats_after = {} if args.floor else engine_stats(port)

    served = len(result.latencies)
    sentences = result.throughput * args.sentences
    print(
        f"c={args.concurrency} × {args.sentences} sentences: {result.throughput:.0f} req/s", end=""
    )
    print(f" ({sentences:.0f} sentences/s) over {args.seconds:g} s")
    print()
    print("| thread id | name | CPU s | µs per request | sleeps per request |")
    print("|---:|---|---:|---:|---:|")
    for tid, (name, seconds) in sorted(after.items()):
        spent = seconds - before.get(tid, (name, 0.0))[1]
        sleeps = slept.get(tid, 0) - slept_before.get(tid, 0)
        if spent > 0.01:
            row = f"| {tid} | {name} | {spent:.2f} | {spent / served * 1e6:.0f} "
            print(row + f"| {sleeps / served:.2f} |")
    own = (own_after.ru_utime + own_after.ru_stime) - (own_before.ru_utime + own_before.ru_stime)
    print(f"| - | load generator | {own:.2f} | {own / served * 1e6:.0f} | |")
    print()
    if args.floor:
        return
    batches = stats_after["batches"] - stats_before["batches"]
    items = stats_after["items"] - stats_before["items"]
    padded = stats_after["padded_tokens"] - stats_before["padded_tokens"]
    tokens = stats_after["tokens"] - stats_before["tokens"]
    print(
        f"batches: {batches}, mean size {items / max(batches, 1):.1f}, padding efficiency "
        f"{tokens / max(padded, 1):.2f}"
    )
    for runner, old in zip(stats_after["runners"], stats_before["runners"], strict=True):
        busy = runner["busy_seconds"] - old["busy_seconds"]
        print(
            f"runner {runner['index']}: in forward passes {busy / args.seconds:.0%} of the time, "
            f"{runner['batches'] - old['batches']} batches"
        )


if __name__ == "__main__":
    main()
