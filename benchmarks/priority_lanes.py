"""Two lanes on one server: interactive queries beside a bulk indexer.

Two kinds of interactive client, each sending one real sentence per request at the default
priority: a search box's users (open loop: Poisson arrivals at `--open-rate` a second, whether or
not earlier queries were answered), and `--interactive` clients that each send as soon as
answered (closed loop). The bulk client sends `--bulk-size`-sentence requests (base64 vectors,
as the OpenAI client asks for them) on `--bulk` connections. Phases, one server, one after the
other:

- each interactive client alone (its idle p50/p99);
- bulk alone (its throughput when it has the server to itself), at `--bulk-priority` and at the
  default priority;
- each interactive client beside the bulk client at `--bulk-priority` (lanes on);
- the closed-loop clients beside the bulk client at the default priority (lanes off: one queue,
  for contrast).

Each round runs the phases in turn (the machine's speed drifts); the table holds each figure's
median over `--rounds` rounds: the interactive p99 against its own idle p99 (issue 47's bounds:
2× for the open-loop queries, 3× for the closed-loop clients, no 429), and the bulk client's
sentences/s against its own alone at its priority (at least 85 %).

    python -m benchmarks.priority_lanes --seconds 20 --rounds 3 --server-args "--dtype float32"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
from dataclasses import dataclass

import orjson

from benchmarks import corpus
from benchmarks.loadgen import LoadResult, build_request, run_load, run_open_load
from benchmarks.server_process import running_server

HOST = "127.0.0.1"


def bulk_bodies(sentences: list[str], size: int, priority: int | None) -> list[bytes]:
    """Requests of `size` consecutive sentences, each window starting 37 sentences later."""
    bodies = []
    for start in range(0, len(sentences), 37):
        window = [sentences[(start + i) % len(sentences)] for i in range(size)]
        body: dict[str, object] = {"input": window, "encoding_format": "base64"}
        if priority is not None:
            body["priority"] = priority
        bodies.append(orjson.dumps(body))
    return bodies


async def served_items(port: int) -> int:
    """The inputs the server has run (`/stats` items), over a raw connection."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(
        f"GET /stats HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n".encode()
    )
    response = await reader.read()
    writer.close()
    items: int = orjson.loads(response.split(b"\r\n\r\n", 1)[1])["items"]
    return items


@dataclass(frozen=True)
class Interactive:
    """An interactive client: its requests, and either a Poisson rate (open loop) or its
    connections (closed loop)."""

    requests: list[bytes]
    rate: float | None = None
    connections: int = 0

    async def run(self, port: int, seconds: float) -> LoadResult:
        if self.rate is not None:
            return await run_open_load(HOST, port, self.requests, rate=self.rate, seconds=seconds)
        return await run_load(
            HOST, port, self.requests, concurrency=self.connections, seconds=seconds
        )


async def measured(
    port: int,
    interactive: Interactive | None,
    bulk: list[bytes] | None,
    args: argparse.Namespace,
) -> tuple[LoadResult | None, LoadResult | None, float | None]:
    """Run the clients given at once; the bulk client's rate is the inputs the server ran in the
    measured window, less the interactive requests answered in it (a 256-sentence request takes
    seconds: counting only whole ones would step by 256 ÷ the window)."""
    warmup = 1.0

    async def sample() -> tuple[int, int]:
        await asyncio.sleep(warmup)
        first = await served_items(port)
        await asyncio.sleep(args.seconds)
        return first, await served_items(port)

    async def asking() -> LoadResult | None:
        return None if interactive is None else await interactive.run(port, args.seconds)

    async def indexing() -> LoadResult | None:
        if bulk is None:
            return None
        return await run_load(HOST, port, bulk, concurrency=args.bulk, seconds=args.seconds)

    interactive_result, bulk_result, (first, last) = await asyncio.gather(
        asking(), indexing(), sample()
    )
    if bulk_result is None:
        return interactive_result, None, None
    answered = len(interactive_result.latencies) if interactive_result is not None else 0
    return interactive_result, bulk_result, (last - first - answered) / args.seconds


