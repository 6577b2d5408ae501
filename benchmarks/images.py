"""Images/s of an image-text model over HTTP, decoding in the CPU pool, and the event loop's lag
meanwhile; next to the limits of its parts measured in the same run.

Two CLIP checkpoints in the real layout (tests/vision_zoo.py): the tests' tiny one (32 wide) and
one of ViT-B/32's shape (vision 768 wide, 12 layers, 32 px patches at 224; text 512 wide, 12
layers; random weights, the same files otherwise). The images are real photos and drawings
(scikit-learn's and networkx's, as the tests use them) and crops of them, sent as JPEG or PNG data
URIs of their own sizes (48 × 40 to 640 × 427), 8 to a request, from `--concurrency` clients.

For each model, one table row: images/s served (`poolserve serve`, default flags, a child
process), the event loop's lag while serving (the server's own `poolserve_event_loop_lag_seconds`
histogram: its median and the bucket its worst sample fell in), and the two limits: the model
alone on prepared pixels (batches of 32, this process, the server's dtype and one thread per
core as the server lays them out) and decoding + preparing alone (one thread; the server runs
`--cpu-workers` of them).

`python -m benchmarks.images [--seconds 20] [--concurrency 8]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch

from benchmarks.loadgen import build_request, run_load
from benchmarks.peers import cpu_model
from benchmarks.server_process import running_server
from tests.tiny_models import SEED, _write_json
from tests.vision_zoo import (
    CLIP_PREPROCESSOR,
    _write_clip_tokenizer,
    data_uri,
    make_clip_vit_base_patch32,
    sample_images,
)

PER_REQUEST = 8


def make_vit_b_32(directory: Path) -> Path:
    """CLIP ViT-B/32's shape with random weights, in openai/clip-vit-base-patch32's layout."""
    from transformers import CLIPConfig, CLIPModel

    directory.mkdir(parents=True)
    vocab = _write_clip_tokenizer(directory)
    config = CLIPConfig(
        text_config={
            "vocab_size": vocab,
            "bos_token_id": vocab - 2,
            "eos_token_id": vocab - 1,
            "pad_token_id": 1,
        },
        vision_config={"image_size": 224, "patch_size": 32},
        projection_dim=512,
    )
    torch.manual_seed(SEED)
    CLIPModel(config).eval().save_pretrained(str(directory), safe_serialization=True)
    _write_json(directory / "preprocessor_config.json", CLIP_PREPROCESSOR)
    return directory


def request_bodies() -> list[bytes]:
    """Requests of 8 images each, JPEG and PNG data URIs of the sample images, in turn."""
    images = sample_images()
    uris = [data_uri(image.convert("RGB"), "JPEG") for image in images]
    uris += [data_uri(image) for image in images]
    bodies = []
    for start in range(len(uris)):
        chosen = [uris[(start + i) % len(uris)] for i in range(PER_REQUEST)]
        body = {"input": [{"image": uri} for uri in chosen]}
        bodies.append(json.dumps(body).encode())
    return bodies


def lag_summary(metrics: str) -> tuple[float, str]:
    """The median event-loop lag (ms, from the histogram's buckets) and the bucket its worst
    sample fell in."""
    buckets = [
        (float(bound), float(count))
        for bound, count in re.findall(
            r'poolserve_event_loop_lag_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)', metrics
        )
    ]
    total = buckets[-1][1]
    median = next(bound for bound, count in buckets if count >= total / 2)
    worst = next(bound for bound, count in buckets if count >= total)
    below = max((bound for bound, count in buckets if count < total), default=0.0)
    return median * 1000, f"{below * 1000:g}-{worst * 1000:g} ms"


def served(directory: Path, seconds: float, concurrency: int) -> tuple[float, float, str, int]:
    bodies = request_bodies()
    with running_server([str(directory), "--max-request-bytes", str(32 * 2**20)]) as port:
        requests = [build_request("127.0.0.1", port, "/v1/embeddings", body) for body in bodies]
        result = asyncio.run(
            run_load("127.0.0.1", port, requests, concurrency=concurrency, seconds=seconds)
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            metrics = response.read().decode()
    assert set(result.statuses) <= {200, 429}, result.statuses
    median, worst = lag_summary(metrics)
    return result.throughput * PER_REQUEST, median, worst, result.statuses.get(429, 0)


def model_limit(directory: Path, seconds: float) -> float:
    """Images/s of the model alone on prepared pixels, batches of 32."""
    from poolserve import ModelConfig
    from poolserve.backends.torch_model.loader import load_module
    from poolserve.models.describe import prepare_model

    spec = prepare_model(ModelConfig(model=str(directory)))
    module: Any = load_module(spec)
    pixels = torch.zeros((32, 3, 224, 224))
    torch.set_num_threads(1)
    done, started = 0, time.perf_counter()
    with torch.inference_mode():
        while time.perf_counter() - started < seconds:
            module.images(pixels)
            done += 32
    return done / (time.perf_counter() - started)


def preparing_limit(directory: Path, seconds: float) -> float:
    """Images/s of decoding and preparing alone, on one thread (data URI bytes to pixels)."""
    import base64

    from poolserve import ModelConfig
    from poolserve.inputs.image_processor import ImageTextProcessor
    from poolserve.inputs.images.policy import MediaPolicy
    from poolserve.inputs.images.sources import ImageInput
    from poolserve.models.describe import prepare_model

    spec = prepare_model(ModelConfig(model=str(directory)))
    assert spec.layout.vision is not None
    processor = ImageTextProcessor(spec.tokenizer_json, spec.layout.vision)
    sources = [json.loads(body)["input"][0]["image"] for body in request_bodies()]
    files = [base64.b64decode(uri.split(",", 1)[1]) for uri in sources]
    media = MediaPolicy()
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        processor.image(ImageInput(files[done % len(files)]), "image", media, "input")
        done += 1
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="poolserve-images-"))
    try:
        models = {
            "tiny CLIP (32 wide)": make_clip_vit_base_patch32(root / "tiny"),
            "CLIP ViT-B/32 shape": make_vit_b_32(root / "vit-b-32"),
        }
        cpu = cpu_model()
        print(f"CPU: {cpu}; {PER_REQUEST} images a request, c={args.concurrency}")
        print(
            "| model | served images/s | requests refused (429) | loop lag median | loop lag "
            "worst | model alone (images/s, 1 thread) | decode + prepare alone (images/s, 1 "
            "thread) |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, directory in models.items():
            rate, median, worst, refused = served(directory, args.seconds, args.concurrency)
            alone = model_limit(directory, min(args.seconds, 10.0))
            preparing = preparing_limit(directory, min(args.seconds, 10.0))
            print(
                f"| {name} | {rate:.1f} | {refused} | {median:.1f} ms | {worst} | {alone:.1f} | "
                f"{preparing:.1f} |"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
