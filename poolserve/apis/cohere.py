"""Cohere's embed API (`POST /v2/embed`, `/v1/embed`) over the embedding task: `input_type`
picks the model's prompt, `embedding_types` the compact types, `truncate` the end to cut.

Its request schema, its answer (documented and encoded) and its endpoints, all here.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import Field, StrictInt, StrictStr

from poolserve.apis.answer_docs import Documented
from poolserve.apis.declarations import Call, Endpoint, Inputs, Served, embedders
from poolserve.apis.envelope import base64_float32
from poolserve.apis.request_bodies import IMAGE_SOURCE, Part, StrictModel, WireModel, parts_of
from poolserve.engine.context import PoolingOptions, ServeContext
from poolserve.errors import InvalidRequestError
from poolserve.inputs.images.sources import ImageInput, named_images
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.embed import EmbedRequest
from poolserve.tasks.quantize import COMPACT_TYPES, quantize

EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
Version = Literal["1", "2"]


# -- the request ---------------------------------------------------------------------------------


class CohereInput(StrictModel):
    """One input of `inputs`: its content, one text or one image (an image-text model embeds
    each on its own)."""

    content: list[Part] = Field(min_length=1, max_length=1)


class CohereEmbedRequest(WireModel):
    """Cohere `POST /v2/embed` and `/v1/embed`: `texts`, or (an image-text model) `images` or
    `inputs`, one of them."""

    texts: list[StrictStr] | None = Field(None, min_length=1, description="the texts to embed")
    images: list[StrictStr] | None = Field(
        None, min_length=1, description="images to embed: " + IMAGE_SOURCE
    )
    inputs: list[CohereInput] | None = Field(
        None, min_length=1, description="texts and images, each an input's one content part"
    )
    model: StrictStr | None = None
    input_type: (
        Literal["search_document", "search_query", "classification", "clustering", "image"] | None
    ) = Field(
        None,
        description="picks the model's prompt for this use (docs: Routes by API family); "
        "default: the model's default prompt",
    )
    embedding_types: list[EmbeddingType] | None = Field(
        None, min_length=1, description="the types to return (default: float)"
    )
    truncate: Literal["NONE", "START", "END"] = Field(
        "END",
        description="inputs longer than the model takes (or than max_tokens): an error, or "
        "cut at the start or the end",
    )
    output_dimension: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="keep the first N dimensions (then re-normalize)"
    )
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="cut each input to N tokens, at the end `truncate` names"
    )

    def items(self) -> list[str | ImageInput]:
        """Its inputs, texts and images (`texts`, `images` or `inputs`: exactly one)."""
        given = [name for name in ("texts", "images", "inputs") if getattr(self, name) is not None]
        if len(given) != 1:
            raise InvalidRequestError(
                "send one of texts, images or inputs"
                + (f", not {' and '.join(given)}" if given else ""),
                param=given[-1] if given else "texts",
            )
        if self.texts is not None:
            if self.input_type == "image":
                raise InvalidRequestError(
                    'input_type "image" is for images; send them as `images` (or `inputs`), or '
                    "pick the input type of texts",
                    param="input_type",
                )
            return list(self.texts)
        if self.images is not None:
            return [ImageInput(image) for image in self.images]
        assert self.inputs is not None
        return [part for each in self.inputs for part in parts_of(each.content)]

    def count(self) -> int:
        return len(self.texts or self.images or self.inputs or ())


# -- the answer ----------------------------------------------------------------------------------


class CohereEmbeddings(Documented):
    """Each type asked for in `embedding_types` (docs/apis.md, compact embedding types)."""

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = Field(None, description="packed bits, as int8")
    ubinary: list[list[int]] | None = Field(None, description="packed bits, as uint8")
    base64: list[str] | None = Field(None, description="little-endian float32 bytes")


class CohereBilledUnits(Documented):
    input_tokens: int


class CohereApiVersion(Documented):
    version: Literal["1", "2"]


class CohereMeta(Documented):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits
    embedding_spaces: dict[str, str] = Field(
        description="poolserve's: by embedding type, the fingerprint of the space of the "
        "vectors (README: the embedding space)"
    )


class CohereEmbedResponse(Documented):
    """Cohere's embed response: by type, or (v1 without embedding_types) a list of floats."""

    id: str
    embeddings: CohereEmbeddings | list[list[float]]
    texts: list[str]
    meta: CohereMeta
    response_type: Literal["embeddings_by_type", "embeddings_floats"]


