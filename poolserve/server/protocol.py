"""Wire schemas: the JSON bodies clients send, validated with pydantic at the edge only.

Unknown fields are ignored, so clients of OpenAI and vLLM that send extra options keep working.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

TokenIds = list[StrictInt]


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(WireModel):
    """OpenAI `POST /v1/embeddings`, plus vLLM's pooling options."""

    input: StrictStr | list[StrictStr] | TokenIds | list[TokenIds]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: str | None = None
    truncate_prompt_tokens: Annotated[int, Field(ge=-1)] | None = None
    normalize: bool | None = None
    use_activation: bool | None = None

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

    def wants_normalize(self) -> bool:
        if self.normalize is not None:
            return self.normalize
        return True if self.use_activation is None else self.use_activation


class TokenizeRequest(WireModel):
    """vLLM `POST /tokenize`."""

    prompt: StrictStr
    model: str | None = None
    add_special_tokens: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(WireModel):
    """vLLM `POST /detokenize`."""

    tokens: TokenIds
    model: str | None = None
