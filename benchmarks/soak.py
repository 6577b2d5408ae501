"""Soak benchmark: a fixed offered load for minutes; latency, errors and server RSS over time.

Open loop: requests are sent on a fixed schedule (`--rate` per second) whatever the server does,
over a bounded pool of keep-alive connections, and latency is measured from each request's
scheduled time, so a stalled server shows as latency instead of as a slower client. Every
`--window` seconds a row: requests, errors by status, p50/p99 latency, server RSS.

    .venv/bin/python -m benchmarks.soak --rate 300 --minutes 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import orjson
import psutil

from benchmarks.loadgen import build_request, read_response
from benchmarks.sentences import sentences
from benchmarks.server_process import running_server_process


@dataclass
class Window:
    started: float
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


async def soak(
    port: int, pid: int, *, rate: float, seconds: float, window: float, connections: int
) -> list[tuple[Window, int]]:
    texts = sentences(256)
    requests = [
        build_request("127.0.0.1", port, "/v1/embeddings", orjson.dumps({"input": text}))
        for text in texts
    ]
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    process = psutil.Process(pid)
    start = time.perf_counter()
    windows = [Window(start)]
    rows: list[tuple[Window, int]] = []
    pending: set[asyncio.Task[None]] = set()

    async def one(index: int, scheduled: float, into: Window) -> None:
        reader, writer = await pool.get()
        try:
            writer.write(requests[index % len(requests)])
            status = await read_response(reader)
        finally:
            pool.put_nowait((reader, writer))
        into.latencies.append(time.perf_counter() - scheduled)
        into.statuses[status] += 1

    total = int(rate * seconds)
    for index in range(total):
        scheduled = start + index / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule itself: open-loop pacing, not coordination
        if scheduled - windows[-1].started >= window:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="requests per second")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=15.0, help="seconds per table row")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()

    with running_server_process(["--dtype", args.dtype]) as (port, process):
        rss_idle = psutil.Process(process.pid).memory_info().rss
        rows = asyncio.run(
            soak(
                port,
                process.pid,
                rate=args.rate,
                seconds=args.minutes * 60,
                window=args.window,
                connections=args.connections,
            )
        )
    print(
        f"offered load {args.rate:.0f} req/s (one sentence each) for {args.minutes:g} min, "
        f"{args.connections} connections, dtype {args.dtype}; idle RSS {rss_idle / 2**20:.0f} MiB"
    )
    print()
    print("| t (s) | requests | non-200 | p50 ms | p99 ms | server RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    first = rows[0][0].started
    for window, rss in rows:
        lat = np.array(window.latencies) * 1000
        errors = sum(count for status, count in window.statuses.items() if status != 200)
        p50, p99 = (np.percentile(lat, 50), np.percentile(lat, 99)) if len(lat) else (0.0, 0.0)
        print(
            f"| {window.started - first:.0f} | {len(lat)} | {errors} | {p50:.1f} | {p99:.1f} | "
            f"{rss / 2**20:.0f} |"
        )


if __name__ == "__main__":
    main()
