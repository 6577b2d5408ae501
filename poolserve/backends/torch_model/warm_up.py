"""Warming a runner up before it serves: each head run once at each thread count the runner uses
on its own, so no request pays for a first call (oneDNN's kernels chosen, a compiled library's
instance initialised, torch.compile's graphs built).

A short batch of one and of eight; where small batches keep to one thread (executor.py), the
smallest batch that gets the other counts; for a cross-encoder also with token type ids (its
query-document pairs carry them, single texts do not). torch.compile's graphs get every size and
length (its guards may specialise on them); eager and ahead-of-time graphs take any shape alike,
and a long warm-up was measured to buy nothing (the first passage served took as long after it,
and an eager restart took 1.4 s longer).
"""

from __future__ import annotations

from collections.abc import Sequence

from poolserve.backends.torch_model.executor import ModelExecutor
from poolserve.engine.collate import text_item
from poolserve.engine.model_backend import Collate
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.inputs.image_processor import blank_image
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

LONG_TEXT = "a longer sentence to warm up the model with " * 40


def heads(
    executor: ModelExecutor,
    spec: ModelSpec,
    collate: Collate,
    heads: Sequence[Head],
    *,
    threads: int,
    counts: Sequence[int],
    packed_heads: frozenset[Head],
    every_shape: bool,
    max_batch_size: int,
) -> None:
    """Each of `heads` warmed up: a text head at each of `counts` threads, images at one and
    the runner's `threads`."""
    for head in heads:
        if head == "image_embed":
            images(executor, spec, collate, threads, max_batch_size)
            continue
        texts(
            executor,
            spec,
            collate,
            head,
            counts,
            packed=head in packed_heads,
            every_shape=every_shape,
            max_batch_size=max_batch_size,
        )


def texts(
    executor: ModelExecutor,
    spec: ModelSpec,
    collate: Collate,
    head: Head,
    counts: Sequence[int],
    *,
    packed: bool,
    every_shape: bool,
    max_batch_size: int,
) -> None:
    """Run a text head at each of `counts` threads (`every_shape`: short and long, one and
    eight, as torch.compile needs)."""
    tokenizer = TextTokenizer(spec.tokenizer)
    short, long = tokenizer.encode_batch(["warm up", LONG_TEXT], truncate_to=spec.max_model_len)
    typed = (False, True) if spec.kind == "cross_encoder" else (False,)
    sizes = (1, min(8, max_batch_size))
    for threads in counts:
        for with_types in typed:
            batches = []
            for ids in (short, long):
                for size in sizes:
                    types = [0] * len(ids) if with_types else None
                    item = text_item(RequestGroup(size), 0, ids, types, head=head)
                    batch = collate([item] * size, packed)
                    if executor.threads_for(batch, threads) == threads:
                        batches.append((ids is short, batch))
            if not every_shape:
                shorts = [each for each in batches if each[0]]
                batches = shorts or batches[:1]
            for _, batch in batches:
                executor(batch, threads)


def images(
    executor: ModelExecutor, spec: ModelSpec, collate: Collate, threads: int, max_batch_size: int
) -> None:
    """A batch of one image and one of eight, on one thread and on the runner's."""
    vision = spec.layout.vision
    assert vision is not None
    image = blank_image(vision)
    for count in sorted({1, threads}):
        for size in (1, min(8, max_batch_size)):
            item = WorkItem.of(RequestGroup(size), 0, image)
            batch = collate([item] * size, False)
            if executor.threads_for(batch, count) == count:
                executor(batch, count)
