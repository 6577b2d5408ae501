"""The app's own event-loop CPU per request, without sockets or uvicorn.

Builds the app `poolserve serve` would serve (the same flags, `--server-args`; the bundled model
by default), runs its lifespan on uvloop in this process, and calls it as an ASGI application
from `--concurrency` tasks, each sending one-sentence `POST /v1/embeddings` requests of real prose
(benchmarks/corpus.py; `--sentences N` for N a request) one after another, the model running on
its runner threads as served.
Printed per round: requests, and the loop thread's CPU per request (`time.thread_time` on the
loop's thread: its own work only, whatever the runners and the pool do on the other cores).
What remains is poolserve's Python on the loop (layers, route, body, serving step, answer); what
uvicorn and the kernel's sockets add is `benchmarks.thread_cpu`'s loop figure minus this.

Quieter than a served load: for A/B of the loop's own code (`farm-bench`-style turns of this
tree and a worktree), not for throughput claims. Run each tree from its own directory (`cd
TREE && PYTHONPATH=TREE python -m benchmarks.app_loop_cost ...`): `python -m` puts the working
directory first on `sys.path`, so `PYTHONPATH` alone does not pick the tree whose code runs.

    .venv/bin/python -m benchmarks.app_loop_cost --rounds 3 --seconds 5
    .venv/bin/python -m benchmarks.app_loop_cost --server-args /tmp/potion --profile

`--profile` adds one round under cProfile (on the loop's thread only) and prints the Python
calls a request and where the loop's profiled time goes, by module and by function. Use it,
not py-spy, for the loop: under uvloop py-spy puts most of the loop's samples in
`asyncio.Runner.run` itself (73 % at 8 × 32 on a static model, where `perf` finds 62 % of
the same thread in the interpreter), so the coroutines' own frames go missing. cProfile's
per-call overhead inflates the many small calls: read the shares, not the microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import time
from collections import Counter
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
    texts, n = sentences(), args.sentences
    inputs = texts if n == 1 else [texts[i : i + n] for i in range(0, len(texts) - n + 1, n)]
    bodies = [orjson.dumps({"input": each}) for each in inputs]
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
        if args.profile:
            served = 0
            profile = cProfile.Profile()
            profile.enable()  # (sys.setprofile: this thread only)
            await load(args.seconds)
            profile.disable()
            print_profile(pstats.Stats(profile), served)
    return figures


def print_profile(stats: pstats.Stats, requests: int) -> None:
    """Python calls a request on the loop, and its profiled time by module and by function."""
    by_module: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    calls = 0
    here = f"{os.getcwd()}/"
    for (file, line, function), (_, count, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        calls += count
        module = "(built-ins)" if file == "~" else file.split("site-packages/")[-1]
        module = module.removeprefix(here)
        by_module[module] += own
        by_function[f"{module}:{line} {function}"] += own
    total = sum(by_module.values())
    print(f"\nprofiled: {requests} requests, {calls / requests:.0f} Python calls a request")
    for title, counter in (("module", by_module), ("function", by_function)):
        print(f"\n| {title} | share of the loop's profiled time |\n|---|---:|")
        for name, own in counter.most_common(20):
            print(f"| {name} | {own / total:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-args", default="", help="flags for `poolserve serve`")
    parser.add_argument("--sentences", type=int, default=1, help="sentences a request")
    parser.add_argument(
        "--profile", action="store_true", help="one more round under cProfile (the docstring)"
    )
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
        f"{cpu_model()}; c={args.concurrency}, {args.sentences} sentence(s) a request; flags: "
        f"{args.server_args or '(defaults)'}; loop CPU a request, median of {args.rounds}: "
        f"{statistics.median(figures):.1f} µs"
    )


if __name__ == "__main__":
    main()
