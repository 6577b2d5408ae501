"""The raw limit for reranking: the model called directly on (query, document) work, no server.

Bi-encoder: every document embedded (the query's cost is negligible); cross-encoder: every pair
through the model. Run as its own process with torch imported before poolserve, as in
benchmarks/raw_model.py. Prints JSON: pairs/s by batch size.
"""

from __future__ import annotations

import argparse
import json
import time

# Before poolserve (third-party imports sort first): torch's threading defaults stay in force.
import torch

from benchmarks.rerank import QUERIES
from benchmarks.sentences import sentences
from poolserve.backends.torch_model.executor import to_torch
from poolserve.backends.torch_model.loader import load_module
from poolserve.config import ModelConfig
from poolserve.engine.collate import collate, text_item
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.describe import prepare_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--cross", action="store_true")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()

    spec = prepare_model(ModelConfig(model=args.model, dtype=args.dtype))
    module = load_module(spec)
    tokenizer = TextTokenizer(spec.tokenizer_json)
    docs = sentences(256)
    head = "classify" if args.cross else "embed"

    def run(batch: list[str]) -> None:
        if args.cross:
            encoded = tokenizer.encode_pairs([(QUERIES[0], doc) for doc in batch], truncate_to=None)
        else:
            encoded = [(ids, None) for ids in tokenizer.encode_batch(batch, truncate_to=None)]
        group = RequestGroup(len(encoded))
        items = [text_item(group, i, ids, types, head) for i, (ids, types) in enumerate(encoded)]
        tensors = to_torch(collate(items, pad_token_id=spec.pad_token_id), torch.device("cpu"))
        with torch.inference_mode():
            module(head, tensors.input_ids, tensors.attention_mask, tensors.token_type_ids)

    rates: dict[int, float] = {}
    for size in args.batch_sizes:
        batches = [docs[i : i + size] for i in range(0, len(docs) - size + 1, size)]
        run(batches[0])
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            for batch in batches:
                run(batch)
                done += len(batch)
        rates[size] = done / (time.perf_counter() - started)
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
