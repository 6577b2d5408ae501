"""The engine's path alone, in process: what a request costs without HTTP.

Loads a model with the Python API (`poolserve.Engine`), then runs `--concurrency` callers of
`Engine.aembed` on uvloop, each sending `--sentences` sentences of real prose
(benchmarks/corpus.py) a call, one call after another. Printed per round: calls/s, sentences/s
and the CPU µs a call of each kind of thread (the event loop, which also runs the callers; the
runners; the CPU pool) from /proc/self/task. What `poolserve serve` adds on top of this is the
HTTP application (benchmarks.thread_cpu for its threads); what the design could reach with
nothing but the path is the floor of benchmarks.static_models.

    .venv/bin/python -m benchmarks.engine_path --model DIR --rounds 3
    .venv/bin/python -m benchmarks.engine_path --model DIR --concurrency 8 --sentences 32
    .venv/bin/python -m benchmarks.engine_path --model DIR --runners 1

To compare two trees in turn, run each from its own directory (`cd TREE && PYTHONPATH=TREE
python -m benchmarks.engine_path ...`): `python -m` puts the working directory first on
`sys.path`, so `PYTHONPATH` alone does not pick the tree whose code runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import uvloop

from benchmarks.corpus import sentences
from benchmarks.peers import cpu_model

KINDS = (("runners", "poolserve-runner"), ("CPU pool", "poolserve-cpu"), ("event loop", "Main"))


def cpu_by_kind() -> Counter[str]:
    """CPU seconds so far of this process's threads, by kind (`KINDS`)."""
    ticks: Counter[str] = Counter()
    for thread in threading.enumerate():
        stat = Path(f"/proc/self/task/{thread.native_id}/stat")
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        kind = next((k for k, prefix in KINDS if thread.name.startswith(prefix)), "other")
        ticks[kind] += (int(fields[11]) + int(fields[12])) / 100
    return ticks


async def load(engine: object, batches: list[list[str]], callers: int, seconds: float) -> int:
    """Calls of `aembed` made by `callers` callers in `seconds`."""
    done = 0

    async def caller(offset: int, until: float) -> None:
        nonlocal done
        index = offset
        while time.perf_counter() < until:
            await engine.aembed(batches[index % len(batches)])  # type: ignore[attr-defined]
            index += 1
            done += 1

    until = time.perf_counter() + seconds
    await asyncio.gather(*(caller(i * 7, until) for i in range(callers)))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the model (a folder)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=1, help="sentences a call")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runners", type=int, default=None, help="default: one per core")
    args = parser.parse_args()

    import poolserve
    from poolserve.config import EngineConfig

    texts = sentences(4000)
    per = args.sentences
    batches = [texts[i * per : (i + 1) * per] for i in range(len(texts) // per)]
    engine = poolserve.Engine(args.model, engine_config=EngineConfig(runners=args.runners))
    rates: list[float] = []
    costs: dict[str, list[float]] = {}
    try:
        uvloop.run(load(engine, batches, args.concurrency, 2.0))  # warm-up
        for round_ in range(args.rounds):
            before = cpu_by_kind()
            started = time.perf_counter()
            calls = uvloop.run(load(engine, batches, args.concurrency, args.seconds))
            rate = calls / (time.perf_counter() - started)
            spent = cpu_by_kind() - before
            rates.append(rate)
            for kind, seconds in spent.items():
                costs.setdefault(kind, []).append(seconds / calls * 1e6)
            each = ", ".join(f"{kind} {spent[kind] / calls * 1e6:.0f}" for kind in sorted(spent))
            print(f"round {round_ + 1}: {rate:.0f} calls/s; CPU µs a call: {each}")
    finally:
        engine.close()
    print(
        f"\n{cpu_model()}; {args.model}; c={args.concurrency} × {per} sentence(s); "
        f"runners: {args.runners or 'default'}; medians of {args.rounds} rounds\n"
    )
    print("| calls/s | sentences/s | " + " | ".join(f"{k} µs a call" for k in sorted(costs)) + " |")
    print("|---:|---:|" + "---:|" * len(costs))
    rate = statistics.median(rates)
    cells = " | ".join(f"{statistics.median(costs[k]):.0f}" for k in sorted(costs))
    print(f"| {rate:.0f} | {rate * per:.0f} | {cells} |")


if __name__ == "__main__":
    main()
