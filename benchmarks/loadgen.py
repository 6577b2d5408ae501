"""A light closed-loop HTTP/1.1 load generator: N keep-alive connections, one request each.

Written on raw asyncio streams so that the client costs far less CPU than the server it measures
(httpx or aiohttp would take a large share of a 2-core machine). Only for loopback benchmarks.
"""

from __future__ import annotations

import asyncio
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
