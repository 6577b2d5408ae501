"""The raw engines: the bundled model's forward in each runtime and precision, no server.

2,000 real sentences (benchmarks/corpus.py) sorted by length, in padded batches of 32, on the
process's threads (torch's and ONNX Runtime's intra-op threads set to the cores): tokenize,
forward and pool, as a user of each library would run it. Each row's vectors are compared with
torch float32's (cosine, mean and min). The rows: torch eager in float32 and bf16 (the model
poolserve's torch backend loads), ONNX Runtime in float32, int8 as poolserve quantizes it
(per-channel weights after SmoothQuant scaling, backends/onnxruntime/int8.py) and int8 without
the scaling (ONNX Runtime's dynamic quantization alone), OpenVINO on the same float32 graph
(dynamic batch and length, compiled once) with its f32 and bf16 precision hints and int8 after
NNCF's post-training quantization (transformer preset, calibrated on the sentences poolserve's
int8 calibrates on), then poolserve's `Engine.embed` with its defaults and with `--backend
onnxruntime --quantize int8` (packed batches, its own scheduling). Prints a markdown table.

OpenVINO lives in a virtual environment of its own (`--openvino-venv`, created on first use:
`pip install openvino==2026.4.1 nncf==3.4.0 numpy`) and runs there as
benchmarks/openvino_worker.py, given the batches' arrays in an .npz; `--no-openvino` skips it.

    .venv/bin/python -m benchmarks.raw_engines
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.corpus import sentences
from benchmarks.peers import REPO, cpu_model, ensure_venv
from poolserve import Engine, EngineConfig
from poolserve.backends.graph.onnx_export import export, graph_inputs
from poolserve.backends.torch_model.executor import to_torch
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.backends.torch_model.loader import load_module
from poolserve.config import ModelConfig
from poolserve.engine.collate import Batch, collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.describe import prepare_model

BATCH = 32
OPENVINO_VERSION = "2026.4.1"
NNCF_VERSION = "3.4.0"
Run = Callable[[Batch], np.ndarray]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=3, help="timed passes (median kept)")
    parser.add_argument("--openvino-venv", type=Path, default=REPO / ".venv-peers" / "openvino")
    parser.add_argument("--no-openvino", action="store_true", help="skip the OpenVINO rows")
    args = parser.parse_args()

    texts = sentences(args.count)
    spec = replace(prepare_model(ModelConfig(dtype="float32")), device="cpu")
    tokenizer = TextTokenizer(spec.tokenizer)
    encoded = tokenizer.encode_batch(texts, truncate_to=spec.max_model_len)
    by_length = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    ordered = [texts[i] for i in by_length]  # every row's vectors come in this order
    batches = []
    for start in range(0, len(texts), BATCH):
        chunk = [encoded[i] for i in by_length[start : start + BATCH]]
        group = RequestGroup(len(chunk))
        items = [text_item(group, i, row) for i, row in enumerate(chunk)]
        batches.append(collate(items, pad_token_id=spec.pad_token_id))

    rows: list[tuple[str, float, np.ndarray]] = []
    for dtype in ("float32", "bfloat16"):
        module = load_module(replace(spec, dtype=dtype))
        rows.append((f"torch {dtype}, eager", *_timed(_torch_run(module), batches, args.passes)))
    reference = rows[0][2]

    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from poolserve.backends.onnxruntime.int8 import activation_ranges, quantize, smoothed
    from poolserve.backends.probe import calibration_split

    module = load_module(spec)
    target = ForwardTarget("embed", 0, False, 256, with_pool_mask=True)
    with tempfile.TemporaryDirectory() as scratch:
        graph = Path(scratch) / "model.onnx"
        export(module, spec, target, graph)
        calibration = [_feed(b, target) for b in _batches(tokenizer, spec, calibration_split()[0])]
        ranges = activation_ranges(graph, calibration)
        smooth = quantize(smoothed(graph, ranges, 0.8), Path(scratch), "smooth-int8.onnx")
        naive = Path(scratch) / "naive-int8.onnx"
        quantize_dynamic(graph, naive, per_channel=True, weight_type=QuantType.QInt8)
        for label, path in (
            ("ONNX Runtime float32", graph),
            ("ONNX Runtime int8, SmoothQuant α 0.8 (poolserve's)", smooth),
            ("ONNX Runtime int8, per-channel weights only", naive),
        ):
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            session = onnxruntime.InferenceSession(str(path), options)
            rows.append((label, *_timed(_ort_run(session, target), batches, args.passes)))
        if not args.no_openvino:
            python = ensure_venv(
                args.openvino_venv,
                [f"openvino=={OPENVINO_VERSION}", f"nncf=={NNCF_VERSION}", "numpy"],
            )
            feeds = [_feed(batch, target) for batch in batches]
            rows += _openvino_rows(python, graph, feeds, calibration, args.passes, Path(scratch))

    for label, config in (
        ("poolserve Engine.embed, --backend auto", EngineConfig(backend="auto")),
        ("poolserve Engine.embed, --quantize int8", EngineConfig(backend="auto", quantize="int8")),
    ):
        with Engine(engine_config=config) as engine:
            engine.embed(ordered[:256])
            passes = []
            for _ in range(args.passes):
                started = time.perf_counter()
                vectors = engine.embed(ordered)
                passes.append(time.perf_counter() - started)
        rows.append((label, len(texts) / statistics.median(passes), vectors))

    print(f"CPU: {cpu_model()}; {torch.get_num_threads()} threads; {len(texts)} real sentences")
    print()
    print("| engine | sentences/s | ÷ torch float32 | cosine vs float32: mean | min |")
    print("|---|---:|---:|---:|---:|")
    base = rows[0][1]
    for label, rate, vectors in rows:
        cosines = _cosines(vectors, reference)
        print(
            f"| {label} | {rate:.0f} | {rate / base:.2f} | {cosines.mean():.4f} "
            f"| {cosines.min():.4f} |"
        )


def _openvino_rows(
    python: Path,
    graph: Path,
    feeds: list[dict[str, np.ndarray]],
    calibration: list[dict[str, np.ndarray]],
    passes: int,
    scratch: Path,
) -> list[tuple[str, float, np.ndarray]]:
    """The rows of benchmarks/openvino_worker.py, run by `python` on `graph` and `feeds`."""
    paths = {name: scratch / f"openvino-{name}.npz" for name in ("batches", "calibration", "out")}
    for name, each in (("batches", feeds), ("calibration", calibration)):
        arrays = {f"{key}_{i}": value for i, feed in enumerate(each) for key, value in feed.items()}
        np.savez(paths[name], **arrays)
    worker = Path(__file__).with_name("openvino_worker.py")
    command = [str(python), str(worker), str(graph), str(paths["batches"]), str(paths["out"])]
    options = ["--passes", str(passes), "--threads", str(torch.get_num_threads())]
    subprocess.run([*command, *options, "--calibration", str(paths["calibration"])], check=True)
    with np.load(paths["out"]) as out:
        count = sum(key.startswith("label_") for key in out.files)
        return [
            (str(out[f"label_{i}"]), float(out[f"rate_{i}"]), out[f"vectors_{i}"])
            for i in range(count)
        ]


def _batches(tokenizer: TextTokenizer, spec: object, texts: tuple[str, ...]) -> list[Batch]:
    ids = sorted(tokenizer.encode_batch(list(texts), truncate_to=256), key=len)
    out = []
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        group = RequestGroup(len(chunk))
        out.append(collate([text_item(group, i, r) for i, r in enumerate(chunk)], pad_token_id=0))
    return out


def _feed(batch: Batch, target: ForwardTarget) -> dict[str, np.ndarray]:
    names = ("input_ids", "attention_mask", "pool_mask")
    return dict(zip(names, graph_inputs(to_torch(batch, torch.device("cpu")), target), strict=True))


def _torch_run(module: Callable[..., torch.Tensor]) -> Run:
    def run(batch: Batch) -> np.ndarray:
        tensors = to_torch(batch, torch.device("cpu"))
        with torch.inference_mode():
            return module("embed", tensors.input_ids, tensors.attention_mask, None).numpy()

    return run


def _ort_run(session: object, target: ForwardTarget) -> Run:
    def run(batch: Batch) -> np.ndarray:
        result: np.ndarray = session.run(None, _feed(batch, target))[0]  # type: ignore[attr-defined]
        return result

    return run


def _timed(run: Run, batches: list[Batch], passes: int) -> tuple[float, np.ndarray]:
    """Sentences per second (median of `passes`) and the vectors, in the batches' order."""
    vectors = np.concatenate([run(batch) for batch in batches])  # also the warm-up
    seconds = []
    for _ in range(passes):
        started = time.perf_counter()
        for batch in batches:
            run(batch)
        seconds.append(time.perf_counter() - started)
    return len(vectors) / statistics.median(seconds), vectors


def _cosines(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    a = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    b = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    result: np.ndarray = (a * b).sum(axis=1)
    return result


if __name__ == "__main__":
    main()
