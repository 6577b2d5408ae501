"""`--backend auto`'s choice beside the raw engines, in one run: what the chooser measured (its
table, from an empty cache), the raw engines with nothing around them (benchmarks/raw_engines.py:
2,000 real sentences sorted by length in batches of 32, on the process's threads), and the
engine auto chose through `Engine.embed` over the same sentences, as a ratio of the fastest
raw non-quantized engine. Served figures (HTTP, the server's defaults) come from
`benchmarks.paired` or `benchmarks.peers` run after it.

    .venv/bin/python -m benchmarks.engine_choice            # --no-raw: the choice alone
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.corpus import sentences
from benchmarks.peers import cpu_model
from poolserve import Engine, EngineConfig
from poolserve.backends.choice.choice_table import row_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-raw", action="store_true", help="skip the raw engines")
    args = parser.parse_args()

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
    print(f"--backend auto serves {choice.engine} {choice.precision}")
    for trial in choice.trials:
        print(f"    {row_text(trial)}")
    print(f"\nEngine.embed, --backend auto: {rate:.0f} sentences/s ({args.count} real sentences)")
    if args.no_raw:
        return
    raw = subprocess.run(
        [sys.executable, "-m", "benchmarks.raw_engines", "--count", str(args.count)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    table = raw[raw.index("| engine") :]
    print("\nThe raw engines, the same run:\n")
    print(table)
    floats = {
        label: float(value)
        for label, value in re.findall(r"^\| ([^|]+?) \| (\d+) \|", table, re.MULTILINE)
        if "int8" not in label and not label.startswith("poolserve")
    }
    fastest = max(floats, key=floats.__getitem__)
    print(
        f"auto ÷ the fastest raw float engine ({fastest}, {floats[fastest]:.0f}): "
        f"{rate / floats[fastest]:.2f}"
    )


if __name__ == "__main__":
    main()
