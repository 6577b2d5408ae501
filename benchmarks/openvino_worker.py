"""The OpenVINO rows of benchmarks/raw_engines.py, run by the OpenVINO environment's python.

It imports numpy, openvino and nncf only (nothing of poolserve or torch: those live in the other
environment). It compiles the float32 ONNX graph as it is, with its dynamic batch and length, on
the CPU with `--threads` inference threads: once with the f32 precision hint, once with the bf16
one, and, with `--calibration`, once more after NNCF's post-training int8 quantization
(transformer preset, calibrated on those feeds). Each runs the batches of `batches` (one warm-up
pass, then `--passes` timed ones, median) and `output` gets, per row i, `label_i`, `rate_i`
(sentences/s) and `vectors_i` (in the batches' order).

    python benchmarks/openvino_worker.py model.onnx batches.npz out.npz --passes 3 --threads 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import openvino

Feed = dict[str, np.ndarray]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph", type=Path, help="the float32 ONNX graph")
    parser.add_argument("batches", type=Path, help=".npz of each batch's inputs (NAME_INDEX)")
    parser.add_argument("output", type=Path)
    parser.add_argument("--passes", type=int, default=3, help="timed passes (median kept)")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--calibration", type=Path, help=".npz of feeds: adds the int8 row")
    args = parser.parse_args()

    core = openvino.Core()
    model = core.read_model(args.graph)
    batches = _feeds(args.batches)
    rows: list[tuple[str, float, np.ndarray]] = []
    for label, precision in (("OpenVINO float32", "f32"), ("OpenVINO bf16 hint", "bf16")):
        compiled = _compiled(core, model, args.threads, precision)
        ran = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        if ran != precision:  # a CPU without bf16 keeps f32: say so in the row
            label += f" (ran {ran})"
        rows.append((label, *_timed(compiled, batches, args.passes)))
    if args.calibration is not None:
        import nncf

        calibration = _feeds(args.calibration)
        quantized = nncf.quantize(
            model,
            nncf.Dataset(calibration),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(calibration),
        )
        compiled = _compiled(core, quantized, args.threads, "f32")
        rows.append(("OpenVINO int8 (NNCF)", *_timed(compiled, batches, args.passes)))

    arrays: dict[str, np.ndarray] = {}
    for index, (label, rate, vectors) in enumerate(rows):
        arrays |= {
            f"label_{index}": np.array(label),
            f"rate_{index}": np.array(rate),
            f"vectors_{index}": vectors,
        }
    np.savez(args.output, **arrays)


def _feeds(path: Path) -> list[Feed]:
    """The feeds of `path` (arrays named NAME_INDEX), in index order."""
    with np.load(path) as stored:
        feeds: dict[int, Feed] = {}
        for key in stored.files:
            name, index = key.rsplit("_", 1)
            feeds.setdefault(int(index), {})[name] = stored[key]
    return [feeds[index] for index in sorted(feeds)]


def _compiled(
    core: openvino.Core, model: openvino.Model, threads: int, precision: str
) -> openvino.CompiledModel:
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision}
    return core.compile_model(model, "CPU", config)


def _timed(
    compiled: openvino.CompiledModel, batches: list[Feed], passes: int
) -> tuple[float, np.ndarray]:
    """Sentences per second (median of `passes`) and the vectors, in the batches' order."""
    request = compiled.create_infer_request()

    def run(feed: Feed) -> np.ndarray:
        result: np.ndarray = request.infer(feed)[0]  # a copy (share_outputs=False)
        return result

    vectors = np.concatenate([run(feed) for feed in batches])  # also the warm-up
    seconds = []
    for _ in range(passes):
        started = time.perf_counter()
        for feed in batches:
            run(feed)
        seconds.append(time.perf_counter() - started)
    return len(vectors) / statistics.median(seconds), vectors


if __name__ == "__main__":
    main()
