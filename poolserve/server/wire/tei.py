"""text-embeddings-inference's shapes: bare lists, no envelope."""

from __future__ import annotations

from typing import Any

import orjson

from poolserve.tasks.base import ServeContext


def sparse_body(ctx: ServeContext[Any], outputs: list[Any]) -> bytes:
    """`/embed_sparse`: per input, its non-zero `{index, value}` weights."""
    return orjson.dumps(outputs)
