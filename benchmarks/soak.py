"""Soak benchmark: a fixed offered load for minutes; latency, refusals and server RSS over time.

Open loop: requests are sent on a schedule whatever the server does, over a pool of keep-alive
connections, and latency is measured from each request's scheduled time, so a stalled server
shows as latency instead of as a slower client. Every `--window` seconds a row: requests sent,
answers by status, p50/p99 latency of the 200s, server RSS.

- steady (default): `--rate` requests per second, evenly spaced;
- `--burst`: the capacity is measured first (closed loop, 64 connections), then every
  `--burst-every` seconds `--load` × capacity × `--burst-every` requests arrive at the same
  moment, each on its own connection (more are opened while the server holds them all: the
  client never queues, so the latency is the server's).

    .venv/bin/python -m benchmarks.soak --rate 300 --minutes 3
    .venv/bin/python -m benchmarks.soak --burst --load 3 --minutes 10 --window 30
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
import numpy as np
import orjson
import psutil

from benchmarks.loadgen import build_request, read_response, run_load
from benchmarks.sentences import sentences
from benchmarks.server_process import running_server_process


@dataclass
class Window:
    started: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


async def soak(
    port: int,
    pid: int,
    requests: Sequence[bytes],
    schedule: Sequence[float],
    *,
    window: float,
    connections: int,
    grow: bool = False,
) -> list[tuple[Window, int]]:
    """Send request i at `schedule[i]` seconds from the start; a row per window. With `grow`, a
    request that finds every connection busy opens another (a burst arrives all at once)."""
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    process = psutil.Process(pid)
    start = time.perf_counter()
    windows = [Window(start)]
    rows: list[tuple[Window, int]] = []
    pending: set[asyncio.Task[None]] = set()

    async def one(index: int, scheduled: float, into: Window) -> None:
        if pool.empty() and grow:
            pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
        reader, writer = await pool.get()
        try:
            writer.write(requests[index % len(requests)])
            status = await read_response(reader)
        finally:
            pool.put_nowait((reader, writer))
        if status == 200:
            into.latencies.append(time.perf_counter() - scheduled)
        into.statuses[status] += 1

    for index, offset in enumerate(schedule):
        scheduled = start + offset
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule itself: open-loop pacing, not coordination
        while scheduled - windows[-1].started >= window:
            rows.append((windows[-1], process.memory_info().rss))
            windows.append(Window(windows[-1].started + window))
        task = asyncio.create_task(one(index, scheduled, windows[-1]))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    rows.append((windows[-1], process.memory_info().rss))
    while not pool.empty():
        _, writer = pool.get_nowait()
        writer.close()
    return rows


def burst_schedule(rate: float, every: float, seconds: float) -> list[float]:
    """`rate × every` requests at the same moment, every `every` seconds."""
    size = max(1, round(rate * every))
    return [burst * every for burst in range(int(seconds / every)) for _ in range(size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="steady: requests per second")
    parser.add_argument("--burst", action="store_true", help="bursts at a multiple of capacity")
    parser.add_argument("--load", type=float, default=3.0, help="burst: offered load ÷ capacity")
    parser.add_argument("--burst-every", type=float, default=1.0, help="burst: seconds apart")
    parser.add_argument("--inputs", type=int, default=1, help="sentences per request")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=15.0, help="seconds per table row")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--server-args", default="", help="more `poolserve serve` flags")
    args = parser.parse_args()

    texts = sentences(256)
    bodies = [
        orjson.dumps({"input": [texts[(i + k) % len(texts)] for k in range(args.inputs)]})
        for i in range(len(texts))
    ]
    server_args = ["--dtype", args.dtype, *args.server_args.split()]
    with running_server_process(server_args) as (port, process):
        requests = [build_request("127.0.0.1", port, "/v1/embeddings", body) for body in bodies]
        seconds = args.minutes * 60
        if args.burst:
            measured = asyncio.run(
                run_load("127.0.0.1", port, requests, concurrency=64, seconds=10, warmup=2)
            )
            capacity = measured.throughput
            rate = args.load * capacity
            schedule = burst_schedule(rate, args.burst_every, seconds)
            connections = max(args.connections, round(rate * args.burst_every))
            offered = (
                f"bursts of {round(rate * args.burst_every)} requests every "
                f"{args.burst_every:g} s = {args.load:g} x the measured capacity "
                f"({capacity:.0f} req/s, closed loop at c=64)"
            )
        else:
            schedule = [index / args.rate for index in range(int(args.rate * seconds))]
            connections = args.connections
            offered = f"{args.rate:.0f} req/s, evenly spaced"
        rss_idle = psutil.Process(process.pid).memory_info().rss
        rows = asyncio.run(
            soak(
                port,
                process.pid,
                requests,
                schedule,
                window=args.window,
                connections=connections,
                grow=args.burst,
            )
        )
        stats = httpx.get(f"http://127.0.0.1:{port}/stats").json()
    print(
        f"offered load: {offered}; {args.inputs} sentence(s) per request for {args.minutes:g} "
        f"min, {connections} connections, dtype {args.dtype} {args.server_args}; "
        f"idle RSS {rss_idle / 2**20:.0f} MiB"
    )
    print(
        f"admission: peak admitted {stats['peak_admitted_tokens']} of "
        f"{stats['max_queued_tokens']} tokens, peak tokens in work {stats['peak_tokens_in_work']}"
    )
    print()
    print("| t (s) | sent | 200 | 429 | other | p50 ms (200) | p99 ms (200) | server RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    first = rows[0][0].started
    for window, rss in rows:
        lat = np.array(window.latencies) * 1000
        sent = sum(window.statuses.values())
        other = sent - window.statuses[200] - window.statuses[429]
        p50, p99 = (np.percentile(lat, 50), np.percentile(lat, 99)) if len(lat) else (0.0, 0.0)
        print(
            f"| {window.started - first:.0f} | {sent} | {window.statuses[200]} | "
            f"{window.statuses[429]} | {other} | {p50:.1f} | {p99:.1f} | {rss / 2**20:.0f} |"
        )


if __name__ == "__main__":
    main()