@dataclass
class Phase:
    """One phase's figures over the rounds."""

    name: str
    # The phase whose p99 this one's is compared with (its interactive client alone).
    idle: Phase | None
    p50: list[float]
    p99: list[float]
    interactive_429: list[int]
    bulk_rate: list[float]
    bulk_429: list[int]

    def add(
        self, interactive: LoadResult | None, bulk: LoadResult | None, bulk_rate: float | None
    ) -> None:
        if interactive is not None:
            self.p50.append(interactive.percentile_ms(50))
            self.p99.append(interactive.percentile_ms(99))
            self.interactive_429.append(interactive.statuses.get(429, 0))
        if bulk is not None and bulk_rate is not None:
            self.bulk_rate.append(bulk_rate)
            self.bulk_429.append(bulk.statuses.get(429, 0))

    def row(self, bulk_alone: float) -> str:
        cells = [self.name]
        if self.p99:
            p99 = statistics.median(self.p99)
            idle_p99 = statistics.median((self.idle or self).p99)
            cells += [
                f"{statistics.median(self.p50):.1f}",
                f"{p99:.1f}",
                f"{p99 / idle_p99:.2f}×",
                str(sum(self.interactive_429)),
            ]
        else:
            cells += ["", "", "", ""]
        if self.bulk_rate:
            rate = statistics.median(self.bulk_rate)
            cells += [f"{rate:.0f}", f"{rate / bulk_alone:.0%}", str(sum(self.bulk_429))]
        else:
            cells += ["", "", ""]
        return "| " + " | ".join(cells) + " |"


def phase(name: str, idle: Phase | None = None) -> Phase:
    return Phase(name, idle, [], [], [], [], [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--seconds", type=float, default=10.0, help="a phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--open-rate", type=float, default=20.0, help="open-loop queries/s")
    parser.add_argument("--interactive", type=int, default=4, help="closed-loop connections")
    parser.add_argument("--bulk", type=int, default=8, help="bulk connections")
    parser.add_argument("--bulk-size", type=int, default=256, help="sentences a bulk request")
    parser.add_argument("--bulk-priority", type=int, default=10)
    parser.add_argument("--server-args", default="", help="extra flags for `poolserve serve`")
    args = parser.parse_args()

    sentences = corpus.sentences()
    server_args = args.server_args.split()
    if args.model:
        server_args.insert(0, args.model)
    with running_server(server_args) as port:

        def requests(bodies: list[bytes]) -> list[bytes]:
            return [build_request(HOST, port, "/v1/embeddings", body) for body in bodies]

        sentences_one = requests([orjson.dumps({"input": text}) for text in sentences])
        queries = Interactive(sentences_one, rate=args.open_rate)
        clients = Interactive(sentences_one, connections=args.interactive)
        bulk_low = requests(bulk_bodies(sentences, args.bulk_size, args.bulk_priority))
        bulk_plain = requests(bulk_bodies(sentences, args.bulk_size, None))
        queries_alone = phase(f"queries alone ({args.open_rate:g}/s, open loop)")
        clients_alone = phase(f"{args.interactive} clients alone (closed loop)")
        plan: list[tuple[Phase, Interactive | None, list[bytes] | None]] = [
            (queries_alone, queries, None),
            (clients_alone, clients, None),
            (phase(f"bulk alone, priority {args.bulk_priority}"), None, bulk_low),
            (phase("bulk alone, default priority"), None, bulk_plain),
            (phase("queries + bulk, lanes on", queries_alone), queries, bulk_low),
            (phase("clients + bulk, lanes on", clients_alone), clients, bulk_low),
            (phase("clients + bulk, lanes off", clients_alone), clients, bulk_plain),
        ]
        for _ in range(args.rounds):
            for each, asked, bulk in plan:
                each.add(*asyncio.run(measured(port, asked, bulk, args)))

    phases = [each for each, _, _ in plan]
    bulk_rate = statistics.median(phases[2].bulk_rate)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; server flags: "
        f"{' '.join(server_args) or '(defaults)'}; {args.seconds:g} s a phase, "
        f"medians of {args.rounds} rounds"
    )
    print(f"corpus: {corpus.describe()}")
    print(
        f"interactive, one sentence a request at the default priority: queries at "
        f"{args.open_rate:g}/s (Poisson), or {args.interactive} closed-loop clients; "
        f"bulk: {args.bulk} connections of {args.bulk_size} sentences (base64), "
        f"priority {args.bulk_priority} with lanes on, default with lanes off"
    )
    print()
    print(
        "| phase | interactive p50 ms | interactive p99 ms | p99 ÷ idle | interactive 429 "
        "| bulk sentences/s | ÷ bulk alone | bulk 429 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for each in phases:
        print(each.row(bulk_rate))


if __name__ == "__main__":
    main()
