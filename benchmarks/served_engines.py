"""Each engine forced (`--backend NAME --dtype PRECISION`), served in turn under the loads
`benchmarks.engine_choice` measures the defaults with: does `--backend auto`'s trial rank them
as they serve? Rounds take turns (the machine drifts over minutes as much as the gaps), and the
table holds each figure's median over the rounds, with the rounds' own in brackets.

    .venv/bin/python -m benchmarks.served_engines --rounds 2
    .venv/bin/python -m benchmarks.served_engines --engines torch:float32,openvino:bfloat16
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.corpus import sentences
from benchmarks.engine_choice import served_loads
from benchmarks.peers import cpu_model

ENGINES = "torch:float32,onnxruntime:float32,openvino:float32"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=ENGINES, help="ENGINE:PRECISION, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="each load")
    parser.add_argument("--server-args", default="", help="more flags for `poolserve serve`")
    args = parser.parse_args()
    texts = sentences(2000)
    engines = [tuple(each.split(":")) for each in args.engines.split(",")]
    figures: dict[tuple[str, ...], dict[str, list[float]]] = {each: {} for each in engines}
    for _ in range(args.rounds):
        for engine, precision in engines:
            flags = ["--backend", engine, "--dtype", precision, *args.server_args.split()]
            loads = served_loads(texts, args.seconds, flags)
            for load, value in loads.items():
                figures[(engine, precision)].setdefault(load, []).append(value)
    print(f"CPU: {cpu_model()}; {args.rounds} round(s) in turn, {args.seconds:.0f} s a load\n")
    loads = list(next(iter(figures.values())))
    print("| engine | " + " | ".join(loads) + " |")
    print("|---|" + "---:|" * len(loads))
    for (engine, precision), each in figures.items():
        cells = [
            f"{statistics.median(each[load]):.0f} ({', '.join(f'{v:.0f}' for v in each[load])})"
            for load in loads
        ]
        print(f"| {engine} {precision} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
