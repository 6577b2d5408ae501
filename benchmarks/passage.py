"""One 256-token passage at a time (c=1): the engine's inference time with the idle runner's
cores lent to the batch (the default) and with every batch on one thread.

Prints the median `x-inference-time` of 30 requests for each server.

    .venv/bin/python -m benchmarks.passage
"""

from __future__ import annotations

import statistics

import httpx

from benchmarks.sentences import sentences
from benchmarks.server_process import running_server

REQUESTS = 30


def main() -> None:
    body = {"input": " ".join(sentences(200)), "truncate_prompt_tokens": -1}  # 256 tokens
    print("| cores | forward | inference ms (median) |")
    print("|---|---|---:|")
    for label, flags in (
        ("lent by the idle runner (default)", []),
        ("one thread (`--single-thread-tokens 100000`)", ["--single-thread-tokens", "100000"]),
    ):
        for forward, compile_flags in (("eager", ["--compile", "off"]), ("compiled", [])):
            with (
                running_server(["--dtype", "bfloat16", *flags, *compile_flags]) as port,
                httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                for _ in range(5):
                    client.post("/v1/embeddings", json=body)
                times = [
                    float(client.post("/v1/embeddings", json=body).headers["x-inference-time"])
                    for _ in range(REQUESTS)
                ]
            print(f"| {label} | {forward} | {statistics.median(times):.1f} |", flush=True)


if __name__ == "__main__":
    main()
