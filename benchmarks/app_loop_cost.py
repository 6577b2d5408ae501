"""The app's own event-loop CPU per request, without sockets or uvicorn.

Builds the app `poolserve serve` would serve (the same flags, `--server-args`; the bundled model
by default), runs its lifespan on uvloop in this process, and calls it as an ASGI application
from `--concurrency` tasks, each sending one-sentence `POST /v1/embeddings` requests of real prose
(benchmarks/corpus.py) one after another, the model running on its runner threads as served.
Printed per round: requests, and the loop thread's CPU per request (`time.thread_time` on the
loop's thread: its own work only, whatever the runners and the pool do on the other cores).
What remains is poolserve's Python on the loop (layers, route, body, serving step, answer); what
uvicorn and the kernel's sockets add is `benchmarks.thread_cpu`'s loop figure minus this.

Quieter than a served load: for A/B of the loop's own code (`farm-bench`-style turns of this
tree and a worktree), not for throughput claims. Run each tree from its own directory (`cd
TREE && PYTHONPATH=TREE python -m benchmarks.app_loop_cost ...`): `python -m` puts the working
directory first on `sys.path`, so `PYTHONPATH` alone does not pick the tree whose code runs.

    .venv/bin/python -m benchmarks.app_loop_cost --rounds 3 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import uvloop

from benchmarks.corpus import sentences
from benchmarks.peers import cpu_model


def one_request(app: Callable[..., Awaitable[None]], body: bytes) -> Awaitable[None]:
    """The app serving one POST /v1/embeddings with `body`; raises unless it answers 200."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/embeddings",
        "raw_path": b"/v1/embeddings",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "state": {},
    }
    delivered = asyncio.Event()  # the body went; then the client stays (no disconnect)
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        if not delivered.is_set():
            delivered.set()
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never: the client never goes
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def serve() -> None:
        await app(scope, receive, send)
        if statuses != [200]:
            raise RuntimeError(f"the app answered {statuses}")

    return serve()


async def measure(app: Any, args: argparse.Namespace) -> list[float]:
    from poolserve.server.edge import serving_entry

    entry = serving_entry(app)  # what `poolserve serve` hands uvicorn
    bodies = [orjson.dumps({"input": text}) for text in sentences()]
    served = 0

    async def client(offset: int, until: float) -> None:
        nonlocal served
        index = offset
        while time.perf_counter() < until:
            await one_request(entry, bodies[index % len(bodies)])
            index += 1
            served += 1

    async def load(seconds: float) -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(*(client(i * 7, until) for i in range(args.concurrency)))

    figures = []
    async with app.router.lifespan_context(app):
        from poolserve.server.gc_freeze import freeze_loaded_objects

        freeze_loaded_objects()  # as `poolserve serve` does before it listens
        await load(args.warmup)
        for round_ in range(args.rounds):
            served = 0
            started = time.thread_time()
            await load(args.seconds)
            figures.append((time.thread_time() - started) / served * 1e6)
            print(f"round {round_ + 1}: {served} requests, loop CPU {figures[-1]:.1f} µs each")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-args", default="", help="flags for `poolserve serve`")
    args = parser.parse_args()

    from poolserve.commands.serve_command import _loaded_app, served_models
    from poolserve.config.grammar import configs_from_args, parse_args

    serve_args = parse_args(["serve", *args.server_args.split()])
    model_config, engine_config, server_config = configs_from_args(serve_args)
    served = served_models(serve_args, model_config, engine_config)
    app = _loaded_app(served, server_config, engine_config.cpu_workers, None)
    try:
        figures = uvloop.run(measure(app, args))
    finally:
        app.state.serving.models.close()
    print(
        f"{cpu_model()}; c={args.concurrency}, one sentence a request; flags: "
        f"{args.server_args or '(defaults)'}; loop CPU a request, median of {args.rounds}: "
        f"{statistics.median(figures):.1f} µs"
    )


if __name__ == "__main__":
    main()
