"""`--backend auto`'s choice beside the raw engines, in one run: what the chooser measured (its
table, from an empty cache), the raw engines with nothing around them (benchmarks/raw_engines.py:
2,000 real sentences sorted by length in batches of 32, on the process's threads), and the
engine auto chose through `Engine.embed` over the same sentences, and `poolserve serve` at its
defaults (reading that choice) under two HTTP loads of real prose, each as a ratio of the
fastest raw non-quantized engine: c=8 requests of 32 sentences (sentences/s) and c=64 requests
of one sentence (requests/s; benchmarks/loadgen.py, closed loop, keep-alive sockets).

    .venv/bin/python -m benchmarks.engine_choice            # --no-raw: the choice alone

`--rounds N` runs the raw engines and the served loads N times in turn (the server started
anew each round, reading the choice) and prints each round's ratios and their median: this
machine's drift over minutes is about the size of the differences measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable

import orjson

from benchmarks.corpus import sentences
from benchmarks.loadgen import build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.server_process import running_server
from poolserve import Engine, EngineConfig
from poolserve.backends.choice.choice_table import row_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-raw", action="store_true", help="skip the raw engines")
    parser.add_argument("--seconds", type=float, default=10.0, help="each served load")
    parser.add_argument(
        "--rounds", type=int, default=1, help="raw engines and served loads, in turn"
    )
    args = parser.parse_args()

    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["POOLSERVE_CACHE_DIR"] = cache  # an empty cache: the choice is measured
        started = time.perf_counter()
        engine = Engine(engine_config=EngineConfig(backend="auto"))
        ready = time.perf_counter() - started
        choice = engine.core.choice
        assert choice is not None
        texts = sentences(args.count)
        engine.embed(texts[:256])
        passes = []
        for _ in range(args.passes):
            begun = time.perf_counter()
            engine.embed(texts)
            passes.append(time.perf_counter() - begun)
        rate = len(texts) / statistics.median(passes)
        engine.close()

        print(f"CPU: {cpu_model()}; measured in {choice.seconds:.1f} s (ready after {ready:.1f} s)")
        print(f"--backend auto serves {choice.runtime} {choice.precision}")
        for trial in choice.trials:
            print(f"    {row_text(trial)}")
        print(f"\nEngine.embed, --backend auto: {rate:.0f} sentences/s ({args.count} sentences)")
        if args.no_raw:
            return
        # The raw engines' run reads the same cache: its `--backend auto` row serves this choice.
        # Rounds alternate the raw engines and the server, so the machine's drift falls on both.
        rounds = []
        for _ in range(args.rounds):
            raw = subprocess.run(
                [sys.executable, "-m", "benchmarks.raw_engines", "--count", str(args.count)],
                capture_output=True,
                text=True,
                check=False,
            )
            if raw.returncode != 0:
                sys.exit(f"benchmarks.raw_engines failed:\n{raw.stderr[-4000:]}")
            rounds.append(
                (raw.stdout[raw.stdout.index("| engine") :], _served(texts, args.seconds))
            )
    for number, (table, served) in enumerate(rounds, 1):
        print(f"\nRound {number}: the raw engines\n")
        print(table)
        floats = {
            label: float(value)
            for label, value in re.findall(r"^\| ([^|]+?) \| (\d+) \|", table, re.MULTILINE)
            if "int8" not in label and not label.startswith("poolserve")
        }
        fastest = max(floats, key=floats.__getitem__)
        limit = floats[fastest]
        print(f"The fastest raw float engine: {fastest}, {limit:.0f} sentences/s\n")
        print("| poolserve, --backend auto | sentences/s | ÷ the fastest raw |")
        print("|---|---:|---:|")
        print(f"| Engine.embed, 2,000 sentences as they come | {rate:.0f} | {rate / limit:.2f} |")
        for label, value in served.items():
            print(f"| `poolserve serve` (defaults), {label} | {value:.0f} | {value / limit:.2f} |")
            ratios.setdefault(label, []).append(value / limit)
    if len(rounds) > 1:
        print("\nServed ÷ the fastest raw of its round, the median of the rounds:")
        for label, each in ratios.items():
            listed = ", ".join(f"{r:.2f}" for r in each)
            print(f"- {label}: {statistics.median(each):.2f} ({listed})")


def _served(texts: list[str], seconds: float) -> dict[str, float]:
    """`poolserve serve` at its defaults (the choice read from the cache) under two loads."""
    return served_loads(texts, seconds, [])


def served_loads(texts: list[str], seconds: float, flags: list[str]) -> dict[str, float]:
    """`poolserve serve FLAGS` under two loads of `texts`, `seconds` each (after 2 s of the
    first as a warm-up): c=8 requests of 32 sentences and c=64 requests of one."""
    with running_server(flags) as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/info") as answer:
            engine = orjson.loads(answer.read()).get("engine")
        if engine is not None:
            chosen = f"{engine['chosen']['engine']} {engine['chosen']['precision']}"
            print(f"poolserve serve chose {chosen} ({engine['source']})")

        def requests(inputs: Callable[[int], object], count: int) -> list[bytes]:
            path = "/v1/embeddings"
            body = [orjson.dumps({"input": inputs(i)}) for i in range(count)]
            return [build_request("127.0.0.1", port, path, each) for each in body]

        batches = requests(lambda i: texts[i * 32 % len(texts) :][:32], 64)
        singles = requests(lambda i: texts[i * 7 % len(texts)], 256)
        asyncio.run(run_load("127.0.0.1", port, batches, concurrency=8, seconds=2.0))
        c8 = asyncio.run(run_load("127.0.0.1", port, batches, concurrency=8, seconds=seconds))
        c64 = asyncio.run(run_load("127.0.0.1", port, singles, concurrency=64, seconds=seconds))
    return {
        "c=8 × 32 sentences": c8.throughput * 32,
        "c=64 × one sentence (requests/s)": c64.throughput,
    }


if __name__ == "__main__":
    main()
