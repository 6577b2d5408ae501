"""Ray Data: a dataset's text column embedded by a pool of engine actors (`map_batches`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from poolserve.config import EngineConfig, ModelConfig
from poolserve.errors import InvalidRequestError
from poolserve.ray.cluster import actor_engine_config

if TYPE_CHECKING:
    from ray.data import Dataset


class EmbedBatches:
    """One actor of the pool: an engine, embedding each batch (an Arrow table) it is given."""

    def __init__(
        self,
        model_config: ModelConfig,
        engine_config: EngineConfig,
        column: str,
        options: dict[str, Any],
    ) -> None:
        from poolserve.offline.model_engine import Engine

        self.engine = Engine(model_config=model_config, engine_config=engine_config)
        self.column = column
        self.options = options

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.column not in batch.column_names:
            raise InvalidRequestError(
                f"the dataset has no column {self.column!r}; its columns: "
                + ", ".join(batch.column_names)
                + " (pass column=...)"
            )
        texts = batch.column(self.column).to_pylist()
        counted = self.engine.embed_counted_later(texts, **self.options).result()
        vectors, tokens = counted.vectors, counted.tokens
        return batch.append_column(
            "embedding",
            pa.FixedSizeListArray.from_arrays(
                pa.array(np.ascontiguousarray(vectors, np.float32).ravel()), vectors.shape[1]
            ),
        ).append_column("tokens", pa.array(tokens, pa.int32()))

    def __del__(self) -> None:
        if hasattr(self, "engine"):
            self.engine.close()


def embed_dataset(
    ds: Dataset,
    model: str | None = None,
    *,
    column: str = "text",
    replicas: int = 1,
    replica_cpus: float = 1.0,
    batch_size: int = 1024,
    normalize: bool | None = None,
    dimensions: int | None = None,
    truncate: bool = False,
    model_config: ModelConfig | None = None,
    engine_config: EngineConfig | None = None,
) -> Dataset:
    """`ds` with two more columns: `embedding` (a fixed-size list of float32) of each row's
    `column`, and `tokens` (its token count), as `Engine.embed` gives them.

    `replicas` engine actors of `replica_cpus` CPUs each embed batches of `batch_size` rows
    (Ray Data's `map_batches` over an actor pool; lazy, like every Ray Data transform). A text
    too long for the model fails the dataset unless `truncate`; blank or non-text values fail it
    too, naming the value's position in its batch."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    if replica_cpus <= 0:
        raise ValueError(f"replica_cpus must be more than 0, got {replica_cpus}")
    model_config = ModelConfig.of(model, model_config)
    options = {
        "normalize": normalize,
        "dimensions": dimensions,
        "truncate_prompt_tokens": -1 if truncate else None,
    }
    return ds.map_batches(
        EmbedBatches,
        fn_constructor_kwargs={
            "model_config": model_config,
            "engine_config": actor_engine_config(engine_config or EngineConfig(), replica_cpus),
            "column": column,
            "options": options,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        concurrency=replicas,
        num_cpus=replica_cpus,
    )
