"""What a request costs the server beyond its sentences, in CPU microseconds.

Starts `poolserve serve` (its defaults, or `--server-args`) and runs two closed-loop loads of real
prose (benchmarks/corpus.py; benchmarks/loadgen.py, keep-alive sockets, `POST /v1/embeddings`):
c=8 requests of 32 sentences, then c=64 requests of one sentence. For each it reads the server's
CPU seconds (the process and every process under it, from /proc) before and after. Printed:

- the server's CPU µs per sentence at 8 × 32 (almost all of it the model's work),
- its CPU µs per request at c=64 × 1, and that minus the per-sentence figure: the front end's
  cost of one request beyond its sentence (HTTP, JSON, validation, hops, response),
- requests/s at c=64 ÷ sentences/s at 8 × 32,
- the runners' busy seconds each (/stats: wall time in the forwards, which a runner waiting for
  a core also counts), the CPU their own threads spent in them (/stats `cpu_seconds`) and the
  inputs a batch.

`--profile DIR` also samples the server with py-spy during the c=64 load (`.venv/bin/pip
install py-spy` first; `py-spy record --format raw --nonblocking`: without `--nonblocking`
py-spy stops the server at every sample, which slows it) and prints the CPU a request on each
kind of thread (the event loop, the CPU pool, the runners) and the functions with the most
samples, their own and with what they call. With `--gil` only the thread holding the GIL is
sampled: where a server bound by the GIL spends it (uvloop's callbacks into uvicorn have no
asyncio frame under them, so they count as "other threads"). The load generator runs on the
same cores; its CPU share is printed.

    .venv/bin/python -m benchmarks.request_cost --seconds 10
    .venv/bin/python -m benchmarks.request_cost --profile /tmp/profile
    .venv/bin/python -m benchmarks.request_cost --server-args "--otlp-endpoint http://127.0.0.1:1"
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson

from benchmarks.corpus import sentences
from benchmarks.loadgen import LoadResult, build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.server_process import running_server_process

TICKS = os.sysconf("SC_CLK_TCK")
RATE = 250  # py-spy's samples a second


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of `root` and every live process under it, with what its
    reaped children used."""
    parents: dict[int, int] = {}
    times: dict[int, tuple[float, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        own = (int(fields[11]) + int(fields[12])) / TICKS
        reaped = (int(fields[13]) + int(fields[14])) / TICKS
        times[pid] = (own, reaped)

    def under_root(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    total = sum(own for pid, (own, _) in times.items() if under_root(pid))
    return total + times.get(root, (0.0, 0.0))[1]


def client_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Measured:
    """One load: its result, and over its measured part the server's CPU seconds, the
    client's, the runners' busy and CPU seconds in their batches (/stats) and the batches run."""

    result: LoadResult
    server_cpu: float
    client_cpu: float
    model_seconds: float
    model_cpu: float
    batches: int
    items: int


def runner_counters(port: int) -> tuple[float, float, int, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as response:
        stats = orjson.loads(response.read())
    busy, cpu = float(stats["busy_seconds"]), float(stats["cpu_seconds"])
    return busy, cpu, int(stats["batches"]), int(stats["items"])


def measured(
    pid: int, port: int, requests: list[bytes], concurrency: int, seconds: float
) -> Measured:
    """The load measured (the warm-up's second excluded: the counters are read once it is
    over)."""
    asyncio.run(run_load("127.0.0.1", port, requests, concurrency=concurrency, seconds=1.0))
    server, client, runners = tree_cpu_seconds(pid), client_cpu_seconds(), runner_counters(port)
    result = asyncio.run(
        run_load("127.0.0.1", port, requests, concurrency=concurrency, seconds=seconds, warmup=0)
    )
    after = runner_counters(port)
    return Measured(
        result,
        tree_cpu_seconds(pid) - server,
        client_cpu_seconds() - client,
        after[0] - runners[0],
        after[1] - runners[1],
        after[2] - runners[2],
        after[3] - runners[3],
    )


def profile(pid: int, seconds: float, out: Path, gil: bool = False) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [spy, "record", "--pid", str(pid), "--duration", f"{seconds:.0f}"]
    command += ["--rate", str(RATE), "--format", "raw", "--output", str(out), "--nonblocking"]
    command += ["--gil"] if gil else []
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Profile:
    """A py-spy raw profile read: busy samples by function (its own, and anywhere on the
    stack) and by the kind of thread they were on."""

    own: collections.Counter[str]
    anywhere: collections.Counter[str]
    threads: collections.Counter[str]
    busy: int


# Threads waiting (a condition, the pool's queue, the event loop in epoll: py-spy shows its
# innermost Python frame) are not work.
IDLE = ("Condition.wait (", "Runner.run (asyncio", "_worker (concurrent", "Queue.get (")
KINDS = (
    ("the model runners", "poolserve/engine/runner.py"),
    ("the event loop", "Runner.run (asyncio"),
    ("the CPU pool", "poolserve/engine/lane_executor.py"),
)


def read_profile(raw: Path) -> Profile:
    found = Profile(collections.Counter(), collections.Counter(), collections.Counter(), 0)
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = [frame for frame in stack.split(";") if not frame.startswith("thread (")]
        if not frames or any(frames[-1].startswith(each) for each in IDLE):
            continue
        if not samples.isdigit():  # a line py-spy was still writing as it stopped
            continue
        n = int(samples)
        found.busy += n
        found.own[frames[-1]] += n
        for frame in set(frames):
            found.anywhere[frame] += n
        kind = next((k for k, mark in KINDS if any(mark in f for f in frames)), "other threads")
        found.threads[kind] += n
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--server-args", default="", help="flags for `poolserve serve`")
    parser.add_argument("--profile", type=Path, default=None, help="a folder for py-spy's output")
    parser.add_argument(
        "--gil", action="store_true", help="profile only the thread holding the GIL (py-spy --gil)"
    )
    args = parser.parse_args()

    texts = sentences(2000)
    with running_server_process(args.server_args.split()) as (port, process):

        def requests(inputs: list[object]) -> list[bytes]:
            bodies = [orjson.dumps({"input": each}) for each in inputs]
            return [build_request("127.0.0.1", port, "/v1/embeddings", b) for b in bodies]

        batches = requests([texts[i * 32 % 1968 :][:32] for i in range(64)])
        singles = requests([texts[i * 7 % len(texts)] for i in range(256)])
        big = measured(process.pid, port, batches, 8, args.seconds)
        spy = None
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            # Started before the load's warm-up second, it samples the measured seconds.
            spy = profile(process.pid, args.seconds + 1, args.profile / "c64.txt", args.gil)
            time.sleep(0.5)  # py-spy attaches before the load begins (a benchmark, not a test)
        one = measured(process.pid, port, singles, 64, args.seconds)
        if spy is not None:
            spy.wait()

    sentence_rate = big.result.throughput * 32
    per_sentence = big.server_cpu / (len(big.result.latencies) * 32) * 1e6
    per_request = one.server_cpu / len(one.result.latencies) * 1e6
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; "
        f"server flags: {args.server_args or '(defaults)'}"
    )
    print(f"{args.seconds:g} s a load, real prose; the client's CPU is on the same cores\n")
    print(
        "| load | rate | server CPU µs each | the runners' busy µs each (wall, /stats) "
        "| their CPU µs each in batches (/stats) | inputs a batch | client CPU | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, unit, each, load in (
        ("c=8 × 32 sentences", "sentences/s", 32, big),
        ("c=64 × 1 sentence", "requests/s", 1, one),
    ):
        count = len(load.result.latencies) * each
        print(
            f"| {label} | {load.result.throughput * each:.0f} {unit} "
            f"| {load.server_cpu / count * 1e6:.0f} | {load.model_seconds / count * 1e6:.0f} "
            f"| {load.model_cpu / count * 1e6:.0f} | {load.items / max(load.batches, 1):.1f} "
            f"| {load.client_cpu / args.seconds:.0%} | {load.result.errors} |"
        )
    print(
        "\nthe server's CPU a one-sentence request beyond a sentence's at 8 × 32: "
        f"{per_request - per_sentence:.0f} µs"
    )
    print(f"c=64 requests/s ÷ 8 × 32 sentences/s: {one.result.throughput / sentence_rate:.2f}")
    if args.profile is not None:
        found = read_profile(args.profile / "c64.txt")
        requests_done = len(one.result.latencies)
        held = "the GIL held" if args.gil else "CPU"
        print(f"\npy-spy at c=64: {held} a request by thread (busy samples at 250 a second)\n")
        print("| threads | µs a request | share |")
        print("|---|---:|---:|")
        for kind, n in found.threads.most_common():
            micros = n / RATE / requests_done * 1e6 * args.seconds / (args.seconds + 1)
            print(f"| {kind} | {micros:.0f} | {n / found.busy:.0%} |")
        for title, counts in (("own", found.own), ("anywhere on the stack", found.anywhere)):
            print(f"\nThe top functions by samples {title} (share of busy samples):\n")
            print("| function | share |")
            print("|---|---:|")
            for frame, n in counts.most_common(15):
                print(f"| `{frame}` | {n / found.busy:.1%} |")


if __name__ == "__main__":
    main()
