"""Answer bodies every API family shares, described for the OpenAPI document (`/docs`,
`/openapi.json`).

The tasks build their bodies as bytes in the CPU pool (no pydantic on the hot path); these models
say what those bytes hold. A test validates every route's real responses against them, so the
documentation cannot drift from what is sent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Documented(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(Documented):
    message: str = Field(description="what went wrong and how to fix the request")
    type: str = Field(description="invalid_request_error, rate_limit_error, ...")
    param: str | None = Field(description="the request field at fault, where there is one")
    code: int = Field(description="the HTTP status")


class ErrorBody(Documented):
    """OpenAI's error shape: on every route but text-embeddings-inference's, and on those for
    what is refused at the door (401; 413 and 429 before the body is read)."""

    error: ErrorDetail


class Usage(Documented):
    prompt_tokens: int
    total_tokens: int


class ListEnvelope(Documented):
    id: str
    object: Literal["list"]
    created: int = Field(description="Unix seconds")
    model: str
    usage: Usage
    embedding_space: str | None = Field(
        None,
        description="the fingerprint of the space its vectors live in, as the x-embedding-space "
        "header carries it (README: the embedding space); absent where it has no vectors",
    )


class SparseEntry(Documented):
    index: int = Field(description="vocabulary id")
    value: float


class TokenizeResponse(Documented):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


class DetokenizeResponse(Documented):
    prompt: str


class ModelCard(Documented):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str = Field(description="the model's own id or directory name")
    kind: str = Field(
        description="what the model is: embedding, cross_encoder, classifier, sparse, "
        "late_interaction or token_classifier"
    )
    routes: list[str] = Field(description="the model-specific routes it serves")
    max_model_len: int
    embedding_dim: int | None = Field(description="its embeddings' size (null: it embeds none)")
    embedding_space: str | None = Field(
        description="the fingerprint of the space of its float embeddings at their default "
        "dimensions and normalization, as x-embedding-space carries it (null: it embeds none)"
    )
    input_modalities: list[Literal["text", "image"]] = Field(
        description="what its inputs may be: texts, and images for an image-text model"
    )
    prompts: dict[str, str] = Field(
        description="the model's prompts by name (`prompt_name` in a request), with --prompt's"
    )
    default_prompt_name: str | None = Field(
        description="the prompt applied when a request names none (null: none)"
    )


class ModelList(Documented):
    object: Literal["list"]
    data: list[ModelCard]


class ModelHealth(Documented):
    runners: int = Field(description="runner threads the model was started with")
    runners_alive: int = Field(description="those still serving")


class Health(Documented):
    """200 while every model has a runner alive (503 otherwise, with an error body)."""

    status: Literal["ok"]
    models: dict[str, ModelHealth] = Field(description="each model's runners, by served name")


class VersionBody(Documented):
    version: str


class RunnerStats(Documented):
    index: int
    alive: bool
    batches: int
    items: int
    failed_batches: int
    busy_seconds: float
    cpu_seconds: float
    express: bool = Field(
        description="the express runner: requests of priority 0 and above beside background work"
    )


class EngineStatsBody(Documented):
    """One model's engine counters since start-up."""

    batches: int
    items: int
    tokens: int = Field(description="the inputs' own tokens (padded_tokens: with padding)")
    padded_tokens: int
    failed_batches: int
    busy_seconds: float = Field(description="wall seconds the runners spent in their batches")
    cpu_seconds: float = Field(
        description="CPU seconds the runners' own threads spent in them (less than busy_seconds "
        "by the time they waited for a core or the GIL; not the threads a batch borrows)"
    )
    items_skipped: int = Field(description="inputs dropped before the model (cancelled)")
    max_batch_size: int
    batch_sizes: dict[str, int] = Field(description="batches by their number of inputs")
    overlapped_batches: int
    max_concurrent_batches: int
    runners: list[RunnerStats]
    queued_items: int
    tokens_in_work: int = Field(description="tokens waiting or in a running batch")
    peak_tokens_in_work: int
    compiled: str = Field(
        description="the main head's forward: built (compiled ahead of time at this start), "
        "cached (loaded from the compile cache), jit (torch.compile) or eager"
    )
    packed_heads: list[str] = Field(
        description="the outputs whose batches run packed (several inputs to a row, no "
        "padding to the longest); the others run padded, in length buckets"
    )


class LaneStatsBody(Documented):
    """One priority lane's figures (see the README's "Priority lanes")."""

    requests: int = Field(description="requests answered")
    queue_seconds: float = Field(description="seconds they waited for a runner, in all")
    queued_items: int = Field(description="inputs waiting for a runner now")
    requests_waiting: int = Field(description="requests waiting at the door for room now")
    refused: int = Field(description="requests refused for want of room (429)")


class StatsBody(EngineStatsBody):
    """The engines' and admission's counters since start-up: the first model's engine at the
    top level, every model's under `models`."""

    models: dict[str, EngineStatsBody] = Field(description="each model's, by served name")
    requests_in_flight: int
    requests_waiting: int = Field(description="requests waiting at the door for room now")
    requests_waited: int = Field(description="requests that have waited at the door, in all")
    admitted_tokens: int = Field(
        description="what admitted requests cost now (docs: Production and limits)"
    )
    peak_admitted_tokens: int
    max_queued_tokens: int
    admitted_background_tokens: int = Field(
        description="what admitted background requests (priority above 0) cost now"
    )
    max_background_tokens: int = Field(
        description="the most they may cost (--background-share of --max-queued-tokens)"
    )
    lanes: dict[str, LaneStatsBody] = Field(
        description="by priority, the lanes that have had a request, highest first"
    )


class ModelSample(Documented):
    requests_per_s: float
    queue_items: int
    batches: int
    mean_batch_size: float | None
    padding_efficiency: float | None = Field(
        description="the inputs' own tokens over the tokens their batches held (1: no padding)"
    )


class LiveSampleBody(Documented):
    t: float = Field(description="when the sample was taken (Unix seconds)")
    requests_per_s: float
    p50_ms: float | None = Field(description="null: no request was answered in the interval")
    p90_ms: float | None
    p99_ms: float | None
    queue_items: int
    requests_in_flight: int
    batches: int
    mean_batch_size: float | None
    padding_efficiency: float | None
    models: dict[str, ModelSample] = Field(description="each model's, by served name")


class HistoryBody(Documented):
    """The server's last minutes, oldest sample first."""

    interval_s: float
    requests_total: int = Field(description="requests answered for a model since start-up")
    samples: list[LiveSampleBody]
