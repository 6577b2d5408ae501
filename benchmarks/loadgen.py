"""A light HTTP/1.1 load generator: closed loop (N keep-alive connections, one request each,
`run_load`) or open loop (Poisson arrivals at a rate, whatever the answers, `run_open_load`).

Written on raw asyncio streams so that the client costs far less CPU than the server it measures
(httpx or aiohttp would take a large share of a 2-core machine). Only for loopback benchmarks.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LoadResult:
    concurrency: int
    duration: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.duration if self.duration else 0.0

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q) * 1000) if self.latencies else float("nan")


def build_request(
    host: str, port: int, path: str, body: bytes, headers: dict[str, str] | None = None
) -> bytes:
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: keep-alive\r\n\r\n"
    )
    return head.encode("ascii") + body


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    await reader.readexactly(length)
    return status


async def _connection(
    host: str,
    port: int,
    requests: Sequence[bytes],
    offset: int,
    deadline: float,
    warmup_until: float,
    result: LoadResult,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        index = offset
        while True:
            started = time.perf_counter()
            if started >= deadline:
                return
            writer.write(requests[index % len(requests)])
            index += 1
            status = await read_response(reader)
            ended = time.perf_counter()
            if started >= warmup_until:
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status == 200:
                    result.latencies.append(ended - started)
                else:
                    result.errors += 1
    finally:
        writer.close()


async def run_load(
    host: str,
    port: int,
    requests: Sequence[bytes],
    *,
    concurrency: int,
    seconds: float,
    warmup: float = 1.0,
) -> LoadResult:
    """Keep `concurrency` requests in flight for `warmup + seconds`; measure the last `seconds`."""
    result = LoadResult(concurrency=concurrency, duration=seconds)
    now = time.perf_counter()
    warmup_until, deadline = now + warmup, now + warmup + seconds
    await asyncio.gather(
        *(
            _connection(host, port, requests, i * 7, deadline, warmup_until, result)
            for i in range(concurrency)
        )
    )
    return result


async def run_open_load(
    host: str,
    port: int,
    requests: Sequence[bytes],
    *,
    rate: float,
    seconds: float,
    warmup: float = 1.0,
    seed: int = 0,
) -> LoadResult:
    """Send requests at Poisson arrivals of `rate` a second for `warmup + seconds`, whether or
    not earlier ones were answered (a search box's users do not wait for each other); measure
    those that arrive in the last `seconds`. A request goes on an idle keep-alive connection, or
    a new one when all are busy. Its latency runs from its scheduled arrival, so a client that
    fell behind does not hide the server's delay (no coordinated omission)."""
    result = LoadResult(concurrency=0, duration=seconds)
    arrivals = random.Random(seed)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened: list[asyncio.StreamWriter] = []
    in_flight: set[asyncio.Task[None]] = set()

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, port)
        opened.append(writer)
        return reader, writer

    async def send(request: bytes, due: float, measured: bool) -> None:
        reader, writer = idle.pop() if idle else await connect()
        try:
            writer.write(request)
            status = await read_response(reader)
        except (ConnectionError, asyncio.IncompleteReadError):
            # The server closed the idle connection (its keep-alive timeout): a client's pool
            # opens another and sends again, the wait counted.
            writer.close()
            reader, writer = await connect()
            writer.write(request)
            status = await read_response(reader)
        ended = time.perf_counter()
        idle.append((reader, writer))
        if measured:
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.latencies.append(ended - due)
            else:
                result.errors += 1

    start = time.perf_counter()
    warmup_until, deadline = start + warmup, start + warmup + seconds
    due, index = start, arrivals.randrange(len(requests))
    try:
        while True:
            due += arrivals.expovariate(rate)
            if due >= deadline:
                break
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            task = asyncio.create_task(
                send(requests[index % len(requests)], due, due >= warmup_until)
            )
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            index += 1
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        result.concurrency = len(opened)
        for writer in opened:
            writer.close()
    return result
