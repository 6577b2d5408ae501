"""The pooling task with Python results where they differ from the HTTP routes': a sparse model's
weights as {token id: weight} (`Engine.pool`, `Engine.embed_sparse`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.tasks.pooling import PoolingRequest, PoolingTask


class PythonPooling(PoolingTask):
    """The pooling task with Python results: sparse weights as {token id: weight}."""

    def postprocess(
        self, ctx: ServeContext[PoolingRequest], outputs: list[np.ndarray]
    ) -> list[Any]:
        results = super().postprocess(ctx, outputs)
        if ctx.request.head != "sparse":
            return results
        return [{entry["index"]: entry["value"] for entry in entries} for entries in results]
