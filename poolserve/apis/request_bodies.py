"""Wire schemas: the JSON bodies clients send, validated with pydantic at the edge only.

An unknown field is an error that names the nearest known one (a typo such as `dimension` must
not silently return full-size vectors). The few fields other API families send that change
nothing here are declared and ignored (`IGNORED_FIELDS`, listed in docs/apis.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from poolserve.config.priorities import HIGHEST_PRIORITY, LOWEST_PRIORITY, PRIORITY_RANGE
from poolserve.inputs.images.sources import ImageInput

TokenIds = list[StrictInt]


class StrictModel(BaseModel):
    """A JSON object whose unknown fields are refused, and whose optional fields take their
    default when sent as null (clients do: LangChain's CohereEmbeddings sends
    `"truncate": null`); a required field sent as null is still an error. A number must be
    finite (JSON has no infinity or NaN; 1e999 reads as one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        if not isinstance(data, dict) or None not in data.values():
            return data
        optional = {
            name
            for key, field in cls.model_fields.items()
            if not field.is_required()
            for name in (key, field.alias)
            if name
        }
        return {k: v for k, v in data.items() if v is not None or k not in optional}


# Fields clients of other servers send that poolserve accepts and ignores, with why.
IGNORED_FIELDS = {
    "user": "OpenAI's end-user id, for the provider's abuse monitoring",
    "request_id": "vLLM's request id; poolserve's is the x-request-id header",
}


class WireModel(StrictModel):
    """A request body."""

    # Seconds this request may take (at most the server's --request-timeout); as the
    # `x-request-timeout` header.
    request_timeout: Annotated[float, Strict(), Field(gt=0)] | None = None
    user: StrictStr | None = Field(default=None, description=IGNORED_FIELDS["user"] + " (ignored)")
    # As the `x-priority` header; see engine/lanes.py.
    priority: Annotated[StrictInt, Field(ge=HIGHEST_PRIORITY, le=LOWEST_PRIORITY)] | None = Field(
        default=None,
        description=f"vLLM's scheduling priority: {PRIORITY_RANGE} (as the x-priority header). "
        "Above 0 is background work: it runs in time slices and holds at most "
        "--background-share of the server's queue",
    )
    request_id: StrictStr | None = Field(
        default=None, description=IGNORED_FIELDS["request_id"] + " (ignored)"
    )


IMAGE_SOURCE = (
    "a data URI (data:image/png;base64,...); an http(s) URL of a host the server's "
    "--allowed-media-domains names; or a path under its --allowed-local-media-path"
)


class TextPart(StrictModel):
    type: Literal["text"]
    text: StrictStr


class ImageUrl(StrictModel):
    url: StrictStr = Field(description=IMAGE_SOURCE)
    detail: StrictStr | None = Field(None, description="OpenAI's detail level (ignored)")


class ImagePart(StrictModel):
    type: Literal["image_url"]
    image_url: ImageUrl


# A content part of a message (OpenAI's, vLLM's) or of a Cohere input: a text or an image.
Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]


def parts_of(parts: list[TextPart | ImagePart]) -> list[str | ImageInput]:
    """Content parts as texts and images (`ImageInput`), in order."""
    return [
        part.text if isinstance(part, TextPart) else ImageInput(part.image_url.url)
        for part in parts
    ]


Truncation = Annotated[StrictInt, Field(ge=-1)]
TextOrTexts = StrictStr | list[StrictStr]
TEXT_OR_TEXTS = "a string or an array of strings"
Scorer = Literal["dense", "sparse", "colbert", "m3"]
SCORER = (
    "BGE-M3: score by its dense vectors (default), lexical weights, ColBERT vectors, or M3's "
    "weighted sum of the three; other models score one way"
)


class ScoringRequest(WireModel):
    """The options vLLM's `/score` and the shared rerank shape both take."""

    truncate_prompt_tokens: Truncation | None = None
    truncation_side: Literal["right", "left"] = Field(
        "right", description="which end truncation cuts: the last tokens, or the first"
    )
    max_tokens_per_doc: Annotated[StrictInt, Field(ge=1)] | None = None
    use_activation: StrictBool | None = None
    scorer: Scorer | None = Field(None, description=SCORER)


class InputRequest(WireModel):
    """A request whose `input` is a text, texts, token ids or lists of token ids (vLLM's form)."""

    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds] = Field(
        description="a string, an array of strings, an array of token ids, or an array of "
        "arrays of token ids"
    )
    model: StrictStr | None = None
    truncate_prompt_tokens: Truncation | None = None
    truncation_side: Literal["right", "left"] = Field(
        "right", description="which end truncation cuts: the last tokens, or the first"
    )
    use_activation: StrictBool | None = None

    @field_validator("input")
    @classmethod
    def _not_empty(
        cls, value: str | list[str] | list[int] | list[list[int]]
    ) -> str | list[str] | list[int] | list[list[int]]:
        # Empty and whitespace-only texts are refused where every entrance meets them (when
        # tokenized, in the CPU pool), with the same message from HTTP and Python.
        if not isinstance(value, list):  # a text (or an image, where the body takes one)
            return value
        if not value:
            raise ValueError("must not be an empty list; send at least one input")
        if not isinstance(value[0], list):  # texts, or one list of ids: none can be empty
            return value
        for index, item in enumerate(value):
            if isinstance(item, list) and not item:
                raise ValueError(f"item {index} is an empty list of token ids")
        return value

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: one text, one token-id list, or lists of either."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):
            return [value]
        return value

    def input_count(self) -> int:
        """How many inputs `inputs()` holds, without making the list."""
        value = self.input
        return 1 if isinstance(value, str) or isinstance(value[0], int) else len(value)


class TokenizeRequest(WireModel):
    """vLLM `POST /tokenize`."""

    prompt: StrictStr
    model: StrictStr | None = None
    add_special_tokens: StrictBool = True
    return_token_strs: StrictBool = False


class DetokenizeRequest(WireModel):
    """vLLM `POST /detokenize`."""

    tokens: TokenIds
    model: StrictStr | None = None
