"""gRPC beside HTTP on one server, and what tracing costs.

One-sentence requests (real prose, `benchmarks.corpus`) at c=1 and c=64, over HTTP/1.1
(`POST /embed`, text-embeddings-inference's shape, on keep-alive connections from the raw
asyncio load generator) and over gRPC (`tei.v1.Embed/Embed` on one HTTP/2 channel carrying every
call, from grpc.aio with the messages serialized beforehand) against the same server in the same
run. Then the same loads against a second server that traces every request to an OTLP receiver
in this process (`--trace-sample-ratio 1`; the receiver accepts and discards), a third that
traces as `--otlp-endpoint` does by default (one request in ten), and a fourth that traces every
request to a collector that is down (its spans dropped and counted).

Each round runs every phase in turn (the machine drifts); the table holds each figure's median
over `--rounds`. The client's CPU share is reported: on a 2-core machine the client competes
with the server, and grpc.aio costs its caller more per call than the raw HTTP generator.

    python -m benchmarks.grpc_front_end --seconds 8 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import orjson

from benchmarks import corpus
from benchmarks.loadgen import LoadResult, build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.server_process import free_port, running_process
from poolserve.tei_grpc.stubs import tei_pb2 as pb

HOST = "127.0.0.1"
EMBED = "/tei.v1.Embed/Embed"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


async def grpc_load(
    address: str, messages: list[bytes], *, concurrency: int, seconds: float, warmup: float = 1.0
) -> LoadResult:
    """`concurrency` calls in flight on one channel for `warmup + seconds`; the last `seconds`
    measured."""
    result = LoadResult(concurrency=concurrency, duration=seconds)
    now = time.perf_counter()
    warmup_until, deadline = now + warmup, now + warmup + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        embed = channel.unary_unary(EMBED)

        async def caller(offset: int) -> None:
            index = offset
            while (started := time.perf_counter()) < deadline:
                try:
                    await embed(messages[index % len(messages)])
                    ok = True
                except grpc.aio.AioRpcError:
                    ok = False
                index += 1
                if started >= warmup_until:
                    if ok:
                        result.latencies.append(time.perf_counter() - started)
                    else:
                        result.errors += 1

        await asyncio.gather(*(caller(i * 7) for i in range(concurrency)))
    return result


@dataclass
class Figures:
    rate: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    errors: int = 0

    def add(self, result: LoadResult, client_cpu: float) -> None:
        self.rate.append(result.throughput)
        self.p50.append(result.percentile_ms(50))
        self.p99.append(result.percentile_ms(99))
        self.client_cpu.append(client_cpu)
        self.errors += result.errors

    def row(self, name: str, base: Figures | None) -> str:
        rate = statistics.median(self.rate)
        ratio = f"{rate / statistics.median(base.rate):.2f}×" if base is not None else ""
        return (
            f"| {name} | {rate:,.0f} | {ratio} | {statistics.median(self.p50):.1f} | "
            f"{statistics.median(self.p99):.1f} | {statistics.median(self.client_cpu):.0%} | "
            f"{self.errors} |"
        )


@contextlib.asynccontextmanager
async def discarding_receiver() -> AsyncIterator[int]:
    """An OTLP/gRPC trace endpoint that accepts every export and keeps nothing, in this
    process's event loop."""
    server = grpc.aio.server()

    async def export(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""  # an empty ExportTraceServiceResponse

    service, method = EXPORT.strip("/").split("/")
    handler = grpc.unary_unary_rpc_method_handler(export)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(service, {method: handler})]
    )
    port = server.add_insecure_port(f"{HOST}:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


async def measure(
    target: tuple[int, int], kind: str, concurrency: int, args: argparse.Namespace, texts: list[str]
) -> tuple[LoadResult, float]:
    """One phase: the load, and the client's CPU share of one core over it."""
    http_port, grpc_port = target
    cpu, wall = time.process_time(), time.perf_counter()
    if kind == "http":
        bodies = [
            build_request(HOST, http_port, "/embed", orjson.dumps({"inputs": text}))
            for text in texts
        ]
        result = await run_load(
            HOST, http_port, bodies, concurrency=concurrency, seconds=args.seconds
        )
    else:
        messages = [pb.EmbedRequest(inputs=text).SerializeToString() for text in texts]
        result = await grpc_load(
            f"{HOST}:{grpc_port}", messages, concurrency=concurrency, seconds=args.seconds
        )
    return result, (time.process_time() - cpu) / (time.perf_counter() - wall)


PHASES = [
    ("untraced", "http", 1),
    ("untraced", "grpc", 1),
    ("untraced", "http", 64),
    ("untraced", "grpc", 64),
    ("traced", "http", 1),
    ("traced", "http", 64),
    ("traced", "grpc", 64),
    ("traced 1 in 10", "http", 64),
    ("traced to a dead collector", "http", 64),
]


async def run(args: argparse.Namespace, servers: dict[str, tuple[int, int]]) -> dict[str, Figures]:
    texts = corpus.sentences(2000)
    figures: dict[str, Figures] = {}
    for _ in range(args.rounds):
        for server, kind, concurrency in PHASES:
            result, client_cpu = await measure(servers[server], kind, concurrency, args, texts)
            figures.setdefault(f"{server}, {kind}, c={concurrency}", Figures()).add(
                result, client_cpu
            )
    return figures


def report(figures: dict[str, Figures], flags: list[str]) -> None:
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; server flags: {' '.join(flags)}")
    print(f"corpus: {corpus.describe()}; one sentence per request")
    print()
    print(
        "| server, protocol, clients | requests/s | vs HTTP (or vs untraced) | p50 ms | p99 ms "
        "| client CPU | errors |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, each in figures.items():
        server, kind, clients = name.split(", ")
        if server == "untraced":
            base = figures.get(f"untraced, http, {clients}") if kind == "grpc" else None
        else:
            base = figures.get(f"untraced, {kind}, {clients}")
        print(each.row(name, base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-args", default="", help="more flags for every server")
    args = parser.parse_args()
    flags = args.server_args.split()

    async def serve_and_measure() -> dict[str, Figures]:
        async with discarding_receiver() as otlp_port:
            with contextlib.ExitStack() as stack:
                servers = start_servers(stack, otlp_port, flags)
                return await run(args, servers)

    report(asyncio.run(serve_and_measure()), flags)


def start_servers(
    stack: contextlib.ExitStack, otlp_port: int, flags: list[str]
) -> dict[str, tuple[int, int]]:
    """The servers (HTTP port, gRPC port), by name: untraced, traced to the receiver (every
    request, or one in ten), traced to a port nothing listens on."""
    traced = ["--otlp-endpoint", f"http://{HOST}:{otlp_port}"]
    every = ["--trace-sample-ratio", "1"]
    dead = ["--otlp-endpoint", f"http://{HOST}:{free_port()}", *every]
    servers = {}
    for name, more in (
        ("untraced", []),
        ("traced", [*traced, *every]),
        ("traced 1 in 10", traced),
        ("traced to a dead collector", dead),
    ):
        port, grpc_port = free_port(), free_port()
        command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port), *flags]
        command += [*more, "--grpc-port", str(grpc_port)]
        stack.enter_context(running_process(command, port))
        servers[name] = (port, grpc_port)
    return servers


if __name__ == "__main__":
    main()
