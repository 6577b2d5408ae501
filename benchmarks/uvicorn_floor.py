"""The floor under poolserve's event loop: what uvicorn itself costs a request.

Serves a bare ASGI app under uvicorn with poolserve's own settings (uvloop, httptools, no
access log, no proxy headers) that reads each request's body and answers a canned body the size
of a one-sentence `/v1/embeddings` answer (384 floats), then runs the closed loop of
benchmarks/request_cost.py's one-sentence load (c=64, real prose) against it and reads the
server's CPU from /proc. What `poolserve serve` spends on its event loop beyond this figure
(`benchmarks.thread_cpu`) is poolserve's own Python: its layers, the route, the serving step,
the answer.

    .venv/bin/python -m benchmarks.uvicorn_floor --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import orjson
from starlette.types import Receive, Scope, Send

from benchmarks.corpus import sentences
from benchmarks.loadgen import build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.request_cost import tree_cpu_seconds
from benchmarks.server_process import free_port, running_process

ANSWER = orjson.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.0123456789] * 384}],
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "usage": {"prompt_tokens": 12, "total_tokens": 12},
    }
)


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def serve(port: int) -> None:
    import uvicorn

    uvicorn.run(
        bare_app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return

    port = free_port()
    texts = sentences(2000)
    bodies = [orjson.dumps({"input": texts[i * 7 % len(texts)]}) for i in range(256)]
    requests = [build_request("127.0.0.1", port, "/v1/embeddings", body) for body in bodies]
    command = [sys.executable, "-m", "benchmarks.uvicorn_floor", "--serve", str(port)]
    with running_process(command, port) as process:
        asyncio.run(
            run_load("127.0.0.1", port, requests, concurrency=args.concurrency, seconds=1.0)
        )
        before = tree_cpu_seconds(process.pid)
        result = asyncio.run(
            run_load(
                "127.0.0.1",
                port,
                requests,
                concurrency=args.concurrency,
                seconds=args.seconds,
                warmup=0,
            )
        )
        cpu = tree_cpu_seconds(process.pid) - before
    done = len(result.latencies)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; a bare ASGI app under uvicorn")
    print(f"c={args.concurrency}: {result.throughput:.0f} requests/s, errors {result.errors}")
    print(f"the server's CPU a request: {cpu / max(done, 1) * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
