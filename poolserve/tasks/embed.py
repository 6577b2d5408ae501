"""The embedding task: texts or token ids in, one vector each out (normalized, sliced)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import orjson

from poolserve.engine.tokenizer import TextTokenizer, TokenizedText
from poolserve.errors import InputTooLongError, InvalidRequestError
from poolserve.tasks.base import PoolingParams, ServeContext

EncodingFormat = Literal["float", "base64"]
EmbedInputs = list[str] | list[list[int]]


@dataclass(frozen=True)
class EmbedRequest:
    """An embedding request as the engine sees it (validated at the edge)."""

    inputs: EmbedInputs
    encoding_format: EncodingFormat = "float"


def resolve_pooling_params(
    *,
    max_model_len: int,
    embedding_dim: int,
    num_special_tokens: int,
    model_normalizes: bool = True,
    normalize: bool | None = None,
    dimensions: int | None = None,
    truncate_prompt_tokens: int | None = None,
) -> PoolingParams:
    """Check the request's pooling options against the model and fill in their meaning.

    `normalize` None follows the model's configuration (a sentence-transformers Normalize module,
    or normalization for a plain transformers directory), as sentence-transformers would.
    """
    if dimensions is not None and not 1 <= dimensions <= embedding_dim:
        raise InvalidRequestError(
            f"dimensions must be between 1 and {embedding_dim} for this model, got {dimensions}",
            param="dimensions",
        )
    truncate = truncate_prompt_tokens
    if truncate is not None:
        if truncate == -1:
            truncate = max_model_len
        elif truncate > max_model_len:
            raise InvalidRequestError(
                f"truncate_prompt_tokens ({truncate}) is more than the model's maximum length "
                f"({max_model_len}); pass at most {max_model_len}, or -1 for the maximum",
                param="truncate_prompt_tokens",
            )
        elif truncate < max(num_special_tokens, 1):
            raise InvalidRequestError(
                f"truncate_prompt_tokens must be -1 or at least {max(num_special_tokens, 1)} "
                f"(the model's special tokens count), got {truncate}",
                param="truncate_prompt_tokens",
            )
    return PoolingParams(
        normalize=model_normalizes if normalize is None else normalize,
        dimensions=dimensions,
        truncate_prompt_tokens=truncate,
    )


def too_long_message(index: int, length: int, max_model_len: int) -> str:
    return (
        f"input {index} has {length} tokens, but the model accepts at most {max_model_len}; "
        "shorten it, or pass `truncate_prompt_tokens` (a number of tokens, or -1 for the "
        "model's maximum) to cut it"
    )


class EmbedTask:
    """Task processor for `/v1/embeddings` and the offline `embed`."""

    def __init__(self, *, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def inputs(self, ctx: ServeContext[EmbedRequest]) -> Sequence[str] | Sequence[list[int]]:
        return ctx.request.inputs

    def preprocess(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> list[TokenizedText]:
        truncate = ctx.pooling_params.truncate_prompt_tokens
        if inputs and isinstance(inputs[0], str):
            texts = [str(text) for text in inputs]
            id_lists = tokenizer.encode_batch(texts, truncate_to=truncate)
        else:
            id_lists = [list(ids) for ids in inputs]  # type: ignore[arg-type]
            for ids in id_lists:
                tokenizer.check_token_ids(ids, param="input")
            if truncate is not None:
                id_lists = [ids[:truncate] for ids in id_lists]
        limit = self.max_model_len
        for offset, ids in enumerate(id_lists):
            if len(ids) > limit:
                message = too_long_message(start + offset, len(ids), limit)
                raise InputTooLongError(message, param="input")
        return [TokenizedText(ids, None) for ids in id_lists]

    def postprocess(self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]) -> np.ndarray:
        vectors = np.stack(outputs).astype(np.float32, copy=False)
        params = ctx.pooling_params
        if params.dimensions is not None:
            vectors = vectors[:, : params.dimensions]
        if params.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return np.ascontiguousarray(vectors)

    def build_response(self, ctx: ServeContext[EmbedRequest], result: np.ndarray) -> bytes:
        if ctx.request.encoding_format == "base64":
            little_endian = result.astype("<f4", copy=False)
            embeddings: list[object] = [
                base64.b64encode(row.tobytes()).decode("ascii") for row in little_endian
            ]
        else:
            embeddings = list(result)
        return orjson.dumps(
            {
                "id": f"embd-{ctx.request_id}",
                "object": "list",
                "created": ctx.timings.created,
                "model": ctx.model_name,
                "data": [
                    {"object": "embedding", "index": index, "embedding": embedding}
                    for index, embedding in enumerate(embeddings)
                ],
                "usage": {"prompt_tokens": ctx.prompt_tokens, "total_tokens": ctx.prompt_tokens},
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
