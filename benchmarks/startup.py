"""Start-up time: from launching `poolserve serve` to its first 200 from /health.

Eager, then compiled with an empty compile cache (a fresh POOLSERVE_CACHE_DIR), then compiled
again with that cache warm; then `--quantize int8` (exported, quantized and gated) with an empty
cache and a warm one. `--dtype auto` throughout (the precision measured where the cache does not
hold it). Prints a markdown table.

    .venv/bin/python -m benchmarks.startup
"""

from __future__ import annotations

import sys
import tempfile
import time

from benchmarks.server_process import free_port, running_process


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="poolserve-cache-") as cache,
        tempfile.TemporaryDirectory(prefix="poolserve-cache-") as int8_cache,
    ):
        print("| server | ready after |")
        print("|---|---:|")
        for label, flags, env in (
            ("eager (`--compile off`)", ["--compile", "off"], {}),
            ("compiled, empty cache", [], {"POOLSERVE_CACHE_DIR": cache}),
            ("compiled, warm cache", [], {"POOLSERVE_CACHE_DIR": cache}),
            (
                "`--quantize int8`, empty cache",
                ["--quantize", "int8"],
                {"POOLSERVE_CACHE_DIR": int8_cache},
            ),
            (
                "`--quantize int8`, warm cache",
                ["--quantize", "int8"],
                {"POOLSERVE_CACHE_DIR": int8_cache},
            ),
        ):
            port = free_port()
            command = [sys.executable, "-m", "poolserve", "serve", "--port", str(port)]
            started = time.perf_counter()
            with running_process([*command, *flags], port, env=env):
                print(f"| {label} | {time.perf_counter() - started:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
