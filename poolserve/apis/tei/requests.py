"""text-embeddings-inference's request bodies, validated at the edge."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from poolserve.apis.request_bodies import TEXT_OR_TEXTS, StrictModel, TextOrTexts, WireModel

Direction = Annotated[
    Literal["Right", "Left", "right", "left"], Field(description="which end truncation cuts")
]


def side_of(direction: Direction) -> Literal["right", "left"]:
    return "left" if direction.lower() == "left" else "right"


class TeiRequest(WireModel):
    """What text-embeddings-inference's routes share: truncation, off by default."""

    truncate: StrictBool | None = Field(
        None,
        description="cut inputs longer than the model takes (false: they are a 400; left out: "
        "the server's --long-input, which may also chunk them on /embed; on /rerank, each text "
        "cut to the room beside the query)",
    )
    truncation_direction: Direction = "Right"

    def side(self) -> Literal["right", "left"]:
        return side_of(self.truncation_direction)


class TeiEmbedRequest(TeiRequest):
    """Text-embeddings-inference `POST /embed` (and `POST /` for an embedding model)."""

    inputs: TextOrTexts = Field(description=TEXT_OR_TEXTS)
    normalize: StrictBool = True
    prompt_name: StrictStr | None = Field(None, description="one of the model's prompts")
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_classification(cls, data: Any) -> Any:
        """The Hugging Face Inference API's text classification (`InferenceClient.
        text_classification`) sends `parameters`; an embedding model cannot answer it."""
        parameters = data.get("parameters") if isinstance(data, dict) else None
        if isinstance(parameters, dict) and {"function_to_apply", "top_k"} & parameters.keys():
            raise ValueError(
                "`parameters` asks for text classification, and this model is an embedding "
                "model: it embeds `inputs` (feature extraction) or compares `source_sentence` "
                "with `sentences`; classify with a classifier or cross-encoder"
            )
        return data


class TeiEmbedAllRequest(TeiRequest):
    """Text-embeddings-inference `POST /embed_all`: every token's vector."""

    inputs: TextOrTexts = Field(description=TEXT_OR_TEXTS)
    prompt_name: StrictStr | None = Field(None, description="one of the model's prompts")


class ClassificationParameters(StrictModel):
    """The Hugging Face Inference API's text-classification parameters."""

    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None
    top_k: Annotated[StrictInt, Field(ge=1)] | None = None


TextPair = Annotated[list[StrictStr], Field(min_length=2, max_length=2)]


class TeiPredictRequest(TeiRequest):
    """Text-embeddings-inference `POST /predict` (and `POST /` for a classifier)."""

    inputs: StrictStr | list[StrictStr] | list[TextPair] = Field(
        description="a string, an array of strings, or (for a cross-encoder) an array of "
        "[text, text] pairs"
    )
    raw_scores: StrictBool = False
    parameters: ClassificationParameters | None = None


class EmptyParameters(StrictModel):
    """The Hugging Face Inference API sends `parameters: {}` with some tasks."""


class SimilarityInputs(StrictModel):
    source_sentence: StrictStr
    sentences: list[StrictStr] = Field(min_length=1)


class TeiSimilarityRequest(TeiRequest):
    """Text-embeddings-inference `POST /similarity` (and `POST /` with these inputs)."""

    inputs: SimilarityInputs
    parameters: EmptyParameters | None = None


class TeiRerankRequest(TeiRequest):
    """Text-embeddings-inference's `POST /rerank` shape: `query` and `texts`."""

    query: StrictStr
    texts: list[StrictStr] = Field(min_length=1)
    raw_scores: StrictBool = False
    return_text: StrictBool = False


class TeiTokenizeRequest(WireModel):
    """Text-embeddings-inference's `POST /tokenize` shape: `inputs`."""

    inputs: TextOrTexts = Field(description=TEXT_OR_TEXTS)
    add_special_tokens: StrictBool = True


class SparseEmbedRequest(WireModel):
    """Text-embeddings-inference `POST /embed_sparse`."""

    inputs: TextOrTexts = Field(description=TEXT_OR_TEXTS)
    model: StrictStr | None = None
    truncate: StrictBool = False
    truncation_direction: Direction = "Right"
    prompt_name: StrictStr | None = Field(None, description="one of the model's prompts")

    def side(self) -> Literal["right", "left"]:
        return side_of(self.truncation_direction)

    @field_validator("inputs")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        if not value and isinstance(value, list):
            raise ValueError("send at least one input")
        return value
