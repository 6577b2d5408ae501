"""Bulk embedding: `poolserve embed` against sentence-transformers' `encode` on the same corpus.

Both run as their own processes, one after the other, on the same model, dtype and machine; each
reports the seconds it spent embedding (model loading apart), and the parent measures the wall
time and peak RSS of the whole process. The corpus is short documents (one to three of
`benchmarks.sentences`' sentences, 10 to 60 tokens), written once as plain text.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.bulk --documents 100000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.sentences import sentences

ST_SCRIPT = """
import json, sys, time
import torch
from sentence_transformers import SentenceTransformer
from poolserve.models.resolve import default_model_dir

texts = open(sys.argv[1], encoding="utf-8").read().splitlines()
dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[sys.argv[2]]
model = SentenceTransformer(str(default_model_dir()), device="cpu",
                            model_kwargs={"torch_dtype": dtype})
started = time.perf_counter()
vectors = model.encode(texts, batch_size=int(sys.argv[3]), convert_to_numpy=True)
print(json.dumps({"seconds": time.perf_counter() - started, "rows": len(vectors)}))
"""


def documents(count: int) -> list[str]:
    rng = random.Random(11)
    pool = sentences(240)
    return [" ".join(rng.choices(pool, k=1 + index % 3)) for index in range(count)]


def run_measured(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) and stdout of a child process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command[:4]} failed with {process.returncode}:\n{output}")
    return time.perf_counter() - started, usage.ru_maxrss * 1024, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--st-batch-size", type=int, default=32, help="encode's default: 32")
    parser.add_argument("--poolserve-args", default="", help="extra flags for poolserve embed")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "corpus.txt"
        corpus.write_text("".join(text + "\n" for text in documents(args.documents)))
        output = Path(scratch) / "vectors.npy"
        poolserve = [
            *(sys.executable, "-m", "poolserve", "embed", str(corpus), "--output", str(output)),
            *("--dtype", args.dtype, "--log-level", "warning", *args.poolserve_args.split()),
        ]
        wall, rss, printed = run_measured(poolserve)
        seconds = float(printed.split(" in ")[1].split(" s")[0])
        ours = {"wall": wall, "rss": rss, "seconds": seconds}
        wall, rss, printed = run_measured(
            [sys.executable, "-c", ST_SCRIPT, str(corpus), args.dtype, str(args.st_batch_size)]
        )
        theirs = {"wall": wall, "rss": rss, "seconds": json.loads(printed)["seconds"]}

    cpu = platform.processor() or platform.machine()
    print(f"{args.documents} documents, {args.dtype}, {os.cpu_count()} cores ({cpu})")
    print()
    print("| | embedding s | documents/s | wall s (with loading) | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, result in (("poolserve embed", ours), ("sentence-transformers encode", theirs)):
        print(
            f"| {name} | {result['seconds']:.1f} | {args.documents / result['seconds']:.0f} | "
            f"{result['wall']:.1f} | {result['rss'] / 2**20:.0f} |"
        )
    print()
    ratio = theirs["seconds"] / ours["seconds"]
    print(f"poolserve ÷ sentence-transformers: {ratio:.2f}× (embedding throughput)")


if __name__ == "__main__":
    main()
