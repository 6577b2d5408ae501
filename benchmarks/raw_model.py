"""The raw model limit: the model called directly, no server, as a user of torch would call it.

Over the benchmark's corpus (real prose by default) sorted by length, as sentence-transformers'
`encode` sorts its input, so each batch pads little: the best a plain batch loop does.

Run as its own process (`python -m benchmarks.raw_model`): torch is imported *before* poolserve
so that poolserve's threading defaults (passive OpenMP waiting) do not apply and the model runs
with torch's own defaults. Prints JSON: sentences/s per batch size for tokenize + forward + pool,
and the p50 of a bare forward pass of one sentence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

# Before poolserve (third-party imports sort first): torch's threading defaults stay in force.
import torch

from benchmarks.load import CORPORA, texts_of
from poolserve.backends.torch_model.executor import to_torch
from poolserve.backends.torch_model.loader import load_module
from poolserve.config import ModelConfig
from poolserve.engine.collate import collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.describe import prepare_model

CPU = torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16, 32, 64, 128])
    parser.add_argument("--seconds", type=float, default=4.0, help="per batch size")
    parser.add_argument("--corpus", choices=CORPORA, default="real")
    args = parser.parse_args()

    spec = prepare_model(ModelConfig(model=args.model, dtype=args.dtype))
    module = load_module(spec)
    tokenizer = TextTokenizer(spec.tokenizer_json)
    texts = sorted(
        texts_of(args.corpus, 512),
        key=lambda text: len(tokenizer.encode_batch([text], truncate_to=None)[0]),
    )

    def encode(batch: list[str]) -> torch.Tensor:
        ids = tokenizer.encode_batch(batch, truncate_to=None)
        group = RequestGroup(len(ids))
        collated = collate([text_item(group, i, row) for i, row in enumerate(ids)], pad_token_id=0)
        tensors = to_torch(collated, CPU)
        with torch.inference_mode():
            return module("embed", tensors.input_ids, tensors.attention_mask, None)

    rates: dict[int, float] = {}
    for size in args.batch_sizes:
        batches = [texts[i : i + size] for i in range(0, len(texts) - size + 1, size)]
        for batch in batches[:3]:
            encode(batch)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            for batch in batches:
                encode(batch)
                done += len(batch)
        rates[size] = done / (time.perf_counter() - started)

    one = collate(
        [text_item(RequestGroup(1), 0, tokenizer.encode_batch(texts[:1], truncate_to=None)[0])],
        pad_token_id=0,
    )
    one_tensors = to_torch(one, CPU)
    timings = []
    with torch.inference_mode():
        for _ in range(20):
            module("embed", one_tensors.input_ids, one_tensors.attention_mask, None)
        for _ in range(300):
            started = time.perf_counter()
            module("embed", one_tensors.input_ids, one_tensors.attention_mask, None)
            timings.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "rates": rates,
                "forward_one_s": statistics.median(timings),
                "torch_threads": torch.get_num_threads(),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