def _typed(vectors: np.ndarray, kind: EmbeddingType) -> Any:
    if kind == "float":
        return vectors
    if kind == "base64":
        return [base64_float32(row) for row in vectors]
    assert kind in COMPACT_TYPES
    return quantize(vectors, kind)


def embed_body(
    ctx: ServeContext[Any],
    vectors: np.ndarray,
    *,
    texts: list[str],
    embedding_types: Sequence[EmbeddingType] | None,
    version: Version,
) -> bytes:
    """By type (`{"float": [...], "int8": [...]}`) in v2, or in v1 when types are asked for;
    a plain list of float vectors in v1 otherwise, as Cohere answers."""
    if version == "1" and embedding_types is None:
        embeddings: Any = vectors
        response_type = "embeddings_floats"
    else:
        kinds: list[EmbeddingType] = list(dict.fromkeys(embedding_types or ["float"]))
        embeddings = {kind: _typed(vectors, kind) for kind in kinds}
        response_type = "embeddings_by_type"
    return orjson.dumps(
        {
            "id": ctx.request_id,
            "embeddings": embeddings,
            "texts": texts,
            "meta": {
                "api_version": {"version": version},
                "billed_units": {"input_tokens": ctx.prompt_tokens},
                # By type, as `embeddings` (poolserve's; Cohere's clients keep unknown fields).
                "embedding_spaces": ctx.embedding_spaces,
            },
            "response_type": response_type,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


# -- the endpoints -------------------------------------------------------------------------------


def _embed(version: Version, call: Call[CohereEmbedRequest]) -> Served:
    wire, service = call.wire, call.service
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    if wire.truncate == "NONE" and wire.max_tokens is not None:
        raise InvalidRequestError(
            "max_tokens cuts inputs, and truncate NONE says not to cut them; pass truncate "
            "START or END with max_tokens, or leave max_tokens out",
            param="max_tokens",
        )
    cut = None
    if wire.truncate != "NONE":
        cut = -1 if wire.max_tokens is None else min(wire.max_tokens, service.max_model_len)
    params = service.pooling_params(
        PoolingOptions(
            dimensions=wire.output_dimension,
            truncate_prompt_tokens=cut,
            truncation_side="left" if wire.truncate == "START" else "right",
        )
    )
    items = wire.items()
    texts = [each for each in items if isinstance(each, str)]
    prompt = service.tasks.prompts.for_input_type(
        None if wire.input_type == "image" else wire.input_type
    )
    encode = partial(embed_body, texts=texts, embedding_types=wire.embedding_types, version=version)
    names = "images[{}]" if wire.images is not None else "inputs[{}]"
    images = named_images(items, names)
    request = EmbedRequest(items, prompt, media=call.state.media, image_names=names)
    vectors = Vectors(types=tuple(dict.fromkeys(wire.embedding_types or ["float"])))
    return Served(embed, request, params, encode, wire.request_timeout, images, vectors)


TEXTS = Inputs[CohereEmbedRequest](
    "texts", CohereEmbedRequest.count, cut_with='`truncate: "END"` (or "START")'
)
VERSIONS: tuple[tuple[str, Version, str], ...] = (
    ("/v2/embed", "2", "embed_v2"),
    ("/v1/embed", "1", "embed_v1"),
)
ENDPOINTS = [
    Endpoint(
        path,
        CohereEmbedRequest,
        CohereEmbedResponse,
        partial(_embed, version),
        TEXTS,
        name,
        serves=embedders,
    )
    for path, version, name in VERSIONS
]
