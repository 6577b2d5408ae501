"""Wire schemas: the JSON bodies clients send, validated with pydantic at the edge only.

Unknown fields are ignored, so clients of OpenAI and vLLM that send extra options keep working.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)

TokenIds = list[StrictInt]


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(WireModel):
    """OpenAI `POST /v1/embeddings`, plus vLLM's pooling options."""

    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    truncate_prompt_tokens: Annotated[StrictInt, Field(ge=-1)] | None = None
    normalize: StrictBool | None = None
    use_activation: StrictBool | None = None

    @field_validator("input")
    @classmethod
    def _not_empty(
        cls, value: str | list[str] | list[int] | list[list[int]]
    ) -> str | list[str] | list[int] | list[list[int]]:
        if isinstance(value, str):
            if not value:
                raise ValueError("must not be an empty string; send at least one character")
            return value
        if not value:
            raise ValueError("must not be an empty list; send at least one input")
        for index, item in enumerate(value):
            if isinstance(item, str | list) and not item:
                raise ValueError(f"item {index} is empty; every input needs content")
        return value

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: one text, one token-id list, or lists of either."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):
            return [value]
        return value

    def wants_normalize(self) -> bool | None:
        """`normalize`, or vLLM's `use_activation`; None leaves it to the model's config."""
        return self.normalize if self.normalize is not None else self.use_activation


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
